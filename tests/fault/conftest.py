"""Fixtures shared by the fault drills of this folder: a stack over the session's cluster,
and peers in processes of their own (the drills SIGKILL them)."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import cluster
from tests.support import HandlerLog, PeerScript
from tidemark.log.topics import delete_topic_set
from tidemark.stack.acls import grant_roles
from tidemark.stack.launcher import LocalStack

# A recipient in its own process. argv: state dir, peer id, record file (HandlerLog),
# the n whose handler writes "blocked" and waits, before it is done, until "release" is read
# on stdin (-1: none), PeerOptions and ReplicaReplayer keywords as JSON.
RECIPIENT_SCRIPT = textwrap.dedent("""
    import json, sys, threading
    from tidemark.log.settings import load_settings
    from tidemark.peer_client import MessageContext, Peer, PeerOptions
    from tidemark.peer_client.replay import ReplicaReplayer
    from tests.support import HandlerRecord, Job, serve_peer

    state, peer_id, path, block, options, replay = sys.argv[1:7]
    settings = load_settings(state_dir=state)
    record, go = HandlerRecord(path), threading.Event()
    peer = Peer(peer_id, None, settings, PeerOptions(**json.loads(options)),
                replayer=ReplicaReplayer(settings, **json.loads(replay)))

    def on_job(msg: Job, ctx: MessageContext) -> None:
        if msg.n == int(block):
            record.write("blocked", peer.incarnation, ctx.message_id, msg.n)
            go.wait()  # until "release", or the SIGKILL
        record.write("done", peer.incarnation, ctx.message_id, msg.n)

    peer.handler(Job)(on_job)
    serve_peer(peer, {"release": go.set})
""")


@pytest.fixture
def recipient(peer_scripts: Callable[..., PeerScript]) -> Callable[..., PeerScript]:
    """``start(stack, peer_id, record, block=-1, replay=None, **options)``: a run of
    :data:`RECIPIENT_SCRIPT` with these PeerOptions and ReplicaReplayer keywords."""
    def start(stack: LocalStack, peer_id: str, record: HandlerLog, block: int = -1,
              replay: dict[str, Any] | None = None, **options: Any) -> PeerScript:
        return peer_scripts(stack, peer_id, RECIPIENT_SCRIPT, str(record.path), str(block),
                            json.dumps(options), json.dumps(replay or {}))
    return start


@pytest.fixture
def external_stack(request: pytest.FixtureRequest, tmp_path: Path, bootstrap: str,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    """A LocalStack over the session's Kafka cluster (``external``: its brokers are not the
    stack's own) with a fresh topic set of 4 partitions, for a test that adds processes
    (the Spark job) to it; stopped and its topics deleted afterwards. The topic prefix
    starts with the module's ``TOPIC_LETTER`` (default ``f``)."""
    folder = tmp_path / "stack"
    folder.mkdir()
    (folder / "state.json").write_text(json.dumps(cluster.external_state(bootstrap)))
    letter = getattr(request.module, "TOPIC_LETTER", "f")
    monkeypatch.setenv("TIDEMARK_TOPIC_PREFIX", f"{letter}{uuid.uuid4().hex[:8]}.")
    monkeypatch.setenv("TIDEMARK_PARTITIONS", "4")
    s = LocalStack(folder)
    if cluster.roles():  # the stack's Spark job signs in as `job`: its ACLs on this prefix
        grant_roles(s.settings())
    try:
        yield s
    finally:
        s.down(grace_s=20)
        delete_topic_set(s.settings())
