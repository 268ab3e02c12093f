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

Link delay needs the kernel's netem queueing discipline; a kernel without it (as in some
sandboxes) makes :meth:`Nemesis.delay` raise :class:`FaultUnavailable` naming what is missing.
"""

from __future__ import annotations

import random
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

    def loss(self, host: str, percent: float) -> None:
        """Drop ``percent`` % of ``host``'s packets on its link, both ways, at random."""
        if not 0 < percent < 100:
            raise ValueError(f"loss must be between 0 and 100 %, got {percent}")
        per_10k = int(percent * 100)
        self._rules(host, f'input iifname "eth0" numgen random mod 10000 < {per_10k} drop',
                    f'output oifname "eth0" numgen random mod 10000 < {per_10k} drop')
        self._log("loss", host=host, percent=percent)

    def delay(self, host: str, ms: int, jitter_ms: int = 0) -> None:
        """Delay ``host``'s outgoing packets (netem)."""
        try:
            run_ip("tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", f"{ms}ms",
                   f"{jitter_ms}ms", netns=self.hosts[host].netns)
        except HostsError as exc:
            raise FaultUnavailable(f"link delay needs the kernel's netem qdisc ({exc})") from None
        self._log("delay", host=host, ms=ms, jitter_ms=jitter_ms)

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
        self._touched.clear()
        self._log("heal")
