"""``ReplicaReplayer.status()`` answers at every moment of a peer's start: before
``run()`` and across ``bind_transport`` (a restarting peer's status is read while it starts)."""

from __future__ import annotations

from tidemark.gossip.service import ReplicaClient
from tidemark.log.settings import Settings
from tidemark.peer_client.replay import ReplicaReplayer


def test_status_before_the_replay_runs_and_after_the_transport_is_bound() -> None:
    replayer = ReplicaReplayer(Settings(bootstrap="unused:1"), delivery_limit=5)
    st = replayer.status()
    assert st["stage"] == "idle" and st["replayed"] == 0 and st["nodes"] == []
    assert st["follower_position"] == -1
    replayer.retries = 2
    replayer.bind_transport(None)  # type: ignore[arg-type]
    assert replayer.status()["retries"] == 2  # binding a transport keeps the figures
    replayer.close()


def test_bind_transport_keeps_a_client_given_by_the_caller() -> None:
    client = ReplicaClient()
    replayer = ReplicaReplayer(Settings(bootstrap="unused:1"), delivery_limit=5, client=client)
    replayer.bind_transport(None)  # type: ignore[arg-type]
    assert replayer.client is client
    replayer.close()
