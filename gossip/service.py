"""The replica service ``tidemark.Replica`` over gRPC, both sides, without protoc.

Methods carry raw bytes: ``Gossip`` takes and returns a NodeState (Avro single-object bytes);
``Status``, ``Digest``, ``Pin``, ``RenewPin`` and ``Unpin`` take and return JSON; ``Fetch`` returns
a compact record list (:func:`pack_records`). ``Replay`` is a bidirectional stream
(:mod:`tidemark.gossip.replay`). Replica nodes serve it with :func:`start_server`; nodes, the CLI
and peers call it through :class:`ReplicaClient` (peers: :meth:`ReplicaClient.replay_any`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import random
import struct
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from itertools import chain
from typing import Any

import grpc

from tidemark.gossip.access import admit
from tidemark.gossip.cluster_auth import (
    CLUSTER_METHODS,
    PEER_METHODS,
    WAIT_METHODS,
    cluster_secret,
    register_cluster_secret,
    secret_key,
    sign_request,
    verify_request,
)
from tidemark.gossip.cluster_config import Epoch
from tidemark.gossip.exceptions import (
    GossipError,
    NodeUnreachableError,
    PeerAuthError,
    PeerForbiddenError,
    ReplayError,
    ReplayInterruptedError,
    ReplicaBusyError,
)
from tidemark.gossip.health import add_health
from tidemark.gossip.limits import CallLimits
from tidemark.gossip.node_state import NodeState
from tidemark.gossip.peer_auth import (
    TOKEN_KEY,
    PeerClaims,
    authorize_peer,
    configured_token,
    issue_token,
    local_stack_token,
    serving_as,
)
from tidemark.gossip.pki import Identity, PkiError
from tidemark.gossip.replay import (
    DEFAULT_BATCH,
    DEFAULT_WINDOW,
    ERROR_KEY,
    STALL_TIMEOUT_S,
    ReplayStream,
    request_peer,
)
from tidemark.gossip.tls import SERVER_LIVENESS, Transport, default_transport
from tidemark.log.partitioner import partition_for_peer

__all__ = ["SERVICE", "method_path", "ReplicaClient", "start_server", "pack_records",
           "unpack_records", "gossip_round", "fetch_status",
           "MAX_MESSAGE_BYTES", "StreamHandler", "ReplayStream", "CLUSTER_METHODS",
           "PEER_METHODS", "WAIT_METHODS", "register_cluster_secret", "sign_request",
           "verify_request", "serving_identity"]

#: A streaming method: (request messages, context) -> response messages.
StreamHandler = Callable[[Iterator[bytes], grpc.ServicerContext], Iterable[bytes]]

log = logging.getLogger(__name__)
#: Methods that take a peer token (``x-tidemark-token``) when the caller has one.
_TOKEN_METHODS = PEER_METHODS | WAIT_METHODS
SERVICE = "tidemark.Replica"
MAX_MESSAGE_BYTES = 64 << 20
_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
_REC = struct.Struct(">QI")


def method_path(name: str) -> str:
    """Full gRPC method path of ``name``."""
    return f"/{SERVICE}/{name}"


def pack_records(records: Iterable[tuple[int, bytes]]) -> bytes:
    """Encode ``(offset, value)`` pairs for ``Fetch``."""
    out = bytearray()
    for off, value in records:
        out += _REC.pack(off, len(value))
        out += value
    return bytes(out)


def unpack_records(data: bytes) -> list[tuple[int, bytes]]:
    """Inverse of :func:`pack_records`."""
    out, pos = [], 0
    while pos < len(data):
        off, n = _REC.unpack_from(data, pos)
        pos += _REC.size
        out.append((off, data[pos:pos + n]))
        pos += n
    return out


class ReplicaClient:
    """A cache of gRPC channels by address, and raw-bytes unary calls to replica nodes.
    Calls to :data:`CLUSTER_METHODS` are signed with ``secret``, else with the secret
    registered for the address (:func:`register_cluster_secret`), if any. Calls to
    :data:`PEER_METHODS` and :data:`WAIT_METHODS` carry a peer token when given one, else are
    signed the same way.
    A replay's token (:meth:`peer_token`): the ``token`` argument, else the process's setting
    (``TIDEMARK_PEER_TOKEN`` / ``_FILE``), else, in a process holding the cluster secret
    (a member: it loaded the cluster file), one it issues for the peer itself, else one
    issued with the secret of the local stack of ``TIDEMARK_STATE_DIR``, if any."""

    def __init__(self, secret: str | bytes | None = None,
                 transport: Transport | None = None) -> None:
        self._secret = secret_key(secret) if secret else None
        self._transport = transport
        self._channels: dict[str, grpc.Channel] = {}
        self._nodes: dict[str, str] = {}
        self._lock = threading.Lock()

    def know(self, nodes: Mapping[str, str]) -> None:
        """Expect node ``id`` at ``address`` (``{id: address}``): over TLS, a call to that
        address then fails unless the server proves it is that node (any node otherwise)."""
        with self._lock:
            for node, address in nodes.items():
                if self._nodes.get(address) != node:
                    self._nodes[address] = node
                    old = self._channels.pop(address, None)
                    if old is not None:
                        old.close()

    def _channel(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                if self._transport is None:
                    self._transport = default_transport()
                node = self._nodes.get(address)
                expect: Identity | str = Identity("node", node) if node else "node"
                channel = self._transport.channel(address, expect, _OPTIONS)
                self._channels[address] = channel
            return channel

    def call(self, address: str, name: str, body: bytes, timeout: float = 2.0,
             token: str | None = None) -> bytes:
        """Call method ``name`` on ``address``; raises ``grpc.RpcError`` on failure."""
        stub = self._channel(address).unary_unary(method_path(name))
        if token and name in _TOKEN_METHODS:
            return stub(body, timeout=timeout, metadata=((TOKEN_KEY, token),))
        if name in CLUSTER_METHODS or name in _TOKEN_METHODS:
            secret = self._secret or cluster_secret(address)
            if secret:
                return stub(body, timeout=timeout, metadata=sign_request(secret, name, body))
        return stub(body, timeout=timeout)

    def peer_token(self, address: str, peer_id: str, environment: str,
                   token: str | None = None) -> str | None:
        """The token a replay of ``peer_id`` on ``address`` presents (see the class doc)."""
        if token:
            return token
        configured = configured_token()
        if configured:
            return configured
        secret = self._secret or cluster_secret(address)
        if secret:
            return issue_token(secret, environment, peer_id)
        return local_stack_token(peer_id, environment)

    def renew_pin(self, address: str, pin: str, lease_ms: int | None = None) -> dict[str, Any]:
        """``RenewPin``: ``{renewed, expires_ms}`` (``renewed`` False once it expired)."""
        body: dict[str, Any] = {"pin": pin}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        return dict(self.call_json(address, "RenewPin", body))

    def replay(self, address: str, peer_id: str, environment: str, batch: int = DEFAULT_BATCH,
               window: int = DEFAULT_WINDOW, *, lease_ms: int | None = None,
               barrier_timeout_ms: int | None = None, after_offset: int = -1,
               auto_renew: bool = True, node: str = "", token: str | None = None,
               rows: bool = True, barrier: int | None = None, covered: bool = False,
               stall_timeout_s: float = STALL_TIMEOUT_S) -> ReplayStream:
        """Open a replay of ``peer_id``'s queue on the replica at ``address``.

        Returns once the replica pinned the GC point at the barrier (the stream's ``barrier`` and
        ``pin``); iterate ``entries()`` (they start once the queues reach the barrier), ``ack(n)``
        what was processed, ``close()``. ``after_offset`` skips entries up to that txlog offset (a
        retry after an interrupted replay); ``barrier`` (a retry) keeps the barrier of the replay it
        resumes (the replica takes the lower of it and its high watermark), so it does not wait for
        the queues to cover a newer one; ``covered`` asks for a barrier the queues already cover (no
        wait; the header's ``high_watermark`` says where the txlog ended). ``rows=False`` asks for
        every entry as QueueEntry bytes (else a replica sends the replay rows it stores).
        ``stall_timeout_s``: how long a wait for the replica's next message may last before
        the replica is given up (a partition drops packets without an error). Raises
        :class:`~tidemark.gossip.exceptions.NodeUnreachableError` if the replica does not answer and
        :class:`~tidemark.gossip.exceptions.ReplayRefusedError` if it refuses (environment,
        partition), :class:`~tidemark.gossip.exceptions.PeerAuthError` (no or bad ``token``) or
        :class:`~tidemark.gossip.exceptions.PeerForbiddenError` (the token names another peer or
        environment) before anything is streamed.
        """
        request: dict[str, Any] = {"peer": peer_id, "environment": environment,
                                   "batch": batch, "window": window,
                                   "after_offset": after_offset, "rows": rows}
        if lease_ms is not None:
            request["lease_ms"] = lease_ms
        if barrier_timeout_ms is not None:
            request["barrier_timeout_ms"] = barrier_timeout_ms
        if barrier is not None:
            request["barrier"] = barrier
        if covered:
            request["covered"] = True
        call = self._channel(address).stream_stream(method_path("Replay"))
        tok = self.peer_token(address, peer_id, environment, token)
        metadata = ((TOKEN_KEY, tok),) if tok else None

        def call_json(addr: str, name: str, body: Mapping[str, Any], timeout: float) -> Any:
            return self.call_json(addr, name, body, timeout, token=tok)
        return ReplayStream(lambda requests: call(requests, metadata=metadata), address,
                            request, call_json, node=node, auto_renew=auto_renew,
                            stall_timeout_s=stall_timeout_s)

    def watch(self, address: str, partitions: Collection[int] | None = None,
              token: str | None = None) -> Any:
        """Open a ``Watch`` of txlog ``partitions`` (default: all the node owns) on the node at
        ``address``: an iterator of JSON messages ``{"ends": {partition: [applied end,
        stable end]}}`` (the first one complete, then what moved), with ``cancel()``. Raises
        ``grpc.RpcError`` while iterating if the node refuses ``token`` or goes away."""
        body = json.dumps({} if partitions is None else
                          {"partitions": sorted(partitions)}).encode()
        call = self._channel(address).stream_stream(method_path("Watch"))
        return call(iter([body]), metadata=((TOKEN_KEY, token),) if token else None)

    def replay_any(self, epoch: Epoch, peer_id: str, environment: str,
                   exclude: Collection[str] = (), **options: Any) -> ReplayStream:
        """:meth:`replay` on any live replica of ``peer_id``'s partition in ``epoch``
        (counting replicas first, in random order; then joining ones), skipping the nodes
        in ``exclude``. If the serving replica dies mid-stream, ``entries()`` raises
        :class:`~tidemark.gossip.exceptions.ReplayInterruptedError`: call again with
        ``exclude={stream.node}`` and ``after_offset=stream.last_offset`` (and dedup)."""
        tp = f"txlog/{partition_for_peer(peer_id, epoch.log_partitions)}"
        counting = [n for n in epoch.owners().get(tp, []) if n not in exclude]
        joining = [n for n in epoch.holders().get(tp, []) if n not in exclude
                   and n not in counting]
        random.shuffle(counting)
        errors: list[str] = []
        self.know(epoch.nodes)
        for node in counting + joining:
            try:
                return self.replay(epoch.nodes[node], peer_id, environment, node=node,
                                   **options)
            except (NodeUnreachableError, ReplayInterruptedError, ReplicaBusyError) as exc:
                errors.append(f"{node}: {exc}")
        raise NodeUnreachableError(
            f"no replica of {tp} could replay {peer_id} in epoch {epoch.epoch}"
            + (f" (excluded: {', '.join(sorted(exclude))})" if exclude else "")
            + (": " + "; ".join(errors) if errors else ": no candidate replica"))

    def call_json(self, address: str, name: str, body: Mapping[str, Any],
                  timeout: float = 5.0, token: str | None = None) -> Any:
        """A JSON-bodied call."""
        return json.loads(self.call(address, name, json.dumps(body).encode(), timeout,
                                    token))

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()


def _token(context: grpc.ServicerContext) -> str | None:
    got = dict(context.invocation_metadata())
    token = got.get(TOKEN_KEY)
    return token if isinstance(token, str) else None


def _end_unary(context: grpc.ServicerContext, name: str, exc: Exception) -> None:
    """End a unary call that raised: a refusal (:class:`PeerAuthError`) with its status and
    class name; anything else as INTERNAL (never kill the server thread)."""
    if isinstance(exc, PeerAuthError):
        _refuse(context, name, exc)
    log.warning("rpc failed: %s", exc)
    context.abort(grpc.StatusCode.INTERNAL, str(exc)[:300])


def _end_stream(context: grpc.ServicerContext, name: str, exc: Exception) -> None:
    """End a stream that raised: a :class:`ReplayError` with its status, its message and its
    class name in trailing metadata; anything else as INTERNAL (never kill the thread)."""
    if isinstance(exc, ReplayError):
        log.warning("%s refused or failed: %s", name, exc)
        context.set_trailing_metadata(((ERROR_KEY, type(exc).__name__),))
        context.abort(grpc.StatusCode[exc.status], str(exc)[:1000])
    elif context.is_active():
        log.warning("%s failed: %s", name, exc)
        context.abort(grpc.StatusCode.INTERNAL, str(exc)[:300])


def _first_message(requests: Iterator[bytes], context: grpc.ServicerContext,
                   seconds: float) -> Iterator[bytes]:
    """``requests`` with its first message read now, within ``seconds``: a caller that opens a
    stream and says nothing is cancelled instead of holding a thread."""
    timer = threading.Timer(seconds, context.cancel)
    timer.daemon = True
    timer.start()
    try:
        first = next(requests, None)
    finally:
        timer.cancel()
    return chain([] if first is None else [first], requests)


def _wrap_stream(name: str, fn: StreamHandler, secret: str | bytes | None = None,
                 environment: str | None = None,
                 limits: CallLimits | None = None) -> grpc.RpcMethodHandler:
    """A stream-stream handler whose :class:`ReplayError` ends the call with the error's
    status code, its message, and its class name in trailing metadata. With ``secret`` and
    ``environment``, a :data:`PEER_METHODS` stream needs a peer token of ``environment``
    naming the peer of its first message (:func:`tidemark.gossip.replay.request_peer`): otherwise it
    ends with :class:`PeerAuthError` or ``PeerForbiddenError`` before ``fn`` runs; a
    :data:`WAIT_METHODS` stream needs a peer token of ``environment`` (any peer)."""
    guarded = bool(secret) and bool(environment) and name in PEER_METHODS
    for_peers = bool(secret) and bool(environment) and name in WAIT_METHODS

    limits = limits or CallLimits(8)
    peer_facing = name in _TOKEN_METHODS

    def handle(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            with limits.peer_call(_token(context), True) if peer_facing else nullcontext():
                requests = _first_message(requests, context, limits.first_message_s)
                yield from guarded_stream(requests, context)
        except Exception as exc:  # noqa: BLE001 - ended with a status, never kills the thread
            _end_stream(context, name, exc)

    def guarded_stream(requests: Iterator[bytes],
                       context: grpc.ServicerContext) -> Iterator[bytes]:
        if guarded:
            assert secret and environment
            first = next(requests, None)  # names the peer (None: fn refuses the request)
            authorize_peer(secret, _token(context), environment, request_peer(first),
                           what=name)
            requests = chain([] if first is None else [first], requests)
        elif for_peers:  # any peer of the environment (a durability watch)
            assert secret and environment
            authorize_peer(secret, _token(context), environment, what=name)
        yield from fn(requests, context)
    return grpc.stream_stream_rpc_method_handler(handle)


def start_server(address: str, handlers: Mapping[str, Callable[[bytes], bytes]],
                 workers: int = 8, streams: Mapping[str, StreamHandler] | None = None,
                 secret: str | bytes | None = None,
                 environment: str | None = None,
                 transport: Transport | None = None,
                 health: Any | None = None) -> grpc.Server:
    """Serve ``handlers`` (method name -> bytes handler) and ``streams`` (method name ->
    bidirectional-stream handler, e.g. ``Replay``) on ``address``. A stream holds one of
    the ``workers`` threads for as long as it runs. With ``secret``, calls to
    :data:`CLUSTER_METHODS` must be signed with it (:func:`sign_request`); with ``secret`` and
    ``environment`` too, calls to :data:`PEER_METHODS` and :data:`WAIT_METHODS` need a peer
    token of ``environment`` (or, unary ones, a member's signature); the handler runs as the
    token's peer (:func:`tidemark.gossip.peer_auth.serving_peer`), and a :class:`PeerAuthError` it
    raises ends the call with that error's status.
    With a secure ``transport`` (mutual TLS) the caller's certificate decides instead, before
    any byte of the request is read (:func:`tidemark.gossip.access.admit`); the handler runs as
    the caller (:func:`serving_identity`). ``health``
    (:func:`tidemark.gossip.health.health_servicer`) is served beside, as
    ``grpc.health.v1.Health``, behind the same TLS."""
    limits = CallLimits(workers)
    if transport is not None and transport.secure:
        return _start_tls_server(address, handlers, streams or {}, environment or "",
                                 transport, limits, health)
    peer_auth = bool(secret) and bool(environment)

    def authorize(name: str, request: bytes, context: grpc.ServicerContext) -> Any:
        """The serving peer's claims; None for a member's signed call; raises."""
        assert secret and environment
        metadata = context.invocation_metadata()
        token = _token(context)
        if token is None and verify_request(secret, name, request, metadata) is None:
            return None
        return authorize_peer(secret, token, environment, what=name)

    def wrap(fn: Callable[[bytes], bytes], name: str) -> grpc.RpcMethodHandler:
        guarded = bool(secret) and name in CLUSTER_METHODS
        for_peers = peer_auth and name in _TOKEN_METHODS

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            if guarded:
                assert secret
                why = verify_request(secret, name, request, context.invocation_metadata())
                if why is not None:
                    log.warning("refused %s from %s: %s", name, context.peer(), why)
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
            try:
                with (limits.peer_call(None, False) if name in _TOKEN_METHODS
                      else nullcontext(),
                      serving_as(authorize(name, request, context) if for_peers else None)):
                    return fn(request)
            except Exception as exc:  # noqa: BLE001 - ended with a status
                _end_unary(context, name, exc)
                raise  # unreachable: abort raises
        return grpc.unary_unary_rpc_method_handler(handle)
    server = grpc.server(ThreadPoolExecutor(max_workers=workers),
                         options=[("grpc.so_reuseport", 0), *SERVER_LIVENESS, *_OPTIONS])
    methods = {name: wrap(fn, name) for name, fn in handlers.items()}
    methods.update({name: _wrap_stream(name, fn, secret, environment, limits)
                    for name, fn in (streams or {}).items()})
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    if health is not None:
        add_health(server, health)
    if transport is not None:
        port = transport.listen(server, address)
    else:
        try:
            port = server.add_insecure_port(address)
        except RuntimeError:
            port = 0
    if not port:
        raise GossipError(f"cannot listen on {address} (in use or not a local address)")
    server.start()
    return server


_CALLER: contextvars.ContextVar[Identity | None] = contextvars.ContextVar(
    "tidemark_caller", default=None)


def serving_identity() -> Identity | None:
    """The certificate identity of the caller of the gRPC call this thread serves (None on an
    insecure transport and for the node's own work)."""
    return _CALLER.get()


def _refuse(context: grpc.ServicerContext, name: str, exc: Exception) -> None:
    status = getattr(exc, "status", "UNAUTHENTICATED")
    log.warning("refused %s from %s: %s", name, context.peer(), exc)
    context.set_trailing_metadata(((ERROR_KEY, type(exc).__name__),))
    context.abort(grpc.StatusCode[status], str(exc)[:1000])


def _start_tls_server(address: str, handlers: Mapping[str, Callable[[bytes], bytes]],
                      streams: Mapping[str, StreamHandler], environment: str,
                      transport: Transport, limits: CallLimits,
                      health: Any | None = None) -> grpc.Server:
    """:func:`start_server` over mutual TLS: every call is admitted from its certificate."""
    def enter(name: str, context: grpc.ServicerContext) -> tuple[Identity, PeerClaims | None]:
        try:
            caller = transport.caller(context)
            return caller, admit(name, caller, environment)  # type: ignore[return-value]
        except PkiError as exc:
            raise PeerAuthError(f"{name} refused: {exc}") from None

    def unary(fn: Callable[[bytes], bytes], name: str) -> grpc.RpcMethodHandler:
        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                caller, claims = enter(name, context)
                token = _CALLER.set(caller)
                try:
                    with (limits.peer_call(None, False) if claims else nullcontext(),
                          serving_as(claims)):
                        return fn(request)
                finally:
                    _CALLER.reset(token)
            except Exception as exc:  # noqa: BLE001 - ended with a status
                _end_unary(context, name, exc)
                raise  # unreachable: abort raises
        return grpc.unary_unary_rpc_method_handler(handle)

    def stream(fn: StreamHandler, name: str) -> grpc.RpcMethodHandler:
        def handle(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            try:
                caller, claims = enter(name, context)
                with limits.peer_call(caller.uri, True) if claims else nullcontext():
                    requests = _first_message(requests, context, limits.first_message_s)
                    if claims is not None and name in PEER_METHODS:  # its own queue only
                        first = next(requests, None)
                        asked = request_peer(first)
                        if asked is not None and asked != claims.peer:
                            raise PeerForbiddenError(
                                f"{name} refused: peer {claims.peer!r} may not act on the"
                                f" queue of {asked!r}")
                        requests = chain([] if first is None else [first], requests)
                    token = _CALLER.set(caller)
                    try:
                        with serving_as(claims):
                            yield from fn(requests, context)
                    finally:
                        _CALLER.reset(token)
            except PeerAuthError as exc:
                _refuse(context, name, exc)
            except Exception as exc:  # noqa: BLE001 - ended with a status
                _end_stream(context, name, exc)
        return grpc.stream_stream_rpc_method_handler(handle)

    server = grpc.server(ThreadPoolExecutor(max_workers=limits.workers),
                         options=[("grpc.so_reuseport", 0), *SERVER_LIVENESS, *_OPTIONS])
    methods = {name: unary(fn, name) for name, fn in handlers.items()}
    methods.update({name: stream(fn, name) for name, fn in streams.items()})
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    if health is not None:
        add_health(server, health)
    if not transport.listen(server, address):
        raise GossipError(f"cannot listen on {address} (in use or not a local address)")
    server.start()
    return server


def gossip_round(client: ReplicaClient, mine: bytes, addresses: Mapping[str, str],
                 on_state: Callable[[NodeState], None] | None, timeout: float,
                 pool: ThreadPoolExecutor) -> dict[str, bool]:
    """Push ``mine`` to every address and feed each reply to ``on_state``; returns
    ``{node: answered}``. With ``on_state`` None it is a push only: the replies are not
    decoded (the receivers push their own changes)."""
    def one(node: str, address: str) -> bool:
        try:
            reply = client.call(address, "Gossip", mine, timeout)
            if on_state is not None:
                state = NodeState.decode(reply)
                if state.node_id != node:  # only a node speaks for itself, replies included
                    log.warning("gossip reply from %s at %s speaks for %s: dropped", node,
                                address, state.node_id)
                    return False
                on_state(state)
            return True
        except grpc.RpcError as exc:
            log.debug("gossip to %s at %s failed: %s", node, address, exc.code())
        except Exception as exc:  # a bad reply must not stop gossip with the others
            log.warning("gossip reply from %s unusable: %s", node, exc)
        return False
    client.know(addresses)
    futures = {n: pool.submit(one, n, a) for n, a in addresses.items()}
    return {n: f.result() for n, f in futures.items()}


def fetch_status(addresses: Iterable[str], timeout: float = 5.0,
                 secret: str | bytes | None = None,
                 transport: Transport | None = None) -> dict[str, Any]:
    """The status document of the first node that answers; raises :class:`GossipError`
    naming every address that did not. Signed with ``secret``, else with the secret of the
    cluster file that named the address (see :class:`ReplicaClient`)."""
    client, errors = ReplicaClient(secret, transport), []
    try:
        for address in addresses:
            try:
                return dict(json.loads(client.call(address, "Status", b"", timeout=timeout)))
            except grpc.RpcError as exc:
                errors.append(f"{address}: {exc.code().name}")
    finally:
        client.close()
    raise NodeUnreachableError("no replica node answered (" + "; ".join(errors) + ")")
