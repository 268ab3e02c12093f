"""What a handler learns about the message it handles, and the peer's phases."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Phase", "MessageContext"]


class Phase(enum.Enum):
    """Where a peer is in its life. Replay (the next issue) adds REPLAY and HANDOVER:
    live messages arriving during REPLAY are held back and dispatched after it."""

    CREATED = "created"
    STARTING = "starting"
    REPLAY = "replay"
    HANDOVER = "handover"
    NORMAL = "normal"
    STOPPING = "stopping"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class MessageContext:
    """Passed to a handler beside the message."""

    message_id: str
    sender: str
    message_type: str
    delivery_count: int   #: earlier failed deliveries of this message (0 the first time)
    replay: bool          #: True when it came from replay, False when delivered live
    timestamp_ms: int     #: when the sender sent it
    peer_id: str          #: the peer handling it
    persistent: bool      #: whether it is acked (persistent) or direct only (transient)

    @property
    def live(self) -> bool:
        """Delivered directly by its sender (not replayed)."""
        return not self.replay
