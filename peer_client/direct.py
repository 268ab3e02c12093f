"""Direct delivery between peers: the gRPC service ``tidemark.Peer``.

``/tidemark.Peer/Deliver`` takes a DirectBatch and returns a DirectReceipt, both Avro
single-object bytes from ``schemas/`` (an empty batch is a ping). ``/tidemark.Peer/Status``
takes ``{"environment": E}`` (JSON) and answers the peer's :meth:`Peer.status` document as
JSON (``tidemark peer status``); another environment is refused (PERMISSION_DENIED).
Over mutual TLS (the default, see :mod:`tidemark.gossip.tls`) the caller is its certificate:
``Deliver`` hands the handler the calling peer's identity, which must be a peer of this
environment (the handler then checks the batch's sender is that peer), and ``Status`` answers
only peers of this environment and operators, and says nothing to anyone else.
Like the replica service it uses raw-bytes generic handlers instead of a ``.proto``: Avro
stays the project's only schema language, no protoc step is needed at build time, and the
batch carries the same fields as the Send record it mirrors.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from tidemark.gossip.pki import Identity, PkiError
from tidemark.gossip.tls import SERVER_LIVENESS, Transport, default_transport
from tidemark.log.wire import HEADER_SIZE, read_long
from tidemark.peer_client.exceptions import PeerClientError, PeerUnreachableError
from tidemark.peer_client.options import DIRECT_RECEIVE_LIMIT
from tidemark.peer_client.ports import DirectCallback
from tidemark.peer_client.records import peer_codec

__all__ = ["SERVICE", "DELIVER", "STATUS", "DirectServer", "DirectClient", "peer_status",
           "DeliverHandler", "caller_of", "batch_recipient"]

log = logging.getLogger("peer_client.direct")
SERVICE = "tidemark.Peer"
DELIVER = f"/{SERVICE}/Deliver"
STATUS = f"/{SERVICE}/Status"
_OPTIONS = [("grpc.max_receive_message_length", DIRECT_RECEIVE_LIMIT),
            ("grpc.max_send_message_length", DIRECT_RECEIVE_LIMIT)]
#: What ``Deliver``'s handler gets: the batch and the calling peer (None: insecure transport).
DeliverHandler = Callable[[bytes, "Identity | None"], bytes]


def caller_of(transport: Transport, context: grpc.ServicerContext, environment: str,
              operators: bool) -> Identity | None:
    """The calling peer (or operator, if ``operators``) of this environment; aborts the call
    with UNAUTHENTICATED / PERMISSION_DENIED otherwise. None on an insecure transport."""
    try:
        caller = transport.caller(context)
    except PkiError as exc:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        raise  # unreachable: abort raises
    if caller is None:
        return None
    if caller.kind == "peer" and caller.environment == environment and environment:
        return caller
    if operators and caller.kind == "operator":
        return caller
    log.warning("refused a call from %s", caller)
    context.abort(grpc.StatusCode.PERMISSION_DENIED, "refused")
    raise AssertionError("unreachable")  # abort raises


def batch_recipient(batch: bytes) -> str:
    """The ``recipient`` of an encoded DirectBatch (its third field), read without decoding
    the messages."""
    pos = HEADER_SIZE
    for _ in range(2):  # sender, sender_incarnation
        n, pos = read_long(batch, pos)
        pos += n
    n, pos = read_long(batch, pos)
    return batch[pos:pos + n].decode()


class DirectServer:
    """Serves ``Deliver`` with ``handler(batch, caller) -> receipt`` on ``bind`` (port 0: any
    free), over ``transport`` (mutual TLS unless it is insecure)."""

    def __init__(self, bind: str, handler: DeliverHandler, workers: int = 4,
                 status: Callable[[], dict[str, Any]] | None = None,
                 environment: str = "", transport: Transport | None = None) -> None:
        transport = transport or default_transport()

        def status_of(request: bytes, context: grpc.ServicerContext) -> bytes:
            caller_of(transport, context, environment, operators=True)
            try:
                asked = str(json.loads(request or b"{}").get("environment", ""))
            except (ValueError, AttributeError):
                asked = ""
            if asked != environment:
                context.abort(grpc.StatusCode.PERMISSION_DENIED,
                              f"this peer is in environment {environment!r}, not {asked!r}")
            return json.dumps(status() if status is not None else {}, default=str).encode()

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            caller = caller_of(transport, context, environment, operators=False)
            try:
                return handler(request, caller)
            except Exception as exc:  # noqa: BLE001 - answer, never kill the server thread
                log.warning("Deliver failed: %s", exc)
                context.abort(grpc.StatusCode.INTERNAL, str(exc)[:300])
                raise
        self._server = grpc.server(ThreadPoolExecutor(max_workers=workers,
                                                      thread_name_prefix="peer-direct"),
                                   options=[("grpc.so_reuseport", 0), *SERVER_LIVENESS, *_OPTIONS])
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            SERVICE, {"Deliver": grpc.unary_unary_rpc_method_handler(handle),
                      "Status": grpc.unary_unary_rpc_method_handler(status_of)}),))
        port = transport.listen(self._server, bind)
        if not port:
            raise PeerClientError(f"cannot listen on {bind} (in use or not a local address)")
        host = bind.rpartition(":")[0] or "127.0.0.1"
        self.endpoint = f"{host}:{port}"
        self.port = port
        self._server.start()

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving."""
        self._server.stop(grace).wait(grace + 1)


class DirectClient:
    """Calls ``Deliver`` on other peers; one cached channel per endpoint."""

    def __init__(self, timeout_ms: int, transport: Transport | None = None) -> None:
        self.timeout = timeout_ms / 1000
        self._transport = transport or default_transport()
        self._channels: dict[tuple[str, str | None], Any] = {}
        self._lock = threading.Lock()
        self._codec = peer_codec()

    def _stub(self, endpoint: str, recipient: str | None = None) -> Any:
        key = (endpoint, recipient)
        with self._lock:
            stub = self._channels.get(key)
            if stub is None:  # over TLS the server must prove it is that recipient
                me = self._transport.identity
                expect: Identity | str = (Identity("peer", recipient, me.environment)
                                          if recipient and me.kind == "peer" else "peer")
                channel = self._transport.channel(endpoint, expect, _OPTIONS)
                stub = self._channels[key] = (channel, channel.unary_unary(DELIVER))
        return stub[1]

    def deliver(self, endpoint: str, batch: bytes, done: DirectCallback) -> None:
        """Send an encoded DirectBatch; ``done(receipt, None)`` or ``done(None, error)``.
        Over TLS only the batch's recipient can answer: a process holding another
        certificate at ``endpoint`` fails the handshake (the messages then go by the log)."""
        recipient = batch_recipient(batch) if self._transport.secure else None
        future = self._stub(endpoint, recipient).future(batch, timeout=self.timeout)

        def finished(fut: Any) -> None:
            try:
                data = fut.result()
            except grpc.RpcError as exc:
                done(None, PeerUnreachableError(f"{endpoint}: {exc.code().name}"
                                                f" {exc.details() or ''}".rstrip()))
                return
            except Exception as exc:  # noqa: BLE001 - cancelled at shutdown
                done(None, PeerUnreachableError(f"{endpoint}: {exc!r}"))
                return
            try:
                receipt = self._codec.decode(data).record
            except Exception as exc:  # noqa: BLE001 - not a peer, or a broken one
                done(None, PeerUnreachableError(f"{endpoint} answered garbage: {exc}"))
                return
            done(receipt, None)
        future.add_done_callback(finished)

    def call(self, endpoint: str, batch: bytes, timeout: float | None = None) -> dict[str, Any]:
        """A blocking ``Deliver`` (pings); raises :class:`PeerUnreachableError`."""
        try:
            data = self._stub(endpoint)(batch, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            raise PeerUnreachableError(f"{endpoint}: {exc.code().name}") from None
        return self._codec.decode(data).record

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            for channel, _ in self._channels.values():
                channel.close()
            self._channels.clear()


def peer_status(endpoint: str, environment: str, timeout: float = 5.0,
                transport: Transport | None = None, peer_id: str | None = None
                ) -> dict[str, Any]:
    """The status document of the peer serving ``endpoint`` (``Peer.status()``); raises
    :class:`PeerUnreachableError` with the gRPC code (PERMISSION_DENIED: another environment
    or not an operator)."""
    expect: Identity | str = Identity("peer", peer_id, environment) if peer_id else "peer"
    channel = (transport or default_transport()).channel(endpoint, expect, _OPTIONS)
    try:
        data = channel.unary_unary(STATUS)(json.dumps({"environment": environment}).encode(),
                                           timeout=timeout)
    except grpc.RpcError as exc:
        raise PeerUnreachableError(f"{endpoint}: {exc.code().name}"
                                   f" {exc.details() or ''}".rstrip()) from None
    finally:
        channel.close()
    return dict(json.loads(data))
