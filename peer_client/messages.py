"""Message types: a Python class, an explicit stable wire name, persistent unless opted out.

    @message("orders.OrderPlaced")
    @dataclass
    class OrderPlaced:
        order_id: str
        amount_cents: int

The wire name, not the Python module path, is what travels (``Send.message_type``) and what
peers subscribe to, so classes can move between modules freely. Any class can be a message
type if it comes with a serializer (``encode(obj) -> bytes``, ``decode(bytes) -> obj``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tidemark.peer_client.exceptions import MessageTypeError
from tidemark.peer_client.serializers import AvroSerializer, JsonSerializer, Serializer

__all__ = ["MessageType", "message", "register_message", "message_type_of", "lookup",
           "registered_types"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_LOCK = threading.Lock()
_BY_NAME: dict[str, "MessageType"] = {}
_BY_CLASS: dict[type, "MessageType"] = {}

C = TypeVar("C", bound=type)


@dataclass(frozen=True)
class MessageType:
    """A declared message type."""

    name: str
    cls: type
    persistent: bool
    serializer: Serializer


def _serializer_for(cls: type, name: str, serializer: Serializer | str | None) -> Serializer:
    if serializer is None or serializer == "avro":
        return AvroSerializer(cls, name)
    if serializer == "json":
        return JsonSerializer(cls)
    if isinstance(serializer, str):
        raise MessageTypeError(f"unknown serializer {serializer!r}: use 'avro', 'json' or an"
                               f" object with encode/decode")
    if not (callable(getattr(serializer, "encode", None))
            and callable(getattr(serializer, "decode", None))):
        raise MessageTypeError(f"serializer for {name} needs encode(obj) and decode(bytes)")
    return serializer


def register_message(cls: type, name: str, *, transient: bool = False,
                     serializer: Serializer | str | None = None) -> MessageType:
    """Declare ``cls`` as message type ``name`` (see :func:`message`)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise MessageTypeError(f"wire name {name!r} must be dotted identifiers,"
                               f" e.g. 'orders.OrderPlaced'")
    mt = MessageType(name, cls, not transient, _serializer_for(cls, name, serializer))
    with _LOCK:
        old = _BY_NAME.get(name)
        if old is not None and old.cls is not cls and (
                old.cls.__module__, old.cls.__qualname__) != (cls.__module__, cls.__qualname__):
            raise MessageTypeError(f"wire name {name!r} is already taken by"
                                   f" {old.cls.__module__}.{old.cls.__qualname__}")
        if old is not None:
            _BY_CLASS.pop(old.cls, None)
        _BY_NAME[name] = mt
        _BY_CLASS[cls] = mt
    return mt


def message(name: str, *, transient: bool = False,
            serializer: Serializer | str | None = None) -> Callable[[C], C]:
    """Class decorator declaring a message type with a stable wire ``name``.

    Persistent by default (logged to txlog, replayed to a peer that was down);
    ``transient=True`` delivers directly only. ``serializer`` is ``"avro"`` (default, for
    dataclasses), ``"json"``, or an object with ``encode``/``decode``.
    """
    def wrap(cls: C) -> C:
        register_message(cls, name, transient=transient, serializer=serializer)
        return cls
    return wrap


def message_type_of(obj_or_cls: Any) -> MessageType:
    """The declaration of a message object or class."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    mt = _BY_CLASS.get(cls)
    if mt is None:
        raise MessageTypeError(f"{cls.__qualname__} is not a message type: decorate it with"
                               f" @message('<wire name>')")
    return mt


def lookup(name: str) -> MessageType | None:
    """The message type of a wire name, if declared in this process."""
    return _BY_NAME.get(name)


def registered_types() -> list[MessageType]:
    """Every declared message type, by wire name."""
    return [_BY_NAME[k] for k in sorted(_BY_NAME)]
