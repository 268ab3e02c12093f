"""The nemesis group (``make nemesis``, root only): a cluster whose brokers and replica nodes
each run on a host of their own (network namespaces on one bridge), peers on hosts of their
own, a nemesis over those hosts, and a recorder that samples what the checker judges."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests import cluster
from tidemark.stack.hosts import Hosts, remove_stale
from tidemark.stack.launcher import LocalStack
from tidemark.stack.replicas import CONFIG_NAME, plan, write_cluster_file

#: Partitions of txlog in the nemesis cluster; all owned by the replica pair p0r0/p0r1.
PARTITIONS = 4


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "the nemesis group needs root (network namespaces)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"the nemesis group needs {tool} (make nemesis installs it)"
    return None


@pytest.fixture(scope="module")
def hosts_cluster(tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[LocalStack, Hosts]]:
    """3 brokers and replica nodes p0r0, p0r1 (1x2), each on a host of its own."""
    why = _missing()
    if why:
        pytest.skip(why)
    remove_stale()
    folder = tmp_path_factory.mktemp("hosts") / "stack"
    with cluster.elsewhere():
        saved = {"TIDEMARK_PARTITIONS": os.environ.get("TIDEMARK_PARTITIONS")}
        os.environ["TIDEMARK_PARTITIONS"] = str(PARTITIONS)
        hosts = Hosts().up()
        stack = LocalStack(folder, hosts=hosts)
        try:
            stack.up(brokers=3, timeout_s=180)
            s = stack.settings()
            write_cluster_file(folder / CONFIG_NAME, {"bootstrap": s.bootstrap,
                                                      "topic_prefix": s.topic_prefix,
                                                      "partitions": PARTITIONS},
                               "1x2", PARTITIONS, 200,
                               "\n[release]\ngc_interval_ms = 500\nmin_age_ms = 0\n",
                               address_of=lambda node: stack.host_address(stack.place(node)))
            stack.up(brokers=3, extra=[lambda st: plan(st, "1x2")], timeout_s=180)
            yield stack, hosts
        finally:
            stack.down(grace_s=5)
            hosts.close()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
