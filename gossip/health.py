"""The standard gRPC health service (``grpc.health.v1.Health``) on a replica node's server,
and the probe that asks it (``tidemark replica health``, the compose healthcheck).

A node's server answers ``Check`` and ``Watch`` for the whole server (``""``) and for
``tidemark.Replica``: SERVING from the moment the node serves, NOT_SERVING once it stops. The
health service sits behind the same mutual TLS as the replica service: the handshake needs a
certificate of the cluster's CA, and a revoked certificate is refused (UNAUTHENTICATED), so a
probe is any process holding one (a node, an operator, a peer). ``grpcio-health-checking`` is
part of the ``replica`` extra: the imports are local to the functions.
"""

from __future__ import annotations

from typing import Any

import grpc

from tidemark.gossip.exceptions import NodeUnreachableError
from tidemark.gossip.pki import Identity, PkiError
from tidemark.gossip.tls import Transport

__all__ = ["HEALTH_SERVICES", "health_servicer", "add_health", "set_serving", "probe"]

#: The names a node reports a status for: the whole server and the replica service.
HEALTH_SERVICES = ("", "tidemark.Replica")


def health_servicer(transport: Transport | None = None) -> Any:
    """A ``HealthServicer`` reporting NOT_SERVING for :data:`HEALTH_SERVICES` until
    :func:`set_serving`; with a secure ``transport``, a caller whose certificate names no
    identity or is revoked is refused (UNAUTHENTICATED)."""
    from grpc_health.v1 import health, health_pb2

    class Guarded(health.HealthServicer):  # type: ignore[misc]
        def _admit(self, context: grpc.ServicerContext) -> None:
            if transport is None or not transport.secure:
                return
            try:
                transport.caller(context)
            except PkiError as exc:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"Health refused: {exc}")

        def Check(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
            self._admit(context)
            return super().Check(request, context)

        def Watch(self, request: Any, context: grpc.ServicerContext,  # noqa: N802
                  send_response_callback: Any = None) -> Any:
            self._admit(context)
            return super().Watch(request, context, send_response_callback)

    servicer = Guarded()
    for name in HEALTH_SERVICES:
        servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    return servicer


def add_health(server: grpc.Server, servicer: Any) -> None:
    """Serve ``servicer`` on ``server`` (before it starts)."""
    from grpc_health.v1 import health_pb2_grpc
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)


def set_serving(servicer: Any, serving: bool) -> None:
    """SERVING or NOT_SERVING for every name of :data:`HEALTH_SERVICES`; NOT_SERVING is final
    (the node is stopping: later updates are ignored)."""
    from grpc_health.v1 import health_pb2
    if serving:
        for name in HEALTH_SERVICES:
            servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    else:
        servicer.enter_graceful_shutdown()


def probe(address: str, transport: Transport, timeout: float = 5.0,
          node: str | None = None, service: str = "") -> str:
    """The status name (``SERVING``, ``NOT_SERVING``, ...) the node at ``address`` reports
    for ``service``; over TLS the server must prove it is replica node ``node`` (any replica
    node when None). Raises :class:`NodeUnreachableError` with one line when it does not
    answer."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    expect: Identity | str = Identity("node", node) if node else "node"
    channel = transport.channel(address, expect)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    except grpc.RpcError as exc:
        details = " ".join(str(exc.details() or "").split())[:200]  # type: ignore[attr-defined]
        raise NodeUnreachableError(f"{address}: {exc.code().name}"  # type: ignore[attr-defined]
                                   + (f" ({details})" if details else "")) from None
    finally:
        channel.close()
