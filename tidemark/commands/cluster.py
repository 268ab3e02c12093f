"""``tidemark cluster remove-node | add-node | show``: config changes as new epochs."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tidemark.gossip.cluster_config import Epoch
from tidemark.gossip.exceptions import EpochError
from tidemark.log.settings import Settings, load_settings
from tidemark.options import add_json_flag, cluster_file, emit, env_flag, print_json
from tidemark.stack import LocalStack

__all__ = ["register"]


def _settings(args: argparse.Namespace) -> Settings:
    path: str | None = cluster_file(args)
    if not args.config and not Path(str(path)).exists():
        path = None
    return load_settings(path, state_dir=args.state_dir, bootstrap=args.bootstrap or None)


def _current(settings: Settings) -> Epoch:
    from tidemark.gossip.cluster_config import ConfigLog
    from tidemark.log.topics import require_topics
    require_topics(settings, ("config",))
    log = ConfigLog(settings)
    try:
        epoch = log.read_to_end()
    finally:
        log.close()
    if epoch is None:
        raise EpochError("no cluster config yet: start the replica nodes first")
    return epoch


def _commit(settings: Settings, candidate: Epoch) -> Epoch:
    """Append ``candidate`` and return it once the config log shows it won its epoch."""
    from tidemark.gossip.cluster_config import ConfigLog, append_epoch
    append_epoch(settings, candidate)
    log = ConfigLog(settings)
    try:
        log.read_to_end()
    finally:
        log.close()
    if candidate not in log.history:
        raise EpochError(f"a competing change won epoch {candidate.epoch}; check and retry")
    return candidate


def _committed(args: argparse.Namespace, epoch: Epoch) -> int:
    """A change's output: ``epoch N: reason``, or with ``--json`` the new epoch's record
    (the shape of ``cluster show``)."""
    emit(args, epoch.to_record(), f"epoch {epoch.epoch}: {epoch.reason}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from tidemark.gossip.cluster_config import Partition
    settings = _settings(args)
    epoch = _current(settings)
    part = epoch.partition_of(args.node_id)
    if part is None:
        raise EpochError(f"node {args.node_id!r} is not in epoch {epoch.epoch}")
    replicas = tuple(r for r in part.replicas if r != args.node_id)
    if not replicas:
        raise EpochError(f"removing {args.node_id} would leave {part.name} with no counting "
                         f"replica; add a replacement first")
    parts = tuple(Partition(p.name, p.log_partitions, replicas,
                            tuple(j for j in p.joining if j != args.node_id))
                  if p is part else p for p in epoch.partitions)
    nodes = {n: a for n, a in epoch.nodes.items() if n != args.node_id}
    committed = _commit(settings, epoch.successor(nodes=nodes, partitions=parts,
                                                  reason=f"remove {args.node_id}"))
    code = _committed(args, committed)
    _forget_locally(args.state_dir, args.node_id)
    return code


def _forget_locally(state_dir: str, node_id: str) -> None:
    """If the local stack runs this node, stop tracking it so `local up` won't restart it."""
    if (Path(state_dir) / "state.json").exists():
        LocalStack(state_dir).forget(node_id)


def _add(args: argparse.Namespace) -> int:
    from tidemark.gossip.cluster_config import Partition
    if not re.fullmatch(r"[\w.-]+:\d{1,5}", args.address):
        raise EpochError(f"--address must be HOST:PORT, got {args.address!r}")
    settings = _settings(args)
    epoch = _current(settings)
    if args.node_id in epoch.nodes:
        raise EpochError(f"node {args.node_id!r} is already in epoch {epoch.epoch}")
    names = [p.name for p in epoch.partitions]
    if args.partition not in names:
        raise EpochError(f"no replica partition {args.partition!r} (have {', '.join(names)})")
    parts = tuple(Partition(p.name, p.log_partitions, p.replicas, p.joining + (args.node_id,))
                  if p.name == args.partition else p for p in epoch.partitions)
    return _committed(args, _commit(
        settings, epoch.successor(nodes={**epoch.nodes, args.node_id: args.address},
                                  partitions=parts,
                                  reason=f"add {args.node_id} to {args.partition}")))


def _show(args: argparse.Namespace) -> int:
    print_json(_current(_settings(args)).to_record())  # JSON with or without --json
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``cluster``."""
    cluster = commands.add_parser("cluster", help="replica cluster config changes")
    sub = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND")
    cluster.set_defaults(func=lambda a: (cluster.print_help(), 2)[1])

    def common(p: argparse.ArgumentParser, json_help: str) -> None:
        env_flag(p, "--config", "config",
                 help="cluster TOML (default: the local stack's cluster.toml)")
        env_flag(p, "--bootstrap", "bootstrap", aliases=("--bootstrap-server",))
        env_flag(p, "--state-dir", "state_dir")
        add_json_flag(p, help=json_help)

    change = "print the new epoch's record as JSON (as cluster show prints it)"

    rm = sub.add_parser("remove-node", help="append an epoch without the node")
    rm.add_argument("node_id", help="the node to remove, e.g. p0r1")
    common(rm, change)
    rm.set_defaults(func=_remove)
    add = sub.add_parser("add-node", help="append an epoch with a joining node")
    add.add_argument("node_id", help="the node to add, e.g. p0r2")
    add.add_argument("--partition", required=True, help="replica partition, e.g. p0")
    add.add_argument("--address", required=True, help="the node's gRPC HOST:PORT")
    common(add, change)
    add.set_defaults(func=_add)
    show = sub.add_parser("show", help="the current epoch")
    common(show, "accepted for scripts: the epoch is printed as JSON either way")
    show.set_defaults(func=_show)
