"""Handlers by message type, typed by annotation: ``def on(msg: OrderPlaced, ctx)``, or for a
batch handler ``def on(msgs: list[OrderPlaced], ctx)``."""

from __future__ import annotations

import collections.abc
import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.peer_client.exceptions import HandlerError, MessageTypeError
from tidemark.peer_client.messages import MessageType, message_type_of

__all__ = ["Handler", "HandlerRegistry"]


@dataclass(frozen=True)
class Handler:
    """One registered handler."""

    message_type: MessageType
    fn: Callable[..., Any]
    is_async: bool
    takes_context: bool
    batch: bool = False  #: called with a list of messages (and a BatchContext)
    #: seconds before the next delivery after a nak without a delay, by delivery count (the
    #: last one repeats; empty: at once), like JetStream's ``backoff``
    backoff: tuple[float, ...] = ()

    def nak_delay(self, delivery_count: int) -> float:
        """The delay of a nak without one, of the message's ``delivery_count``-th failure."""
        if not self.backoff:
            return 0.0
        return self.backoff[min(delivery_count, len(self.backoff) - 1)]


def _annotated_type(fn: Callable[..., Any], batch: bool = False) -> type:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise HandlerError(f"handler {fn.__qualname__} takes no message parameter")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - unresolvable forward references
        raise HandlerError(f"cannot read the annotations of {fn.__qualname__}: {exc}") from None
    hint = hints.get(params[0].name)
    if hint is None:
        raise HandlerError(f"handler {fn.__qualname__}: annotate its first parameter with the"
                           f" message type, or pass the type: @peer.handler(MyMessage)")
    if not batch:
        return hint
    args = typing.get_args(hint)
    if typing.get_origin(hint) not in (list, collections.abc.Sequence) or len(args) != 1:
        raise HandlerError(f"batch handler {fn.__qualname__}: annotate its first parameter as"
                           f" list[MyMessage], or pass the type: @peer.batch_handler(MyMessage)")
    return args[0]


class HandlerRegistry:
    """At most one handler per message type."""

    def __init__(self) -> None:
        self._by_name: dict[str, Handler] = {}

    def add(self, fn: Callable[..., Any], message_cls: type | None = None,
            batch: bool = False, backoff: Sequence[float] = ()) -> Handler:
        """Register ``fn`` for ``message_cls`` (default: its first parameter's annotation,
        ``list[T]`` for a ``batch`` handler); ``backoff``: see :attr:`Handler.backoff`."""
        if any(not isinstance(d, (int, float)) or d < 0 for d in backoff):
            raise HandlerError(f"handler {getattr(fn, '__qualname__', fn)}: backoff must be"
                               f" seconds >= 0, got {list(backoff)!r}")
        cls = message_cls or _annotated_type(fn, batch)
        try:
            mt = message_type_of(cls)
        except MessageTypeError as exc:
            raise HandlerError(f"handler {getattr(fn, '__qualname__', fn)}: {exc}") from None
        if mt.name in self._by_name and self._by_name[mt.name].fn is not fn:
            raise HandlerError(f"{mt.name} already has a handler:"
                               f" {self._by_name[mt.name].fn.__qualname__}")
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        handler = Handler(mt, fn, inspect.iscoroutinefunction(fn), len(params) >= 2, batch,
                          tuple(float(d) for d in backoff))
        self._by_name[mt.name] = handler
        return handler

    def get(self, name: str) -> Handler | None:
        """The handler of wire name ``name``."""
        return self._by_name.get(name)

    def names(self) -> list[str]:
        """Handled wire names: the peer's subscriptions."""
        return sorted(self._by_name)

    def copy(self) -> "HandlerRegistry":
        """The same registrations (a restarted peer keeps its handlers)."""
        out = HandlerRegistry()
        out._by_name = dict(self._by_name)
        return out
