"""kill -9 of a peer process: senders never raise for persistent messages, every Send is in
txlog, none sent after the kill is marked as delivered to the dead incarnation, and the
peer id restarts at once (the dead registration is taken over, not waited out)."""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import cluster
from tests.support import ROOT, wait_for
from tidemark.log.consumer import read_to_end
from tidemark.log.settings import Settings
from tidemark.peer_client import PeerOptions, message
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import peer_codec
from tidemark.stack.processes import Child

pytestmark = pytest.mark.fault

B_SCRIPT = textwrap.dedent("""
    import sys, threading
    from dataclasses import dataclass
    from tidemark.peer_client import Peer, PeerOptions, message

    @message("ftest.Work")
    @dataclass
    class Work:
        n: int

    b = Peer("B", "test", options=PeerOptions(heartbeat_ms=500, dead_after_ms=30000))
    b.handler(Work)(lambda msg: None)
    b.start()
    print("ready", b.incarnation, flush=True)
    threading.Event().wait()
""")


@message("ftest.Work")
@dataclass
class Work:
    n: int


def test_sigkill_of_a_recipient(fresh_settings: Settings, tmp_path: Path) -> None:
    env = {**os.environ, "TIDEMARK_BOOTSTRAP": fresh_settings.bootstrap,
           "TIDEMARK_TOPIC_PREFIX": fresh_settings.topic_prefix,
           "TIDEMARK_PARTITIONS": str(fresh_settings.partitions), **cluster.client_env()}
    proc = Child([sys.executable, "-c", B_SCRIPT], tmp_path / "b.err", env=env, cwd=ROOT,
                 talk=True)
    try:
        line = proc.readline()
        assert line.startswith("ready"), proc.log_tail()
        old = line.split()[1]
        opts = PeerOptions(heartbeat_ms=500, dead_after_ms=30_000, direct_timeout_ms=2000)
        with Peer("A", "test", fresh_settings, opts) as a:
            a.wait_for_peer("B", condition=lambda e: e.incarnation == old)
            before = [a.send("B", Work(i)) for i in range(50)]
            proc.kill()
            after = [a.send("B", Work(i)) for i in range(50, 100)]  # never raises
            b2 = Peer("B", "test", fresh_settings, opts).start()   # no waiting for expiry
            try:
                assert b2.incarnation != old
                a.wait_for_peer("B", condition=lambda e: e.incarnation == b2.incarnation)
                wait_for(lambda: a.send("B", Work(100)) and True, 30, what="a send to B2")
            finally:
                b2.stop()
    finally:
        proc.kill()
    codec = peer_codec()
    sends = {r["message_id"]: r for msgs in read_to_end(fresh_settings, "txlog")
             for m in msgs if (r := codec.decode(m.value()).record) and
             codec.decode(m.value()).name == "Send"}
    assert set(before + after) <= set(sends)
    assert all(sends[m]["direct_incarnation"] == old for m in before)
    assert not any(sends[m]["direct_incarnation"] == old for m in after)
