"""Durability waits of peers: block until a txlog offset holds at ``quorum`` or ``all``,
answered by the replica nodes (``WaitApplied`` / ``WaitStable``), never by polling."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

import grpc

from gossip.cluster_config import Epoch
from gossip.exceptions import DurabilityTimeoutError, GossipError, PeerAuthError, PeerForbiddenError
from gossip.service import ReplicaClient

__all__ = ["wait_replicated"]

_REFUSALS: dict[grpc.StatusCode, type[PeerAuthError]] = {
    grpc.StatusCode.UNAUTHENTICATED: PeerAuthError,
    grpc.StatusCode.PERMISSION_DENIED: PeerForbiddenError}


def wait_replicated(client: ReplicaClient, epoch: Epoch, partition: int, offset: int,
                    level: str, timeout_s: float, pool: ThreadPoolExecutor,
                    token_for: Callable[[str], str | None] = lambda address: None
                    ) -> tuple[list[str], int]:
    """Block until txlog ``partition`` offset ``offset`` holds at ``level``; returns the nodes
    that confirmed it and the end (exclusive) up to which the partition is known to hold at
    ``level`` (at least ``offset + 1``), so that one answer settles every earlier wait.

    ``quorum``: a majority of the partition's counting replicas applied it (``WaitApplied``);
    ``all``: the universal stable cut covers it (``WaitStable``; one node's cut suffices,
    since every node's cut is honest). Each node answers when the condition holds, so there
    is no polling. ``token_for(address)`` is the peer token to present (the nodes of a
    cluster with a secret refuse a wait without one). Raises :class:`DurabilityTimeoutError`
    naming the partition, or :class:`PeerAuthError` / ``PeerForbiddenError`` if a node
    refuses the caller.
    """
    tp = f"txlog/{partition}"
    replicas = epoch.owners().get(tp, [])
    if not replicas:
        raise GossipError(f"no replica owns {tp} in epoch {epoch.epoch}")
    method, need, field = (("WaitApplied", len(replicas) // 2 + 1, "applied_end")
                           if level == "quorum" else ("WaitStable", 1, "stable_end"))
    body = json.dumps({"partition": partition, "offset": offset,
                       "timeout_ms": int(timeout_s * 1000)}).encode()

    def ask(node: str) -> tuple[str, int] | None:
        address = epoch.nodes[node]
        try:
            reply = json.loads(client.call(address, method, body, timeout=timeout_s + 2,
                                           token=token_for(address)))
            if not reply.get("reached"):
                return None
            return node, max(offset + 1, int(reply.get(field) or 0))
        except grpc.RpcError as exc:
            refused = _REFUSALS.get(exc.code())
            if refused is not None:
                raise refused(f"{method} on {node} refused: {exc.details()}") from None
            return None
        except (ValueError, TypeError):
            return None
    futures = [pool.submit(ask, n) for n in replicas]
    confirmed: list[str] = []
    ends: list[int] = []
    for fut in as_completed(futures):
        answer = fut.result()  # a refusal raises here
        if answer is not None:
            confirmed.append(answer[0])
            ends.append(answer[1])
            if len(confirmed) >= need:
                # each of the `need` confirming nodes holds at least up to the smallest end
                return confirmed, min(ends)
    raise DurabilityTimeoutError(
        f"{level} not reached for {tp} offset {offset} within {timeout_s:g} s: "
        f"{len(confirmed)} of {len(replicas)} replicas ({', '.join(replicas)}) confirmed,"
        f" {need} needed")
