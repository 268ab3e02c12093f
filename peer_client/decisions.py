"""What to do with an arriving message: pure decisions, no I/O.

:func:`decide` holds back (a live message during replay), drops (a duplicate id, another
environment, the peer stopping), fails (unknown type, no handler, malformed payload:
reported, never fatal, never acked) or runs. With a persisted dedup store
(``peer_client.dedup_store``), a message whose handler completed in an earlier incarnation
is dropped and acked again (``completed_before``). The
:class:`~tidemark.peer_client.inbox.Inbox` applies what these return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tidemark.peer_client.context import Phase
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.exceptions import PayloadError
from tidemark.peer_client.handlers import Handler, HandlerRegistry
from tidemark.peer_client.messages import lookup
from tidemark.peer_client.records import Envelope

__all__ = ["Decision", "decide", "decide_admitted", "CompletedIds", "HOLD", "DROP", "FAIL",
           "RUN", "STOPPED_PHASES"]

HOLD, DROP, FAIL, RUN = "hold", "drop", "fail", "run"
#: Phases in which nothing new is handled (its acks could no longer be flushed).
STOPPED_PHASES = (Phase.STOPPING, Phase.STOPPED)


class CompletedIds(Protocol):
    """Ids of messages whose handler completed, kept across incarnations (the store)."""

    def __contains__(self, message_id: object) -> bool: ...

    def record(self, message_id: str, now_ms: int) -> bool:
        """Remember ``message_id``; False if it was already there."""


@dataclass(slots=True)
class Decision:
    """``action`` is HOLD, DROP, FAIL or RUN; ``kind``/``reason`` say why for FAIL/DROP.
    (Not frozen: a frozen dataclass costs a microsecond more per message to build.)"""

    action: str
    kind: str = ""
    reason: str = ""
    handler: Handler | None = None
    message: Any = None


def decide(env: Envelope, phase: Phase, environment: str, dedup: DedupWindow,
           handlers: HandlerRegistry, completed: CompletedIds | None = None) -> Decision:
    """The fate of one arriving message. Remembers its id in ``dedup`` unless held/dropped.
    An id new to ``dedup`` but in ``completed`` is DROP ``completed`` (to be acked, not run);
    it stays in ``dedup``."""
    if env.environment != environment:
        return Decision(DROP, "environment", f"message {env.message_id} from {env.sender} is"
                                             f" in environment {env.environment!r}, this peer"
                                             f" is in {environment!r}")
    if phase in STOPPED_PHASES:
        return Decision(DROP, "stopping", f"message {env.message_id} from {env.sender} arrived"
                                          f" while this peer is {phase.value}")
    if phase is Phase.REPLAY and not env.replay:
        return Decision(HOLD)
    return decide_admitted(env, dedup, handlers, completed)


def decide_admitted(env: Envelope, dedup: DedupWindow, handlers: HandlerRegistry,
                    completed: CompletedIds | None = None) -> Decision:
    """:func:`decide` for a message of this environment that the phase lets in."""
    if not dedup.check_and_add(env.message_id):
        return Decision(DROP, "duplicate")
    if completed is not None and env.message_id in completed:
        return Decision(DROP, "completed")
    handler = handlers.get(env.message_type)
    if handler is None:
        kind = "unknown_type" if lookup(env.message_type) is None else "no_handler"
        return Decision(FAIL, kind, f"no handler for message type {env.message_type!r}"
                        + (" (type not declared in this process)" if kind == "unknown_type"
                           else ""))
    try:
        msg = handler.message_type.serializer.decode(env.payload)
    except PayloadError as exc:
        return Decision(FAIL, "malformed", f"malformed {env.message_type} payload: {exc}")
    except Exception as exc:  # noqa: BLE001 - a user serializer may raise anything
        return Decision(FAIL, "malformed", f"malformed {env.message_type} payload: {exc!r}")
    return Decision(RUN, "", "", handler, msg)
