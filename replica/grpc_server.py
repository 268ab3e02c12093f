"""The node's gRPC server: raw-bytes generic handlers, bound to one loopback address.

Methods of ``tidemark.Replica``: ``Gossip`` (NodeState -> NodeState), ``Status`` (-> JSON),
``Digest`` (JSON ``{partition, start, end}`` -> JSON ``{digest, count}``), ``Fetch`` (JSON
``{partition, start, end}`` -> records, each ``>QI`` offset and length then the value),
``Pin`` (JSON ``{barrier: {tp: offset}}`` -> ``{pin, barrier}``), ``Unpin`` (``{pin}``).
"""

from __future__ import annotations

import logging
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Mapping

import grpc

from gossip.exchange import SERVICE
from replica.exceptions import ReplicaError

__all__ = ["start_server", "pack_records", "unpack_records"]

log = logging.getLogger(__name__)
_REC = struct.Struct(">QI")


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


def start_server(address: str, handlers: Mapping[str, Callable[[bytes], bytes]],
                 workers: int = 8) -> grpc.Server:
    """Serve ``handlers`` (method name -> bytes handler) on ``address``."""
    def wrap(fn: Callable[[bytes], bytes]) -> grpc.RpcMethodHandler:
        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                return fn(request)
            except Exception as exc:  # report, never kill the server thread
                log.warning("rpc failed: %s", exc)
                context.abort(grpc.StatusCode.INTERNAL, str(exc)[:300])
        return grpc.unary_unary_rpc_method_handler(handle)
    server = grpc.server(ThreadPoolExecutor(max_workers=workers),
                         options=[("grpc.so_reuseport", 0),
                                  ("grpc.max_receive_message_length", 64 << 20),
                                  ("grpc.max_send_message_length", 64 << 20)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {name: wrap(fn) for name, fn in handlers.items()}),))
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if not port:
        raise ReplicaError(f"cannot listen on {address} (in use or not a local address)")
    server.start()
    return server
