"""A sender on the fast path serves delivery callbacks itself every 512 appends and counts it
in ``Outbox.served``, which the housekeeping thread reads to stay out of its way."""

from __future__ import annotations

from typing import Any

from tidemark.peer_client.outbox import Outbox


class _Log:
    def __init__(self) -> None:
        self.appended, self.served = 0, 0

    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        self.appended += 1

    def serve(self) -> None:
        self.served += 1


def test_the_sender_serves_callbacks_every_512_appends_and_counts_it() -> None:
    log = _Log()
    out = Outbox("A", "inc", "", "test", log, None, None, 100, 100, 1 << 20,  # type: ignore[arg-type]
                 {}, lambda peer: None)
    for i in range(1, 1600):
        out.append_now("B", b"x", None)
        assert out.served == log.served == i // 512
    assert (out.logged, log.appended) == (1599, 1599)
