"""Prometheus as a process of the local stack (``tidemark local up --prometheus``).

The Debian ``prometheus`` binary, on a free loopback port, with everything under
``<state dir>/prometheus/``: ``prometheus.yml`` (generated), ``alerts.yml`` (a copy of the
repository's ``deploy/prometheus/alerts.yml``), ``targets/*.json`` (the scrape targets, as
file-based service discovery) and ``data/`` (the TSDB). It scrapes:

* ``tidemark-replica``: every node of the stack's ``cluster.toml`` on its
  ``metrics_host:metrics_port`` (target label ``node``; the nodes' own labels win,
  ``honor_labels``);
* ``tidemark-queues``: the Spark job's metrics endpoint, when the stack runs the job and
  :func:`tidemark.stack.spark.metrics_address` names one;
* ``tidemark-peer``: ``targets/peer.json``, empty here (peers are the application's
  processes; list their ``metrics_bind`` addresses there);
* ``prometheus``: itself.

Every ``up`` rewrites the targets (Prometheus rereads them within seconds, no restart), so
nodes or a job added later are scraped once ``up`` ran again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from tidemark.gossip.pki import write_private
from tidemark.log.exceptions import ClusterLaunchError
from tidemark.replica.config import load_cluster_file
from tidemark.stack.launcher import LocalStack, ProcessSpec
from tidemark.stack.processes import free_ports
from tidemark.stack.replicas import CONFIG_NAME

__all__ = ["plan", "status", "write_config", "scrape_targets", "rules_file", "NAME", "JOBS",
           "SCRAPE_INTERVAL_S"]

#: The process's name (and kind) in the stack.
NAME = "prometheus"

#: The scrape jobs, in the order of the config: job name -> its targets file's stem.
JOBS = {"tidemark-replica": "replica", "tidemark-queues": "queues", "tidemark-peer": "peer"}

#: Scrape and rule evaluation interval of the local Prometheus.
SCRAPE_INTERVAL_S = 5


def rules_file() -> Path:
    """The repository's alert rules, ``deploy/prometheus/alerts.yml`` (a source checkout:
    the rules are not part of the installed package)."""
    import tidemark
    path = Path(tidemark.__file__).resolve().parent.parent / "deploy" / "prometheus" / "alerts.yml"
    if not path.is_file():
        raise ClusterLaunchError(f"{path} not found: `local up --prometheus` runs from a source"
                                 " checkout")
    return path


def status(stack: LocalStack) -> dict[str, Any] | None:
    """``{"address", "url", "pid", "up"}`` of the stack's Prometheus, None without one
    (``local status --json``: ``prometheus``)."""
    found = stack.processes(NAME)
    if not found:
        return None
    spec = found[0]
    return {"address": spec.address, "url": f"http://{spec.address}", "pid": spec.pid,
            "up": stack.alive(spec)}


def scrape_targets(stack: LocalStack) -> dict[str, list[dict[str, Any]]]:
    """Per targets file stem (:data:`JOBS`), its file-SD groups: one per replica node of the
    stack's cluster file (nodes with ``metrics_port = 0`` cannot be found, and are left out),
    the Spark job's address if it has one, no peer."""
    out: dict[str, list[dict[str, Any]]] = {stem: [] for stem in JOBS.values()}
    path = stack.state_dir / CONFIG_NAME
    if path.exists():
        cf = load_cluster_file(path)
        for node in cf.nodes.values():
            if not node.metrics_port:
                continue
            host = cf.metrics_host
            if host in ("0.0.0.0", "::", ""):
                host = node.address.rsplit(":", 1)[0]
            out["replica"].append({"targets": [f"{host}:{node.metrics_port}"],
                                   "labels": {"node": node.node_id}})
    address = _spark_address(stack)
    if address:
        out["queues"].append({"targets": [address], "labels": {}})
    return out


def _spark_address(stack: LocalStack) -> str | None:
    """The Spark job's metrics ``host:port``, when the stack runs the job and
    ``tidemark.stack.spark`` can say where it serves."""
    if not stack.processes("spark"):
        return None
    from tidemark.stack import spark
    find = getattr(spark, "metrics_address", None)
    if find is None:
        return None
    address = find(stack)
    return str(address) if address else None


def write_config(folder: Path, listen: str, rules: Path) -> Path:
    """Write ``prometheus.yml`` (and a copy of ``rules``) into ``folder``; returns its path.
    The targets files (``targets/<stem>.json``) are created empty when missing."""
    (folder / "targets").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rules, folder / "alerts.yml")
    for stem in JOBS.values():
        target = folder / "targets" / f"{stem}.json"
        if not target.exists():
            target.write_text("[]\n")
    jobs = "".join(
        f"  - job_name: {job}\n"
        + ("    honor_labels: true\n" if stem == "replica" else "")
        + "    file_sd_configs:\n"
        f"      - files: [targets/{stem}.json]\n"
        f"        refresh_interval: {SCRAPE_INTERVAL_S}s\n"
        for job, stem in JOBS.items())
    text = (
        "# Written by `tidemark local up --prometheus` (tidemark/stack/prometheus.py) at every\n"
        "# up; the targets files under targets/ are rewritten too.\n"
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL_S}s\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL_S - 1}s\n"
        f"  evaluation_interval: {SCRAPE_INTERVAL_S}s\n"
        "  external_labels:\n"
        "    stack: local\n"
        "rule_files:\n"
        "  - alerts.yml\n"
        "scrape_configs:\n"
        f"{jobs}"
        "  - job_name: prometheus\n"
        "    static_configs:\n"
        f"      - targets: ['{listen}']\n")
    path = folder / "prometheus.yml"
    path.write_text(text)
    return path


def _write_targets(folder: Path, targets: dict[str, list[dict[str, Any]]]) -> None:
    """Replace each targets file at once (a rename: Prometheus never reads half a file)."""
    for stem, groups in targets.items():
        tmp = folder / "targets" / f".{stem}.json.tmp"
        write_private(tmp, (json.dumps(groups, indent=2) + "\n").encode())
        tmp.replace(folder / "targets" / f"{stem}.json")


def plan(stack: LocalStack) -> list[ProcessSpec]:
    """One process of kind ``prometheus``: the Debian binary on a loopback port (kept from
    an earlier ``up``), its config, rules and targets written now; a running one rereads
    them (SIGHUP)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise ClusterLaunchError("prometheus is not on PATH: install Debian's prometheus package "
                         "(apt-get install prometheus, or bash scripts/system_packages.sh "
                         "prometheus as root)")
    folder = stack.state_dir / NAME
    known = stack.state["processes"].get(NAME)
    listen = known["address"] if known else f"127.0.0.1:{free_ports(1)[0]}"
    config = write_config(folder, listen, rules_file())
    _write_targets(folder, scrape_targets(stack))
    if known and stack.alive(ProcessSpec(**known)):
        os.kill(known["pid"], signal.SIGHUP)  # reread the config and the rules
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address={listen}", "--storage.tsdb.retention.time=7d",
            "--web.enable-lifecycle", "--log.level=warn"]
    return [ProcessSpec(name=NAME, kind=NAME, argv=argv, address=listen,
                        ready_port=int(listen.rsplit(":", 1)[1]))]
