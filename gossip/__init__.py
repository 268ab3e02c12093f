"""Cluster config epochs, interval maps, the gossiped node state, the replica service
(client and server) and who may call it (cluster secret, peer tokens), the universal stable
cut, the GC point and missing-data decisions (the pure parts are in ``interval_map``,
``stable_cut``, ``gc_point``, ``missing``, ``peer_auth``, ``txlog_admission``), and the
signatures of txlog records (``record_signing``)."""

from tidemark.gossip.cluster_config import ConfigLog, Epoch, Partition, append_epoch, fold, validate
from tidemark.gossip.exceptions import EpochError, GossipError, NodeUnreachableError
from tidemark.gossip.gc_point import clamp_pin, cluster_gc_point, local_gc_cut
from tidemark.gossip.interval_map import IntervalMap, record_hash
from tidemark.gossip.missing import find_source, intersect, unrecoverable
from tidemark.gossip.node_state import NodeState, PartitionRanges, cut_entries, cut_from_entries
from tidemark.gossip.peer_auth import PeerClaims, authorize_peer, issue_token, verify_token
from tidemark.gossip.record_signing import (
    IssuerSigners,
    RecordSigner,
    SignatureRefused,
    SignatureVerifier,
    sealer_of,
    verifier_of,
)
from tidemark.gossip.service import (
    ReplicaClient,
    fetch_status,
    gossip_round,
    pack_records,
    start_server,
    unpack_records,
)
from tidemark.gossip.stable_cut import (
    HoldTracker,
    ReplicaView,
    cut_holders,
    stable_cut,
    stable_cut_ms,
)
from tidemark.gossip.txlog_admission import (
    Refusal,
    TxlogAdmission,
    environment_refusal,
    signer_refusal,
)

__all__ = ["ConfigLog", "Epoch", "Partition", "append_epoch", "fold", "validate",
           "EpochError", "GossipError", "clamp_pin", "cluster_gc_point", "local_gc_cut",
           "find_source", "intersect", "unrecoverable", "HoldTracker", "ReplicaView",
           "cut_holders", "stable_cut", "stable_cut_ms", "NodeUnreachableError", "IntervalMap",
           "record_hash", "NodeState", "PartitionRanges", "cut_entries", "cut_from_entries",
           "ReplicaClient", "fetch_status", "gossip_round", "pack_records", "start_server",
           "unpack_records", "PeerClaims", "authorize_peer", "issue_token", "verify_token",
           "RecordSigner", "SignatureVerifier", "SignatureRefused", "IssuerSigners", "sealer_of",
           "verifier_of", "Refusal", "TxlogAdmission", "environment_refusal", "signer_refusal"]
