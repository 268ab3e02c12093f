"""Link delay without the kernel's netem: packets held in user space for a while.

A kernel built without ``sch_netem`` (as in some sandboxes) cannot delay a link with
``tc``. It may still have NFQUEUE (``CONFIG_NETFILTER_NETLINK_QUEUE`` and the xtables
``NFQUEUE`` target): an iptables rule in a host's namespace hands every packet leaving its
``eth0`` to a queue, and this program, run inside the same namespace, gives each one its
verdict (accept) only after ``ms ± jitter_ms`` (uniform, as netem's ``delay 50ms 20ms``
without a distribution table; packets may overtake each other, as with netem). It keeps one
heap of held packets and one thread: the queue's socket is read when it is readable, and the
packets whose time came are accepted between reads.

``python -m tidemark.nemesis.delayer --queue N --ms 50 --jitter-ms 20 --seed S``; it prints
``ready`` once bound, and on SIGTERM accepts what it holds and exits. Needs the
``NetfilterQueue`` package (``make nemesis`` builds it, with Debian's
``libnetfilter-queue-dev``); :func:`available` says whether it can run here.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import select
import signal
import sys
import time
from typing import Any

__all__ = ["available", "main", "RULE"]

#: The iptables rule (``-t mangle``, after ``-A``/``-D``) that queues a host's outgoing
#: packets to queue ``{queue}``; ``--queue-bypass`` lets them through while nothing listens.
RULE = "OUTPUT -o eth0 -j NFQUEUE --queue-num {queue} --queue-bypass"
#: Packets the kernel keeps for the queue before it drops new ones.
MAX_QUEUED = 65536
#: The queue socket's receive buffer: a notification that does not fit is a dropped packet
SOCKET_BYTES = 16 << 20


def available() -> str | None:
    """None if the delayer can run here, else what is missing (one line)."""
    try:
        import netfilterqueue  # noqa: F401
    except ImportError:
        return "the NetfilterQueue package is not installed (make nemesis builds it)"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the delayer (see the module doc)."""
    ap = argparse.ArgumentParser(prog="tidemark.nemesis.delayer",
                                 description="delay a namespace's outgoing packets (NFQUEUE)")
    ap.add_argument("--queue", type=int, required=True, help="the NFQUEUE number to serve")
    ap.add_argument("--ms", type=float, required=True, help="mean delay in milliseconds")
    ap.add_argument("--jitter-ms", type=float, default=0.0,
                    help="delay varies uniformly by up to this much either way")
    ap.add_argument("--seed", type=int, default=0, help="seed of the delays drawn")
    args = ap.parse_args(argv)
    from netfilterqueue import COPY_META, NetfilterQueue

    rng = random.Random(args.seed)
    low, high = max(0.0, args.ms - args.jitter_ms) / 1000, (args.ms + args.jitter_ms) / 1000
    held: list[tuple[float, int, Any]] = []
    order = itertools.count()
    stopping = False

    def on_packet(pkt: Any) -> None:
        heapq.heappush(held, (time.monotonic() + rng.uniform(low, high), next(order), pkt))

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    nfq = NetfilterQueue()
    # metadata only: a packet's bytes are never needed, and a copy of a large (GSO) packet
    # would not fit the library's 4 KiB receive buffer, leaving that packet without a verdict
    nfq.bind(args.queue, on_packet, max_len=MAX_QUEUED, mode=COPY_META,
             sock_len=SOCKET_BYTES)
    fd = nfq.get_fd()
    print("ready", flush=True)
    try:
        while not stopping:
            wait = max(0.0, held[0][0] - time.monotonic()) if held else 0.5
            try:
                readable, _, _ = select.select([fd], [], [], wait)
            except InterruptedError:
                continue
            if readable:
                nfq.run(block=False)
            now = time.monotonic()
            while held and held[0][0] <= now:
                heapq.heappop(held)[2].accept()
    finally:
        while held:
            heapq.heappop(held)[2].accept()
        nfq.unbind()
    return 0


if __name__ == "__main__":
    sys.exit(main())
