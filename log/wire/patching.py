"""Byte patching of encoded Sends: a Send written with ``direct_incarnation`` null re-marked as
delivered directly to a peer incarnation, without decoding it. The field is the Send schema's
last one, so its null branch is the value's last byte and the mark is the value's suffix."""

from __future__ import annotations

from tidemark.log.wire.varints import length_bytes

__all__ = ["mark_direct", "direct_mark"]


def direct_mark(incarnation: str) -> bytes:
    """The last bytes of a Send marked as delivered directly to ``incarnation``: the union's
    string branch, then the string."""
    raw = incarnation.encode("utf-8")
    return b"".join((b"\x02", length_bytes(len(raw)), raw))


def mark_direct(send_value: bytes, incarnation: str) -> bytes:
    """An encoded Send (written with ``direct_incarnation`` null) re-marked as delivered
    directly to ``incarnation``."""
    if not send_value or send_value[-1] != 0:
        raise ValueError("Send value does not end with a null direct_incarnation")
    raw = incarnation.encode("utf-8")
    return b"".join((send_value[:-1], b"\x02", length_bytes(len(raw)), raw))
