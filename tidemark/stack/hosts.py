"""Hosts of their own on one machine: a Linux network namespace per host, each joined to one
bridge by a veth pair, with a private address (root only).

The root namespace gets the bridge's first address, so the process that made the hosts (a
test, the nemesis) reaches every host over the bridge, as the hosts reach each other; nothing
is on loopback across hosts. Every name a run makes starts with ``tm`` and the run's id, which
encodes the pid that made it: :func:`remove_stale` deletes what runs whose process is gone
left behind (a SIGKILLed test), and :meth:`Hosts.close` what this run made, also after a
failure (a context manager).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Host", "Hosts", "HostsError", "remove_stale", "run_ip"]

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


class HostsError(RuntimeError):
    """A namespace, link or address could not be made (one line: the command and its error)."""


def run_ip(*argv: str, netns: str | None = None, check: bool = True) -> str:
    """Run ``ip``/``nft``/... (in ``netns`` when given); its stdout. Raises :class:`HostsError`."""
    cmd = list(argv) if netns is None else ["ip", "netns", "exec", netns, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise HostsError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


@dataclass(frozen=True)
class Host:
    """One host: its name, namespace, address on the bridge and veth ends."""

    name: str
    netns: str
    address: str
    veth: str  #: the bridge-side end (in the root namespace); the host's end is ``eth0``

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host (``ip netns exec`` execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass
class Hosts:
    """The hosts of one run, on one bridge with a /24 of 10.213.0.0/16 of its own."""

    run: str = field(default_factory=lambda: f"{os.getpid():x}{secrets.token_hex(1)}"[-6:])
    hosts: dict[str, Host] = field(default_factory=dict)
    subnet: ipaddress.IPv4Network | None = None

    def __post_init__(self) -> None:
        self.prefix = f"tm{self.run}"
        self.bridge = f"{self.prefix}br"
        self._made: list[tuple[str, str]] = []  # ("netns"|"link", name), in creation order

    # ---- making -------------------------------------------------------------------------
    def up(self) -> "Hosts":
        """Make the bridge and give the root namespace its first address."""
        if self.subnet is None:
            self.subnet = _free_subnet()
        gateway = f"{next(self.subnet.hosts())}/{self.subnet.prefixlen}"
        run_ip("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        run_ip("ip", "addr", "add", gateway, "dev", self.bridge)
        run_ip("ip", "link", "set", self.bridge, "up")
        _write_owner(self)
        return self

    def add(self, name: str) -> Host:
        """A new host ``name``: its namespace (loopback up), veth pair and next address."""
        if not _NAME.match(name):
            raise HostsError(f"host name {name!r}: lower-case letters, digits and '-' only")
        if name in self.hosts:
            return self.hosts[name]
        assert self.subnet is not None, "call up() first"
        index = len(self.hosts) + 2
        address = str(self.subnet.network_address + index)
        netns, veth = f"{self.prefix}-{name}", f"{self.prefix}v{index}"
        run_ip("ip", "netns", "add", netns)
        self._made.append(("netns", netns))
        run_ip("ip", "link", "set", "lo", "up", netns=netns)
        run_ip("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        self._made.append(("link", veth))
        run_ip("ip", "link", "set", f"{veth}p", "netns", netns)
        run_ip("ip", "link", "set", f"{veth}p", "name", "eth0", netns=netns)
        run_ip("ip", "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0",
               netns=netns)
        run_ip("ip", "link", "set", "eth0", "up", netns=netns)
        run_ip("ip", "route", "add", "default", "via", str(next(self.subnet.hosts())),
               netns=netns)
        run_ip("ip", "link", "set", veth, "master", self.bridge)
        run_ip("ip", "link", "set", veth, "up")
        host = self.hosts[name] = Host(name, netns, address, veth)
        return host

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge."""
        assert self.subnet is not None
        return str(next(self.subnet.hosts()))

    def describe(self) -> dict[str, Any]:
        """``{"bridge", "subnet", "hosts": {name: address}}``."""
        return {"bridge": self.bridge, "subnet": str(self.subnet),
                "hosts": {h.name: h.address for h in self.hosts.values()}}

    # ---- removing ------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Delete every namespace and link this run made (processes still inside a namespace
        are SIGKILLed first); returns what was removed. Safe to call twice."""
        removed = []
        for kind, name in reversed(self._made):
            if kind == "netns":
                _kill_inside(name)
                run_ip("ip", "netns", "del", name, check=False)
            else:
                run_ip("ip", "link", "del", name, check=False)
            removed.append(name)
        self._made.clear()
        _owner_file(self.prefix).unlink(missing_ok=True)
        return removed

    def __enter__(self) -> "Hosts":
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _owner_file(prefix: str) -> Path:
    """Where a run records the pid that owns its names (for :func:`remove_stale`)."""
    folder = Path("/run/tidemark-hosts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{prefix}.json"


def _write_owner(hosts: Hosts) -> None:
    _owner_file(hosts.prefix).write_text(json.dumps({"pid": os.getpid(),
                                                     "subnet": str(hosts.subnet)}))


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 that no route of the root namespace uses."""
    used = run_ip("ip", "-4", "route", "show")
    for _ in range(64):
        net = ipaddress.ip_network(f"10.213.{secrets.randbelow(250) + 2}.0/24")
        if str(net.network_address) not in used:
            return net  # type: ignore[return-value]
    raise HostsError("no free /24 in 10.213.0.0/16")


def _kill_inside(netns: str) -> None:
    for pid in run_ip("ip", "netns", "pids", netns, check=False).split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass


def remove_stale() -> list[str]:
    """Delete the namespaces and links of runs whose process is gone; returns their names."""
    removed: list[str] = []
    names = [line.split()[0] for line in run_ip("ip", "netns", "list").splitlines() if line]
    links = [m.group(1) for m in re.finditer(r"^\d+: (tm[0-9a-f]+(?:br|v\d+))[@:]",
                                             run_ip("ip", "-o", "link", "show"), re.M)]
    prefixes = {n.split("-", 1)[0] for n in names if re.match(r"^tm[0-9a-f]+-", n)}
    prefixes |= {re.sub(r"(br|v\d+)$", "", link) for link in links}
    for prefix in prefixes:
        owner = _owner_file(prefix)
        try:
            pid = int(json.loads(owner.read_text())["pid"])
            os.kill(pid, 0)
            continue  # its run is alive
        except (OSError, ValueError, KeyError):
            pass
        for n in names:
            if n.startswith(prefix + "-"):
                _kill_inside(n)
                run_ip("ip", "netns", "del", n, check=False)
                removed.append(n)
        for link in links:
            if link.startswith(prefix) and re.fullmatch(rf"{prefix}(br|v\d+)", link):
                run_ip("ip", "link", "del", link, check=False)
                removed.append(link)
        owner.unlink(missing_ok=True)
    return removed
