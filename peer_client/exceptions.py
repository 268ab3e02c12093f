"""Errors of the peer client. Every message is one readable line."""

from __future__ import annotations

from collections.abc import Mapping

from tidemark.log.exceptions import OversizedMessageError, TidemarkError

__all__ = ["PeerClientError", "Nak", "Term", "WrongEnvironmentError", "DuplicatePeerError",
           "UnknownPeerError",
           "PeerUnreachableError", "FlightSizeExceededError", "DurabilityTimeoutError",
           "DurabilityUnavailableError", "MessageTypeError", "PayloadError", "PeerStateError",
           "HandlerError", "OversizedMessageError", "ReplayDeniedError", "DedupStoreError",
           "BatchFailed", "MessageFailed"]


class PeerClientError(TidemarkError):
    """Base of the peer client's errors."""


class WrongEnvironmentError(PeerClientError):
    """A message or registration came from (or went to) a peer of another environment."""


class DuplicatePeerError(PeerClientError):
    """A live peer with the same id is already registered in the directory."""


class UnknownPeerError(PeerClientError):
    """No peer of that id is registered in the directory."""


class PeerUnreachableError(PeerClientError):
    """A transient message could not be delivered: its recipient is down or unreachable."""


class FlightSizeExceededError(PeerClientError):
    """More sends would be unconfirmed than the flight size allows (fail mode)."""

    def __init__(self, limit: int, count: int) -> None:
        super().__init__(f"flight size exceeded: {count} sends unconfirmed, limit {limit}")
        self.limit = limit
        self.count = count


class DurabilityTimeoutError(PeerClientError):
    """The requested durability level did not hold before the deadline."""


class DurabilityUnavailableError(PeerClientError):
    """No replica can answer for the requested durability level (not configured, or the
    replica service lacks the call)."""


class MessageTypeError(PeerClientError):
    """A message type is declared wrongly, or an object is not a declared message type."""


class PayloadError(PeerClientError):
    """A payload cannot be encoded, or a received payload cannot be decoded."""


class PeerStateError(PeerClientError):
    """The peer is not in a state that allows the call (not started, stopping)."""


class HandlerError(PeerClientError):
    """A handler is declared wrongly (no message type annotation, two handlers for a type)."""


class ReplayDeniedError(PeerClientError):
    """A replica refused this peer's replay (or its pin): ``code`` ``UNAUTHENTICATED`` (no
    token, malformed, not this cluster's, expired) or ``PERMISSION_DENIED`` (the token names
    another peer or another environment). Nothing was replayed; retrying will not help."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class DedupStoreError(PeerClientError):
    """The persisted dedup store cannot be used: another peer's (or environment's), in use
    by another process, or unreadable/corrupt. The message says which and what to do."""


class BatchFailed(Exception):
    """Raised by a batch handler whose batch partly failed: ``failures`` maps the index of
    each failed message in the batch to its reason. Those are reported (a DeliveryFailed
    record each) and delivered again; every other message of the batch counts as handled
    and is acked. Any other exception fails the whole batch."""

    def __init__(self, failures: "Mapping[int, str | BaseException]") -> None:
        self.failures: dict[int, BaseException] = {
            int(i): MessageFailed(r) if isinstance(r, str) else r for i, r in failures.items()}
        super().__init__(f"{len(self.failures)} message(s) of the batch failed")


class MessageFailed(Exception):
    """The failure of one message of a batch, as a batch handler gave it (a reason)."""


class Nak(Exception):
    """Raised by a handler (or :meth:`MessageContext.nak`): this delivery failed, deliver the
    message again in this running peer after ``delay`` seconds (None: the handler's
    ``backoff`` for this delivery, else at once). Recorded in txlog as a DeliveryFailed like
    any failure, so it counts toward the delivery limit; past the limit it is not delivered
    again (the queues dead-letter it)."""

    def __init__(self, delay: float | None = None) -> None:
        if delay is not None and delay < 0:
            raise ValueError("a nak's delay cannot be negative")
        self.delay = delay
        super().__init__("nak" if delay is None else f"nak (again after {delay:g} s)")


class Term(Exception):
    """Raised by a handler (or :meth:`MessageContext.term`): this message can never be
    handled; dead-letter it at once with ``reason`` (a terminal DeliveryFailed), whatever
    its delivery count."""

    def __init__(self, reason: str = "terminated by the handler") -> None:
        self.reason = reason
        super().__init__(reason)

