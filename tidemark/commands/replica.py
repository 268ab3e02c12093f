"""``tidemark replica run | status | health`` and ``tidemark bench ingest``."""

from __future__ import annotations

import argparse
import json

from tidemark.bench import targets
from tidemark.options import (
    add_bench_check,
    add_json_flag,
    bench_exit,
    cluster_file,
    env_flag,
    operator_transport,
    progress,
)

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    from tidemark.replica.config import load_cluster_file
    from tidemark.replica.node import Node
    cf = load_cluster_file(cluster_file(args))
    node = Node(cf, args.node, insecure=True if args.insecure else None)
    try:
        node.start()
    except BaseException:
        node.close()
        raise
    return node.run()


def _status(args: argparse.Namespace) -> int:
    from tidemark.gossip.service import fetch_status
    from tidemark.replica.status import render_text
    if args.address:
        addresses = [args.address]
    else:
        from tidemark.replica.config import load_cluster_file
        addresses = [n.address for n in load_cluster_file(cluster_file(args)).nodes.values()]
    doc = fetch_status(addresses, timeout=args.timeout, transport=operator_transport())
    print(json.dumps(doc, indent=2) if args.json else render_text(doc))
    return 0


def _health(args: argparse.Namespace) -> int:
    from tidemark.gossip.exceptions import NodeUnreachableError
    from tidemark.gossip.health import probe
    address, node = args.address, args.node
    if not address:
        from tidemark.replica.config import load_cluster_file
        cf = load_cluster_file(cluster_file(args))
        if node is None and len(cf.nodes) == 1:
            node = next(iter(cf.nodes))
        if node is None or node not in cf.nodes:
            raise NodeUnreachableError(
                f"name the node to probe: --address HOST:PORT or --node ID (nodes of {cf.path}:"
                f" {', '.join(sorted(cf.nodes))})")
        address = cf.nodes[node].address
    status = probe(address, operator_transport(), timeout=args.timeout, node=node)
    if args.json:  # the answer, whatever it is
        print(json.dumps({"address": address, "node": node, "status": status}))
    if status != "SERVING":
        raise NodeUnreachableError(f"{address}: {status}")
    if not args.json:
        print(f"{address}{f' ({node})' if node else ''}: {status}")
    return 0


def _bench_ingest(args: argparse.Namespace) -> int:
    from tidemark.bench.replica import run_bench
    return run_bench(args)


def _bench_gc(args: argparse.Namespace) -> int:
    from tidemark.bench.replica import gc_bench
    result = gc_bench(args.bootstrap or None, args.config, store_records=args.store_records,
                      ingest_records=args.records, say=progress)
    if args.json:
        print(json.dumps(result, indent=2))
        return bench_exit(args, result)
    print(f"store of {result['store_records']:,} records, {result['ingested_records']:,} more"
          f" ingested into fresh copies of it, {result['runs_per_side']} runs with GC and"
          f" {result['runs_per_side']} without, alternating")
    ages = (("gc_min_age_0", "minimum age 0   "), ("gc_min_age_24h", "minimum age 24 h"))
    for name, label in ages:
        r = result[name]
        print(f"{label}: ingest with GC {r['tx_per_s_gc']:>9,} tx/s, without"
              f" {r['tx_per_s_no_gc']:>9,} tx/s  ratio {r['ratio']}  (GC released"
              f" {r['gc_released_during_ingest']:,} per run during ingest;"
              f" peak RSS {r['peak_rss_mib']} MiB)")
    print(f"({'meets' if result['met'] else 'BELOW'} target ratio >= {result['target_ratio']}"
          f" at both minimum ages; load average {result['load_average_1m']})")
    return bench_exit(args, result)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``replica`` and ``bench ingest``."""
    replica = commands.add_parser("replica", help="LevelDB replica nodes")
    sub = replica.add_subparsers(dest="replica_command", metavar="COMMAND")
    replica.set_defaults(func=lambda a: (replica.print_help(), 2)[1])
    run = sub.add_parser("run", help="run one replica node")
    run.set_defaults(service=True)  # librdkafka's warnings in its log
    env_flag(run, "--config", "config",
             help="cluster TOML (default: the local stack's cluster.toml)")
    env_flag(run, "--state-dir", "state_dir")
    run.add_argument("--node", required=True, help="node id, e.g. p0r0")
    run.add_argument("--insecure", action="store_true",
                     help="development only: plaintext gRPC, no caller identity"
                          " (TIDEMARK_INSECURE=1); a warning at every start")
    run.set_defaults(func=_run)
    status = sub.add_parser("status", help="nodes, epoch, interval maps, UST, GC point")
    add_json_flag(status, help="machine-readable output")
    env_flag(status, "--config", "config",
             help="cluster TOML (default: the local stack's cluster.toml)")
    env_flag(status, "--state-dir", "state_dir")
    status.add_argument("--address", default=None, help="ask this node (HOST:PORT)")
    status.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the node's answer")
    status.set_defaults(func=_status)
    health = sub.add_parser(
        "health", help="probe a node's grpc.health.v1 service over mutual TLS: exit 0 when"
                       " SERVING (the compose healthcheck)")
    add_json_flag(health, help="one JSON line")
    env_flag(health, "--config", "config",
             help="cluster TOML naming --node's address (default: the local stack's)")
    env_flag(health, "--state-dir", "state_dir")
    health.add_argument("--address", default=None, help="probe this node (HOST:PORT)")
    health.add_argument("--node", default=None,
                        help="the node id: its address from the cluster TOML, and, over TLS,"
                             " the identity its certificate must prove")
    health.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the node's answer")
    health.set_defaults(func=_health)
    ingest = bench.add_parser("ingest", help="node ingest rate vs plain consumer + plyvel")
    ingest.add_argument("--records", type=int, default=500_000, help="txlog records to ingest")
    env_flag(ingest, "--config", "config")
    env_flag(ingest, "--bootstrap", "bootstrap", aliases=("--bootstrap-server",))
    ingest.add_argument("--topic-prefix", default=None,
                        help="topic prefix (default: a fresh bench-ingest-<random>. prefix,"
                             " deleted after)")
    ingest.add_argument("--partitions", type=int, default=4, help="txlog partitions")
    ingest.add_argument("--dir", default=None, help="scratch folder for the stores")
    add_json_flag(ingest)
    add_bench_check(ingest, targets.ingest, "node ingest >= 100,000 tx/s")
    ingest.set_defaults(func=_bench_ingest)
    gc = bench.add_parser("gc", help="ingest with GC running on a 1M-record store vs without"
                                     " (minimum age 0 and 24 h)")
    env_flag(gc, "--config", "config")
    env_flag(gc, "--bootstrap", "bootstrap", aliases=("--bootstrap-server",))
    gc.add_argument("--store-records", type=int, default=1_000_000,
                    help="records in the store before GC")
    gc.add_argument("--records", type=int, default=1_000_000, help="records to release")
    add_json_flag(gc)
    add_bench_check(gc, targets.gc, "ratio >= 0.8 at both minimum ages")
    gc.set_defaults(func=_bench_gc)
