"""The benchmarks behind ``tidemark bench``, each beside a raw baseline measured in the same
run: ``produce`` (LogProducer vs a raw producer), ``peer`` (``Peer.send`` and send->stable),
``replica`` (ingest and GC), ``queues`` (send->queue latency of the Spark job). Replay and
catch-up, which run peers as processes, are in :mod:`tidemark.demo`. The components never
import this package (an import-linter contract).
"""
