"""Errors of the gossip package."""

from __future__ import annotations

from tidemark.log.exceptions import TidemarkError

__all__ = ["GossipError", "EpochError", "NodeUnreachableError", "DurabilityTimeoutError",
           "ReplayError", "ReplayRefusedError", "QueuesBehindError", "ReplayInterruptedError",
           "PinExpiredError", "ReplicaBusyError", "PeerAuthError", "PeerForbiddenError",
           "REPLAY_ERRORS"]


class GossipError(TidemarkError):
    """A gossip operation failed."""


class NodeUnreachableError(GossipError):
    """No replica node answered."""


class EpochError(GossipError):
    """A config change is invalid or lost to a competing one."""


class DurabilityTimeoutError(GossipError):
    """A record did not reach the requested durability level before the deadline."""


class ReplayError(GossipError):
    """A replay failed. ``status`` is the gRPC status code name the server answers with."""

    status = "INTERNAL"


class ReplayRefusedError(ReplayError):
    """The replica refused the replay: another environment, a partition it does not own, or a
    malformed request. Nothing was streamed and no pin was taken."""

    status = "FAILED_PRECONDITION"


class QueuesBehindError(ReplayError):
    """The queues did not reach the replay's barrier before the deadline."""

    status = "UNAVAILABLE"


class PinExpiredError(ReplayError):
    """The replay's pin expired (the peer sent nothing for a whole lease)."""

    status = "ABORTED"


class ReplicaBusyError(ReplayError):
    """The replica serves as many replays as it allows: try another replica."""

    status = "RESOURCE_EXHAUSTED"


class ReplayInterruptedError(ReplayError):
    """The serving replica went away mid-stream: retry on another replica (and dedup)."""

    status = "UNAVAILABLE"

    def __init__(self, message: str, address: str = "", last_offset: int = -1) -> None:
        super().__init__(message)
        self.address = address
        self.last_offset = last_offset


class PeerAuthError(ReplayError):
    """A peer-facing call (replay, pin, renew, unpin, ack) without a valid peer token: none,
    malformed, not signed for this cluster, or expired. Nothing was streamed or changed."""

    status = "UNAUTHENTICATED"


class PeerForbiddenError(PeerAuthError):
    """A valid peer token, but not for this: another peer's queue or pin, or a token of
    another environment. Nothing was streamed or changed."""

    status = "PERMISSION_DENIED"


#: The replay errors a server reports by name (trailing metadata ``tidemark-error``).
REPLAY_ERRORS: dict[str, type[ReplayError]] = {
    c.__name__: c for c in (ReplayError, ReplayRefusedError, QueuesBehindError, PinExpiredError,
                            ReplicaBusyError, PeerAuthError, PeerForbiddenError)}
