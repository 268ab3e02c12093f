"""The nemesis: faults on the hosts of a run (:class:`~tidemark.stack.hosts.Hosts`), each
logged with its time, and healed together.

- :meth:`Nemesis.partition` cuts hosts ``a`` from hosts ``b`` (both ways, or ``a`` → ``b``
  only) with nftables rules inside the hosts' namespaces (packets dropped, as a switch that
  stops forwarding would: connections time out, nothing is refused);
- :meth:`Nemesis.isolate` cuts one host from every other host (the observer in the root
  namespace, which samples states for the checker, still reaches it);
- :meth:`Nemesis.loss` drops a share of a host's packets at random (nftables ``numgen``);
- :meth:`Nemesis.skew_env` is the environment that starts a process with its wall clock
  moved (``TIDEMARK_CLOCK_SKEW_MS``, read by :mod:`tidemark.log.clock`; monotonic clocks
  are left alone);
- :meth:`Nemesis.heal` removes every rule.

- :meth:`Nemesis.delay` delays a host's outgoing packets: with the kernel's netem queueing
  discipline when it has one, else in user space (:mod:`tidemark.nemesis.delayer`: an
  iptables NFQUEUE rule in the host and a small process that accepts each packet after its
  delay); with neither it raises :class:`FaultUnavailable` naming what is missing.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from tidemark.stack.hosts import Hosts, HostsError, run_ip

__all__ = ["Nemesis", "FaultUnavailable", "SKEW_KEYS"]

_TABLE = "tm_nemesis"
#: The environment variables of :meth:`Nemesis.skew_env` (drop them to restart on the true
#: clock).
SKEW_KEYS = ("TIDEMARK_CLOCK_SKEW_MS",)


class FaultUnavailable(RuntimeError):
    """This machine cannot inject that fault (a kernel feature or a package is missing)."""


class Nemesis:
    """Seeded faults on ``hosts``; ``events`` is the log (``{"t_ms", "kind", ...}``), also
    passed to ``record`` as each event happens."""

    def __init__(self, hosts: Hosts, seed: int = 0,
                 record: Callable[[dict[str, Any]], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.hosts, self.seed, self.rng = hosts, seed, random.Random(seed)
        self.events: list[dict[str, Any]] = []
        self._record, self._clock = record, clock
        self._touched: set[str] = set()
        #: user-space delayers by host: (the process, its iptables rule)
        self._delayers: dict[str, tuple[subprocess.Popen[str], str]] = {}

    def _log(self, kind: str, **detail: Any) -> dict[str, Any]:
        event = {"t_ms": int(self._clock() * 1000), "kind": kind, "seed": self.seed, **detail}
        self.events.append(event)
        if self._record is not None:
            self._record(event)
        return event

    def _rules(self, host: str, *rules: str) -> None:
        netns = self.hosts[host].netns
        if host not in self._touched:
            run_ip("nft", "add", "table", "inet", _TABLE, netns=netns)
            for chain, hook in (("input", "input"), ("output", "output")):
                run_ip("nft", "add", "chain", "inet", _TABLE, chain,
                       f"{{ type filter hook {hook} priority 0; policy accept; }}",
                       netns=netns)
            self._touched.add(host)
        for rule in rules:
            run_ip("nft", *f"add rule inet {_TABLE} {rule}".split(), netns=netns)

    # ---- faults ---------------------------------------------------------------------------
    def _cut(self, a: Iterable[str], b: Iterable[str], oneway: bool) -> tuple[list[str],
                                                                             list[str]]:
        """Install the rules that cut ``a`` from ``b``; returns both sides, sorted."""
        sa, sb = sorted(set(a)), sorted(set(b))
        if set(sa) & set(sb):
            raise ValueError(f"a host cannot be on both sides: {sorted(set(sa) & set(sb))}")
        addr_b = "{ " + ", ".join(self.hosts[h].address for h in sb) + " }"
        addr_a = "{ " + ", ".join(self.hosts[h].address for h in sa) + " }"
        for h in sa:
            self._rules(h, f"output ip daddr {addr_b} drop")
        if not oneway:
            for h in sa:
                self._rules(h, f"input ip saddr {addr_b} drop")
            for h in sb:
                self._rules(h, f"output ip daddr {addr_a} drop", f"input ip saddr {addr_a} drop")
        return sa, sb

    def partition(self, a: Iterable[str], b: Iterable[str], oneway: bool = False) -> None:
        """Cut hosts ``a`` from hosts ``b``: both ways, or (``oneway``) packets from ``a`` to
        ``b`` only (``b`` → ``a`` still flows; TCP between them then stalls either way)."""
        sa, sb = self._cut(a, b, oneway)
        self._log("partition", a=sa, b=sb, oneway=oneway)

    def isolate(self, host: str) -> None:
        """Cut ``host`` from every other host (not from the observer)."""
        _, others = self._cut([host], [h for h in self.hosts.hosts if h != host], False)
        self._log("isolate", host=host, others=others)

    def loss(self, host: str, percent: float, both_ways: bool = True) -> None:
        """Drop ``percent`` % of ``host``'s packets on its link at random: both ways, or
        (``both_ways=False``) only those it sends, as netem's ``loss`` on its egress."""
        if not 0 < percent < 100:
            raise ValueError(f"loss must be between 0 and 100 %, got {percent}")
        per_10k = int(percent * 100)
        rules = [f'output oifname "eth0" numgen random mod 10000 < {per_10k} drop']
        if both_ways:
            rules.insert(0, f'input iifname "eth0" numgen random mod 10000 < {per_10k} drop')
        self._rules(host, *rules)
        self._log("loss", host=host, percent=percent, both_ways=both_ways)

    def delay(self, host: str, ms: int, jitter_ms: int = 0) -> None:
        """Delay ``host``'s outgoing packets by ``ms`` ± ``jitter_ms`` (netem, or the
        user-space delayer when the kernel has no netem)."""
        netns = self.hosts[host].netns
        if host in self._delayers:
            raise ValueError(f"{host} is delayed already: heal first")
        try:
            run_ip("tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", f"{ms}ms",
                   f"{jitter_ms}ms", netns=netns)
            self._log("delay", host=host, ms=ms, jitter_ms=jitter_ms, by="netem")
            return
        except HostsError as exc:
            netem = str(exc)
        # imported here: ``python -m tidemark.nemesis.delayer`` runs it as a program
        from tidemark.nemesis.delayer import RULE, available
        missing = available()
        if missing is not None:
            raise FaultUnavailable(f"link delay needs the kernel's netem qdisc ({netem}) or"
                                   f" the user-space delayer: {missing}") from None
        queue = len(self._delayers)
        rule = RULE.format(queue=queue)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-m", "tidemark.nemesis.delayer",
             "--queue", str(queue), "--ms", str(ms), "--jitter-ms", str(jitter_ms),
             "--seed", str(self.rng.randrange(1 << 30))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = proc.stdout.readline().strip() if proc.stdout else ""
        if ready != "ready":
            proc.kill()
            err = proc.stderr.read().strip().splitlines() if proc.stderr else []
            raise FaultUnavailable(f"the user-space delayer did not start in {host}:"
                                   f" {err[-1] if err else 'no output'}")
        try:
            run_ip("iptables", "-t", "mangle", "-A", *rule.split(), netns=netns)
        except HostsError as exc:
            proc.terminate()
            raise FaultUnavailable(f"link delay without netem needs iptables' NFQUEUE target"
                                   f" ({exc})") from None
        self._delayers[host] = (proc, rule)
        self._log("delay", host=host, ms=ms, jitter_ms=jitter_ms, by="nfqueue")

    def skew_env(self, seconds: float) -> dict[str, str]:
        """Environment variables that start a Tidemark process with its wall clock
        ``seconds`` ahead (behind if negative); the caller logs which process got them
        (:meth:`skewed`). The process's own clock (:mod:`tidemark.log.clock`) is moved, not
        the machine's: libfaketime breaks ``time.sleep`` in a Python 3.11 process."""
        return {SKEW_KEYS[0]: str(int(seconds * 1000))}

    def skewed(self, host: str, seconds: float) -> None:
        """Log that ``host``'s process now runs ``seconds`` off."""
        self._log("skew", host=host, seconds=seconds)

    def heal(self) -> None:
        """Remove every rule and queueing discipline this nemesis added."""
        for host in sorted(self._touched):
            run_ip("nft", "delete", "table", "inet", _TABLE, netns=self.hosts[host].netns,
                   check=False)
        for h in self.hosts.hosts.values():
            run_ip("tc", "qdisc", "del", "dev", "eth0", "root", netns=h.netns, check=False)
        for host, (proc, rule) in sorted(self._delayers.items()):
            run_ip("iptables", "-t", "mangle", "-D", *rule.split(),
                   netns=self.hosts[host].netns, check=False)
            proc.terminate()  # it accepts what it still holds
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._delayers.clear()
        self._touched.clear()
        self._log("heal")
