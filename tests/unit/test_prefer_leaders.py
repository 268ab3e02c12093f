"""``log.topics.prefer_leaders`` against a scripted admin client: it elects the preferred
leaders of the partitions that are off them, retries while an election fails, and gives up
at once when the cluster refuses the client."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from tidemark.log.topics import prefer_leaders


class ScriptedAdmin:
    """Metadata of one topic whose partitions lead on broker 3 until an election succeeds;
    the first ``failures`` elections fail with ``error``."""

    def __init__(self, failures: int = 0, error: int = KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
                 ) -> None:
        self.replicas = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
        self.leaders = {p: 3 for p in self.replicas}
        self.failures, self.error = failures, error
        self.elections: list[list[tuple[str, int]]] = []

    def list_topics(self, timeout: float) -> Any:
        parts = {p: SimpleNamespace(id=p, leader=self.leaders[p], replicas=r)
                 for p, r in self.replicas.items()}
        return SimpleNamespace(topics={"t": SimpleNamespace(partitions=parts)})

    def elect_leaders(self, kind: Any, partitions: list) -> Any:
        self.elections.append(sorted((tp.topic, tp.partition) for tp in partitions))
        if self.failures:
            self.failures -= 1
            err = KafkaException(KafkaError(self.error))
            return SimpleNamespace(result=lambda timeout: (_ for _ in ()).throw(err))
        for tp in partitions:
            self.leaders[tp.partition] = self.replicas[tp.partition][0]
        return SimpleNamespace(result=lambda timeout: {})


def test_moves_only_the_partitions_off_their_preferred_leader() -> None:
    admin = ScriptedAdmin(failures=2)
    assert prefer_leaders(admin, ["t"], time.monotonic() + 10)  # type: ignore[arg-type]
    assert admin.leaders == {0: 1, 1: 2, 2: 3}
    assert admin.elections == [[("t", 0), ("t", 1)]] * 3  # partition 2 already led by 3


def test_gives_up_when_the_cluster_refuses_the_client() -> None:
    admin = ScriptedAdmin(failures=5, error=KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    started = time.monotonic()
    assert not prefer_leaders(admin, ["t"], time.monotonic() + 30)  # type: ignore[arg-type]
    assert len(admin.elections) == 1 and time.monotonic() - started < 5
    assert admin.leaders == {0: 3, 1: 3, 2: 3}
