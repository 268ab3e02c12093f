"""Push-pull gossip over gRPC, without protoc.

Every gossip period a node sends its NodeState (Avro single-object bytes) to every other
node of the epoch with the unary method ``/tidemark.Replica/Gossip``; the reply is the
callee's NodeState. Both sides keep the newest state per node (by ``timestamp_ms``).
Other methods of the service carry JSON bodies (Status, Digest, Pin, Unpin) or a compact
binary record list (Fetch); see ``replica/grpc_server.py``.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

import grpc

from gossip.stable_cut import ReplicaView
from log.codec import default_codec
from replica.interval_map import IntervalMap

__all__ = ["SERVICE", "method_path", "Peers", "encode_state", "decode_state", "state_view",
           "state_maps", "gossip_round"]

log = logging.getLogger(__name__)
SERVICE = "tidemark.Replica"


def method_path(name: str) -> str:
    """Full gRPC method path of ``name``."""
    return f"/{SERVICE}/{name}"


class Peers:
    """A cache of gRPC channels by address, and raw-bytes unary calls."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def call(self, address: str, name: str, body: bytes, timeout: float = 2.0) -> bytes:
        """Call method ``name`` on ``address``; raises ``grpc.RpcError`` on failure."""
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = grpc.insecure_channel(
                    address, options=[("grpc.max_receive_message_length", 64 << 20),
                                      ("grpc.max_send_message_length", 64 << 20)])
        return channel.unary_unary(method_path(name))(body, timeout=timeout)

    def call_json(self, address: str, name: str, body: Mapping[str, Any],
                  timeout: float = 5.0) -> Any:
        """A JSON-bodied call."""
        return json.loads(self.call(address, name, json.dumps(body).encode(), timeout))

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()


def encode_state(state: Mapping[str, Any]) -> bytes:
    """A NodeState record as Avro single-object bytes."""
    return default_codec().encode("NodeState", state)


def decode_state(data: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_state` (raises CodecError)."""
    dec = default_codec().decode(data)
    if dec.name != "NodeState":
        from gossip.exceptions import GossipError
        raise GossipError(f"expected NodeState, got {dec.name}")
    return dec.record


def state_view(state: Mapping[str, Any]) -> ReplicaView:
    """The parts of a NodeState the stable cut and GC point need."""
    base, end, caught = {}, {}, {}
    for r in state["ranges"]:
        tp = f"{r['topic']}/{r['partition']}"
        base[tp] = (r["base_start"], r["base_end"])
        end[tp] = r["log_end"]
        if r.get("caught_up_ms"):
            caught[tp] = r["caught_up_ms"]
    gc = {f"{c['topic']}/{c['partition']}": c["offset"] for c in state["gc_cut"]}
    return ReplicaView(state["node_id"], state["epoch"], base, gc, caught, end)


def state_maps(state: Mapping[str, Any]) -> dict[str, IntervalMap]:
    """Full interval maps from a NodeState (for backfill and missing-data decisions)."""
    return {f"{r['topic']}/{r['partition']}": IntervalMap(
        r["base_end"], r["base_start"], [[d["start"], d["end"]] for d in r["detached"]])
        for r in state["ranges"]}


def gossip_round(peers: Peers, mine: bytes, addresses: Mapping[str, str],
                 on_state: Callable[[dict[str, Any]], None], timeout: float,
                 pool: ThreadPoolExecutor) -> dict[str, bool]:
    """Push ``mine`` to every address and feed each reply to ``on_state``; returns
    ``{node: answered}``."""
    def one(node: str, address: str) -> bool:
        try:
            on_state(decode_state(peers.call(address, "Gossip", mine, timeout)))
            return True
        except grpc.RpcError as exc:
            log.debug("gossip to %s at %s failed: %s", node, address, exc.code())
        except Exception as exc:  # a bad reply must not stop gossip with the others
            log.warning("gossip reply from %s unusable: %s", node, exc)
        return False
    futures = {n: pool.submit(one, n, a) for n, a in addresses.items()}
    return {n: f.result() for n, f in futures.items()}
