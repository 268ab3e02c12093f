"""Operator functions (``tidemark peer list | purge | status``) and ``bench send`` on the real
stack."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass

import pytest

from tests.support import wait_for
from tidemark.bench.peer import bench_send
from tidemark.log.consumer import read_to_end
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import Settings
from tidemark.peer_client import PeerOptions, message
from tidemark.peer_client.direct import peer_status as ask_endpoint
from tidemark.peer_client.exceptions import (
    PeerUnreachableError,
    UnknownPeerError,
    WrongEnvironmentError,
)
from tidemark.peer_client.operator import list_peers, peer_status, purge_peer
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import peer_codec

pytestmark = pytest.mark.integration


@message("otest.Job")
@dataclass
class Job:
    n: int


def test_list_and_purge(fresh_settings: Settings) -> None:
    opts = PeerOptions(heartbeat_ms=500)
    with Peer("A", "test", fresh_settings, opts) as a, Peer("P", "prod", fresh_settings, opts):
        b = Peer("B", "test", fresh_settings, opts)
        b.handler(Job)(lambda msg: None)
        b.start()
        b_incarnation = b.incarnation
        b.stop()
        a.wait_for_peer("A")
        for i in range(5):
            a.send("B", Job(i))
        rows = {r["peer_id"]: r for r in list_peers(fresh_settings)}
        assert set(rows) == {"A", "B", "P"}
        assert rows["A"]["up"] and rows["A"]["endpoint"] == a.endpoint
        assert rows["A"]["incarnation"] == a.incarnation and rows["A"]["environment"] == "test"
        assert not rows["B"]["up"] and rows["B"]["incarnation"] == b_incarnation
        assert rows["B"]["subscriptions"] == ["otest.Job"] and rows["P"]["environment"] == "prod"
        assert rows["A"]["heartbeat_age_s"] < 10 and rows["A"]["last_heartbeat_ms"] > 0
        assert [r["peer_id"] for r in list_peers(fresh_settings, "test")] == ["A", "B"]

        doc = peer_status(fresh_settings, "A", "test")
        assert doc["phase"] == "normal" and doc["incarnation"] == a.incarnation
        assert doc["peer_id"] == "A" and isinstance(doc["stats"], dict)
        cli = subprocess.run(
            [sys.executable, "-m", "tidemark", "peer", "status", "A", "--environment", "test",
             "--bootstrap", fresh_settings.bootstrap, "--topic-prefix",
             fresh_settings.topic_prefix, "--json"], capture_output=True, text=True, timeout=120)
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["incarnation"] == a.incarnation
        with pytest.raises(PeerUnreachableError, match="peer B .*does not answer"):
            peer_status(fresh_settings, "B", "test")  # stopped: its endpoint is closed
        with pytest.raises(WrongEnvironmentError):
            peer_status(fresh_settings, "P", "test")
        with pytest.raises(PeerUnreachableError, match="PERMISSION_DENIED"):
            ask_endpoint(a.endpoint, "prod")  # another environment asking A directly

        out = purge_peer(fresh_settings, "B", "test")
        assert out["peer_id"] == "B" and out["up"] is False
        assert out["partition"] == partition_for_peer("B", fresh_settings.partitions)
        assert out["below"] >= 5  # txlog's end in B's partition: its 5 Sends are below
        with pytest.raises(UnknownPeerError, match="peer Z is not registered"):
            purge_peer(fresh_settings, "Z", "test")
        with pytest.raises(WrongEnvironmentError, match="registered in environment 'prod'"):
            purge_peer(fresh_settings, "P", "test")
    codec = peer_codec()
    names = [codec.decode(m.value()).name for msgs in read_to_end(fresh_settings, "txlog")
             for m in msgs if m.key() == b"B"]
    assert names == ["Send"] * 5  # the Purge is not in txlog: in purges, B's partition
    purges = [m for msgs in read_to_end(fresh_settings, "purges") for m in msgs]
    assert [(m.key(), m.partition()) for m in purges] == [(b"B", out["partition"])]
    rec = codec.decode(purges[0].value()).record
    assert (rec["peer"], rec["txlog_partition"], rec["below_offset"]) == \
        ("B", out["partition"], out["below"])


def test_bench_send_reports_both_sides(fresh_settings: Settings) -> None:
    out = bench_send(fresh_settings, messages=4000, rounds=1, recipients=10)
    assert out["raw_msgs_per_s"] > 0 and out["peer_msgs_per_s"] > 0
    assert out["ratio"] == pytest.approx(out["peer_msgs_per_s"] / out["raw_msgs_per_s"], abs=2e-3)
    assert out["tracked_msgs_per_s"] > 0
    assert out["record_bytes"] > out["payload_bytes"]


def test_metrics_endpoint_serves_the_peers_counters(fresh_settings: Settings) -> None:
    got: list[int] = []
    b = Peer("MB", "test", fresh_settings, PeerOptions(metrics_bind="127.0.0.1:0"))
    b.handler(Job)(lambda msg: got.append(msg.n))
    b.start()
    try:
        assert b.metrics_endpoint is not None
        url = f"http://{b.metrics_endpoint}/metrics"
        with Peer("MA", "test", fresh_settings) as a:
            a.wait_for_peer("MB")
            for i in range(3):
                a.send("MB", Job(i))
            wait_for(lambda: len(got) == 3, 60, what="3 messages handled by MB")
            text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'tidemark_peer_handled_total{peer="MB"} 3.0' in text
        assert 'tidemark_peer_phase{peer="MB",tidemark_peer_phase="normal"} 1.0' in text
        assert f'incarnation="{b.incarnation}"' in text
    finally:
        b.stop()
    with pytest.raises(OSError):  # stopped: no longer served
        urllib.request.urlopen(url, timeout=5)
