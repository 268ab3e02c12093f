"""``tidemark replica run | status`` and ``tidemark bench ingest``."""

from __future__ import annotations

import argparse
import json
import os

from replica.exceptions import NodeUnreachableError

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    from replica.config import load_cluster_file
    from replica.node import Node
    cf = load_cluster_file(args.config)
    node = Node(cf, args.node)
    try:
        node.start()
    except BaseException:
        node.close()
        raise
    return node.run()


def _status(args: argparse.Namespace) -> int:
    import grpc

    from gossip.exchange import Peers
    from replica.status import render_text
    if args.address:
        addresses = [args.address]
    else:
        from replica.config import load_cluster_file
        path = args.config or os.environ.get("TIDEMARK_CLUSTER_CONFIG")
        if not path:
            from log.settings import default_state_dir
            path = str(default_state_dir() / "cluster.toml")
        addresses = [n.address for n in load_cluster_file(path).nodes.values()]
    peers = Peers()
    errors = []
    try:
        for address in addresses:
            try:
                doc = json.loads(peers.call(address, "Status", b"", timeout=args.timeout))
                break
            except grpc.RpcError as exc:
                errors.append(f"{address}: {exc.code().name}")
        else:
            raise NodeUnreachableError("no replica node answered (" + "; ".join(errors) + ")")
    finally:
        peers.close()
    print(json.dumps(doc, indent=2) if args.json else render_text(doc))
    return 0


def _bench_ingest(args: argparse.Namespace) -> int:
    from replica.bench import run_bench
    return run_bench(args)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``replica`` and ``bench ingest``."""
    replica = commands.add_parser("replica", help="LevelDB replica nodes")
    sub = replica.add_subparsers(dest="replica_command", metavar="COMMAND")
    replica.set_defaults(func=lambda a: (replica.print_help(), 2)[1])
    run = sub.add_parser("run", help="run one replica node")
    run.add_argument("--config", required=True, help="cluster TOML")
    run.add_argument("--node", required=True, help="node id, e.g. p0r0")
    run.set_defaults(func=_run)
    status = sub.add_parser("status", help="nodes, epoch, interval maps, UST, GC point")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--config", default=None,
                        help="cluster TOML (default: the local stack's cluster.toml)")
    status.add_argument("--address", default=None, help="ask this node (HOST:PORT)")
    status.add_argument("--timeout", type=float, default=5.0)
    status.set_defaults(func=_status)
    ingest = bench.add_parser("ingest", help="node ingest rate vs plain consumer + plyvel")
    ingest.add_argument("--records", type=int, default=500_000)
    ingest.add_argument("--config", default=None, help="TOML with a [kafka] table")
    ingest.add_argument("--bootstrap", default=None)
    ingest.add_argument("--topic-prefix", default=None,
                        help="topic prefix (default: a fresh bench-ingest-<random>. prefix, deleted after)")
    ingest.add_argument("--partitions", type=int, default=4)
    ingest.add_argument("--dir", default=None, help="scratch folder for the stores")
    ingest.add_argument("--json", action="store_true")
    ingest.set_defaults(func=_bench_ingest)
