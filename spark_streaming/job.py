"""The Structured Streaming query: txlog -> per-peer state -> queues (+ progress, deadletter).

Plan: Kafka source on txlog (``kafka.*`` options from :class:`tidemark.log.settings.Settings`) ->
``groupBy(partition % groups).transformWithStateInPandas`` (state in the RocksDB state store: one
MapState entry per message, see :mod:`tidemark.spark_streaming.state_layout`, read and written in
batches by :class:`~tidemark.spark_streaming.pyspark_state.SparkMaps`) -> ``foreachBatch``, which

1. collects the batch's output (net changes only) and writes the QueueEntry upserts and
   tombstones to queues partition = the txlog partition they came from, and poison records
   to ``deadletter``, with the project's durable producer, then flushes (every row acked);
2. only then appends one QueueProgress per txlog partition the batch touched, with
   ``next_offset`` = the highest applied offset + 1.

A batch that is re-run after a crash reads the same offsets from the same state version and
writes the same rows again, which is harmless. :func:`run_job` restarts a failed query by itself
(:mod:`tidemark.spark_streaming.supervisor`).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from tidemark.gossip.record_signing import SignatureVerifier, load_trusted
from tidemark.gossip.tls import Trust, resolve_trust
from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.log.exceptions import TidemarkError
from tidemark.log.queue_state import (
    DEFAULT_ACK_TTL_MS,
    DEFAULT_DEDUP_WINDOW_MS,
    DEFAULT_DELIVERY_LIMIT,
    Ttl,
)
from tidemark.log.settings import Settings
from tidemark.spark_streaming.exceptions import QueryFailedError, QueuesError, SparkUnavailableError
from tidemark.spark_streaming.metrics import QueuesMetrics, query_listener
from tidemark.spark_streaming.pyspark_state import SparkMaps
from tidemark.spark_streaming.sink import BatchWriter
from tidemark.spark_streaming.state_groups import SPREAD_CANDIDATES, choose_groups, spread_keys
from tidemark.spark_streaming.supervisor import Supervisor, first_line
from tidemark.spark_streaming.transform import OUTPUT_SCHEMA, process_rows

__all__ = ["JobOptions", "AdmissionSpec", "txlog_partitions", "state_partitions", "key_partitions",
           "spark_conf", "build_session", "kafka_options", "check_topics", "start_query", "run_job"]

log = logging.getLogger(__name__)

_LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = STDERR
"""


@dataclass(frozen=True)
class JobOptions:
    """How to run the job; every field has a command-line flag in ``tidemark queues run``."""

    checkpoint: str
    trigger: str = "500 milliseconds"
    ack_ttl_ms: int = DEFAULT_ACK_TTL_MS
    dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS
    max_offsets_per_trigger: int = 200_000
    master: str | None = "local[2]"
    driver_memory: str = "1g"
    log_level: str = "ERROR"
    starting_offsets: str = "earliest"
    fail_on_data_loss: bool = True
    query_name: str = "tidemark-queues"
    state_partitions: int | None = None
    #: State groups (txlog partition % groups); None: one per state partition for a new local
    #: checkpoint, else what the checkpoint has (:mod:`tidemark.spark_streaming.state_groups`).
    state_groups: int | None = None
    #: Failed deliveries before a message goes to deadletter (``TIDEMARK_DELIVERY_LIMIT``).
    delivery_limit: int = field(default_factory=lambda: _env_limit())  # noqa: PLW0108
    #: Restarts of a failed query before the job gives up (``TIDEMARK_QUEUES_MAX_RESTARTS``);
    #: 0: unlimited.
    max_restarts: int = 0
    #: The supervisor's JSON status file (restart count, last error); None: none.
    status_file: str | None = None
    #: Insecure mode (txlog signatures not required); None: ``TIDEMARK_INSECURE``.
    insecure: bool | None = None
    #: The state folder whose ``pki`` holds the local stack's CA (None: the default one).
    state_dir: str | None = None
    #: Serve Prometheus ``/metrics`` on this port of the driver (``--metrics-port``,
    #: ``TIDEMARK_QUEUES_METRICS_PORT``); 0: no metrics, no listener.
    metrics_port: int = 0
    #: The address the metrics are served on (``TIDEMARK_METRICS_HOST``).
    metrics_host: str = "127.0.0.1"


def _env_limit() -> int:
    """The ``delivery_limit`` setting from the environment (its default if unset)."""
    from tidemark.log.registry import env_value
    try:
        return int(env_value("delivery_limit"))
    except KeyError:  # an older registry without the setting
        return DEFAULT_DELIVERY_LIMIT


def txlog_partitions(settings: Settings) -> int:
    """txlog's actual partition count (``settings.partitions`` if it cannot be read)."""
    try:
        from tidemark.log.offsets import watermarks
        return len(watermarks(settings, "txlog")) or settings.partitions
    except (TidemarkError, KafkaException):  # Spark's own source will report the problem
        return settings.partitions


def state_partitions(settings: Settings, options: JobOptions) -> int:
    """Shuffle (= state store) partitions: given, else txlog's partition count capped at the
    local master's cores (each state partition costs a task and a commit per batch)."""
    if options.state_partitions:
        return options.state_partitions
    count = txlog_partitions(settings)
    match = re.fullmatch(r"local\[(\d+|\*)\]", options.master or "")
    if match:
        cores = (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))
        return max(1, min(count, cores))
    return count


def spark_conf(settings: Settings, options: JobOptions) -> dict[str, str]:
    """Spark settings for the job: RocksDB state store, small shuffles, quiet logs."""
    conf = {
        "spark.sql.shuffle.partitions": str(state_partitions(settings, options)),
        "spark.locality.wait": "0s",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.minBatchesToRetain": "20",
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.sql.adaptive.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": options.driver_memory,
        "spark.python.worker.reuse": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    }
    if (options.master or "").startswith("local"):
        # No Spark UI (a web server on port 4040 plus what it keeps per job and stage) in the
        # local JVM we start; under spark-submit or a cluster master the cluster's own setting
        # stands (on by default). TIDEMARK_SPARK_CONF=spark.ui.enabled=true turns it on here.
        conf["spark.ui.enabled"] = "false"
    if re.match(r"(file:)?/|[^:]*$", options.checkpoint):
        # A local checkpoint: Hadoop FileContext's rename forks `readlink` for every file it
        # commits without Hadoop's native library (RocksDB changelog per state partition,
        # offset and commit log per batch); FileSystem.rename does not, and is atomic here.
        conf["spark.sql.streaming.checkpointFileManagerClass"] = \
            "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
    if options.master:
        from tidemark.log.jvm import spark_connector_jars
        conf["spark.jars"] = ",".join(spark_connector_jars())
        # Python workers that do not re-read pyspark's zips/jars at every task (pydaemon.py).
        # Local mode only: the daemon must import spark_streaming before any task runs.
        conf["spark.python.daemon.module"] = "tidemark.spark_streaming.pydaemon"
        # Python workers run the interpreter named by PYSPARK_PYTHON (pyspark reads only the
        # environment): this one, so that they see the same packages.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # We start the JVM, so its log4j configuration is ours to give (spark-submit users
        # bring their own): one line per message at the chosen level, on stderr.
        level = options.log_level.lower()
        log4j = Path(tempfile.gettempdir()) / f"tidemark-spark-log4j2-{level}.properties"
        try:
            log4j.write_text(_LOG4J2.format(level=level))
            conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j}"
        except OSError:  # an unwritable temp folder: keep Spark's own logging
            pass
    # Extra settings for experiments (``k=v;k=v``), applied last.
    for item in filter(None, os.environ.get("TIDEMARK_SPARK_CONF", "").split(";")):
        name, _, value = item.partition("=")
        conf[name.strip()] = value.strip()
    return conf


def build_session(settings: Settings, options: JobOptions) -> Any:
    """A SparkSession: ``local[2]`` by default, or the one spark-submit already started."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailableError("pyspark is not installed: pip install 'tidemark[spark]'") \
            from None
    builder = SparkSession.builder.appName(options.query_name)
    if options.master:
        builder = builder.master(options.master)
    for key, value in spark_conf(settings, options).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(options.log_level.upper())
    return spark


def kafka_options(settings: Settings) -> dict[str, str]:
    """``kafka.*`` options for Spark's Kafka source: bootstrap + the client settings."""
    if not settings.bootstrap:
        settings.producer_config()  # raises the readable ConfigError
    options = {f"kafka.{k}": v for k, v in settings.java_client_config().items()}
    # Spark's cached consumers pipeline a fetch past the batch's end offset; the next batch
    # then waits for it, up to fetch.max.wait.ms (500 ms by default) per partition task.
    options.setdefault("kafka.fetch.max.wait.ms", "10")
    return options


@dataclass(frozen=True)
class AdmissionSpec:
    """What a Python worker builds the job's :class:`TxlogAdmission` from (picklable): the
    environment, the trusted CAs (PEM; None in insecure mode) and the CRL file."""

    environment: str
    ca_pem: bytes | None
    crl: str | None

    @classmethod
    def of(cls, settings: Settings, trust: Trust | None) -> AdmissionSpec:
        """The spec of a job of ``settings`` with ``trust`` (None: insecure)."""
        if trust is None:
            return cls(settings.environment, None, None)
        return cls(settings.environment, trust.ca.read_bytes(),
                   str(trust.crl) if trust.crl is not None else None)

    def build(self) -> TxlogAdmission:
        """The admission (in the worker)."""
        verifier = None
        if self.ca_pem is not None:
            verifier = SignatureVerifier(load_trusted(self.ca_pem),
                                         crl=Path(self.crl) if self.crl else None)
        return TxlogAdmission(self.environment, verifier)


def _processor(ttl: Ttl, spec: AdmissionSpec | None = None) -> Any:
    """A ``StatefulProcessor`` for one txlog partition: per-message MapState entries."""
    from pyspark.sql.streaming import StatefulProcessor


    class QueueProcessor(StatefulProcessor):
        """Applies a partition's rows of the batch to its per-message state; emits rows."""

        def init(self, handle: Any) -> None:
            self.started = time.time()
            self.maps = SparkMaps(handle)
            self.admission = spec.build() if spec is not None else None
            self.init_ms = round((time.time() - self.started) * 1e3, 1)

        def handleInputRows(self, key: tuple, rows: Iterator[Any],
                            timerValues: Any) -> Iterator[Any]:
            import pandas as pd
            started, t0 = time.time(), time.perf_counter()
            frame = pd.concat(list(rows), ignore_index=True)
            profile = os.environ.get("TIDEMARK_QUEUES_PROFILE")
            before = dict(self.maps.stats)
            if self.admission is not None and self.admission.verifier is not None:
                self.admission.verifier.refresh_crl()  # a revocation counts from now on
            out = process_rows(frame, self.maps, ttl, admission=self.admission)
            if profile:
                stats = {k: v - before[k] for k, v in self.maps.stats.items()}
                _profile_write(profile, {
                    "group": int(key[0]), "pid": os.getpid(), "t0": started,
                    "init_t0": self.started, "init_ms": self.init_ms,
                    "rows": len(frame), "out": len(out),
                    "process_ms": round((time.perf_counter() - t0) * 1e3, 1),
                    "state_ms": round(stats.pop("state_s") * 1e3, 1),
                    "pipelined": self.maps.pipelined, **stats})
            yield out

        def close(self) -> None:
            pass

    return QueueProcessor()


def start_query(spark: Any, settings: Settings, options: JobOptions,
                writer: BatchWriter | None = None, admission: AdmissionSpec | None = None) -> Any:
    """Start the streaming query (returns the ``StreamingQuery``); ``writer`` is its
    ``foreachBatch`` sink (a new one if not given); ``admission`` what records it applies
    (None: the settings' environment, with the trust :func:`resolve_trust` finds)."""
    if admission is None:
        admission = AdmissionSpec.of(settings, resolve_trust(
            options.insecure, Path(options.state_dir) if options.state_dir else None))
    source = spark.readStream.format("kafka").options(**kafka_options(settings)) \
        .option("subscribe", f"{settings.topic('txlog')},{settings.topic('purges')}") \
        .option("startingOffsets", options.starting_offsets) \
        .option("failOnDataLoss", str(options.fail_on_data_loss).lower()) \
        .option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger)).load()
    # Grouping by txlog partition % groups (not by peer) keeps the per-group cost of the
    # Python state API to a few calls per batch; peers are MapState entries inside a group.
    from pyspark.sql.functions import col
    # a purges record lands in the partition number of the peer's txlog partition
    rows = source.select("key", "value", "partition", "offset",
                         (col("topic") == settings.topic("purges")).alias("purge"))
    partitions = txlog_partitions(settings)
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions"))  # as spark_conf chose it
    if (options.master or "").startswith("local") and shuffle < partitions:
        # On the local cores, one source task per state partition rather than one per txlog
        # partition: the tasks' fixed cost, not the records, made most of the source stage.
        rows = rows.coalesce(shuffle)
    layout = choose_groups(options.checkpoint, options.state_groups, shuffle, partitions,
                           spread=lambda n: spread_keys(n, key_partitions(spark, shuffle),
                                                        shuffle))
    if layout.count < partitions:
        group = (col("partition") % layout.count).cast("int")
        if not layout.plain:
            from pyspark.sql.functions import array, element_at, lit
            group = element_at(array(*[lit(k) for k in layout.keys]), group + 1)
        rows = rows.withColumn("state_group", group)
    out = rows.groupBy("state_group" if layout.count < partitions else "partition") \
        .transformWithStateInPandas(
        statefulProcessor=_processor(Ttl(options.ack_ttl_ms, options.dedup_window_ms,
                                         options.delivery_limit), admission),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Update", timeMode="None")
    return out.writeStream.queryName(options.query_name).outputMode("update") \
        .option("checkpointLocation", options.checkpoint) \
        .trigger(processingTime=options.trigger) \
        .foreachBatch(writer or BatchWriter(settings)).start()


def key_partitions(spark: Any, partitions: int) -> dict[int, int]:
    """The state partition Spark's hash partitioning sends each grouping key to (an ``int``
    key ``0 .. SPREAD_CANDIDATES-1``; ``partitions`` state partitions): asked of Spark
    itself, so it holds for the running version."""
    from pyspark.sql.functions import col, spark_partition_id
    rows = spark.range(SPREAD_CANDIDATES).select(col("id").cast("int").alias("k")) \
        .repartition(partitions, "k").select("k", spark_partition_id().alias("p")).collect()
    return {int(r["k"]): int(r["p"]) for r in rows}


def check_topics(settings: Settings) -> int:
    """txlog, queues and purges must exist with the same partition count; returns it."""
    from tidemark.log.offsets import watermarks
    counts = {}
    for name in ("txlog", "queues", "deadletter", "purges"):
        try:
            counts[name] = len(watermarks(settings, name))
        except (TidemarkError, KafkaException) as exc:
            raise QueuesError(f"cannot use topic {settings.topic(name)} on {settings.bootstrap}:"
                              f" {exc} (create the topics with `tidemark local up` or"
                              f" `tidemark topics create`)") from None
    for name in ("queues", "purges"):
        if counts["txlog"] != counts[name]:
            raise QueuesError(f"{settings.topic('txlog')} has {counts['txlog']} partitions but"
                              f" {settings.topic(name)} has {counts[name]}: {name} records go"
                              " to the partition number of the peer's txlog partition")
    return counts["txlog"]


def run_job(settings: Settings, options: JobOptions, ready: Any = None) -> int:
    """Run until SIGTERM/SIGINT (graceful stop, exit 0); a failed query is started again from its
    checkpoint after a backoff (:class:`~tidemark.spark_streaming.supervisor.Supervisor`). Raises
    :class:`QueryFailedError` when the Spark JVM is gone or ``options.max_restarts`` is spent.

    ``ready``, if given, is called with the ``StreamingQuery`` each time it (re)starts.
    """
    # fail closed: a secure job without CA material does not start (before any Kafka call)
    trust = resolve_trust(options.insecure, Path(options.state_dir) if options.state_dir
                          else None)
    admission = AdmissionSpec.of(settings, trust)
    check_topics(settings)
    started = time.monotonic()
    logging.getLogger("py4j").setLevel(max(logging.WARNING, log.getEffectiveLevel()))
    metrics = _serve_metrics(options) if options.metrics_port else None

    def new_session() -> Any:
        spark = build_session(settings, options)
        if metrics is not None:  # a listener belongs to one session's StreamingQueryManager
            spark.streams.addListener(query_listener(metrics))
        return spark

    session = {"spark": new_session()}
    stop = {"requested": False}
    writer = BatchWriter(settings)  # one producer per process; reset after a failure

    def on_signal(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal API
        stop["requested"] = True

    try:
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:  # not the main thread
        previous = {}
    supervisor = Supervisor(Path(options.status_file) if options.status_file else None,
                            max_restarts=options.max_restarts)

    def start() -> Any:
        try:
            return start_query(session["spark"], settings, options, writer, admission)
        except TidemarkError:
            raise
        except Exception as exc:  # py4j / Spark analysis errors: restarted like a failure
            if type(exc).__name__ in ("AnalysisException", "IllegalArgumentException") \
                    and not supervisor.restarts:
                # the first start: a checkpoint or plan the job cannot use, one line, exit 1
                raise QueryFailedError(f"the queues query failed: {first_line(exc)}") from exc
            raise

    def recover(error: str) -> None:
        writer.reset()
        state = _session_state(session["spark"])
        if state == "ok":
            _reset_python_workers(session["spark"])
        elif state == "stopped":  # the SparkContext stopped itself; its JVM still answers
            log.warning("the Spark session was stopped; starting a new one")
            _quietly(session["spark"].stop)
            session["spark"] = new_session()
        elif state == "dead":
            raise QueryFailedError(f"the queues query failed and the Spark JVM is gone: {error}")

    first = {"start": True}

    def on_ready(query: Any) -> None:
        if first.pop("start", False):
            print(f"tidemark: queues job running ({time.monotonic() - started:.1f}s to start;"
                  f" txlog {settings.topic('txlog')}, checkpoint {options.checkpoint})",
                  file=sys.stderr, flush=True)
        else:
            log.warning("queues query restarted; restarts=%d", supervisor.restarts)
        if ready is not None:
            ready(query)

    last_batch = {"id": -1}
    profile = os.environ.get("TIDEMARK_QUEUES_PROFILE")

    def poll(query: Any) -> None:
        supervisor.set_counters(writer.counters())
        if profile:
            last_batch["id"] = _profile_progress(query, last_batch["id"], profile)
        elif log.isEnabledFor(logging.DEBUG):
            last_batch["id"] = _log_progress(query, last_batch["id"])

    def stop_query(query: Any) -> None:
        _quietly(query.stop)  # the JVM shares our process group and may be exiting too

    try:
        return supervisor.run(start, stopping=lambda: stop["requested"], recover=recover,
                              stop=stop_query, poll=poll, ready=on_ready)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _quietly(session["spark"].stop)


def _serve_metrics(options: JobOptions) -> QueuesMetrics:
    """Serve the job's Prometheus metrics on ``options.metrics_port`` (before the Spark
    session starts: every metric is there from the first scrape); returns the
    :class:`~tidemark.spark_streaming.metrics.QueuesMetrics` a query listener feeds."""
    metrics = QueuesMetrics()
    try:
        port = metrics.serve(options.metrics_port, options.metrics_host)
    except OSError as exc:
        raise QueuesError(f"cannot serve the queues job's metrics on"
                          f" {options.metrics_host}:{options.metrics_port}: {exc.strerror or exc}"
                          ) from None
    print(f"tidemark: queues job metrics on http://{options.metrics_host}:{port}/metrics",
          file=sys.stderr, flush=True)
    return metrics


def _session_state(spark: Any) -> str:
    """``ok`` (the SparkContext runs: start the query again in it), ``stopped`` (the context
    stopped, the JVM still answers: a new session) or ``dead`` (the JVM is gone)."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)  # a dead gateway logs tracebacks
    try:
        return "stopped" if spark.sparkContext._jsc.sc().isStopped() else "ok"
    except Exception:  # Py4JNetworkError, ConnectionError...: the JVM exited
        return "dead"
    finally:
        logging.getLogger("py4j").setLevel(max(logging.WARNING, log.getEffectiveLevel()))


def _reset_python_workers(spark: Any) -> int:
    """Stop the JVM's Python worker factories (their daemon and idle workers); the next task
    starts a new daemon. Returns how many were stopped (0 if Spark's internals differ).

    Spark 4.0 keeps idle Python workers for reuse; when the daemon that forked them was killed,
    each dead idle worker fails one later task (``PythonWorkerFactory.create`` discards it by
    writing to the dead daemon's stdin: ``IOException: Stream closed``), so one kill became
    one query failure per pooled worker. ``PythonWorkerFactory.stop()`` is public, the map of
    factories in ``SparkEnv`` is not: it is read by reflection, best effort.
    """
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    try:
        env = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get()
        field = env.getClass().getDeclaredField("pythonWorkers")
        field.setAccessible(True)
        factories = field.get(env).values().iterator()
        stopped = 0
        while factories.hasNext():
            factories.next().stop()
            stopped += 1
        log.info("stopped %d Python worker factory(ies) before the restart", stopped)
        return stopped
    except Exception as exc:  # another Spark version: the restarted query copes as it can
        log.info("could not reset the Python workers: %s", first_line(exc, 200))
        return 0
    finally:
        logging.getLogger("py4j").setLevel(max(logging.WARNING, log.getEffectiveLevel()))


def _log_progress(query: Any, last_batch: int) -> int:
    """Log each new batch's row count, durations and state-store figures (DEBUG level)."""
    progress = query.lastProgress
    if not progress or progress["batchId"] == last_batch:
        return last_batch
    state = progress.get("stateOperators") or [{}]
    log.debug("batch %s: %s rows, durations %s, state rows %s, state commit %s ms",
              progress["batchId"], progress["numInputRows"], progress["durationMs"],
              state[0].get("numRowsTotal"), state[0].get("commitTimeMs"))
    return int(progress["batchId"])


def _profile_progress(query: Any, last_batch: int, path: str) -> int:
    """Append the latest batch's progress (durations, rows, state store) to ``path`` as a JSON
    line (``TIDEMARK_QUEUES_PROFILE``, see docs/queues.md). Only ``lastProgress`` is read:
    ``recentProgress`` converts up to 100 progress objects through py4j at every call, which
    measured at ~0.2 cores of the JVM when polled twice a second."""
    progress = query.lastProgress
    if not progress or progress["batchId"] <= last_batch:
        return last_batch
    state = (progress.get("stateOperators") or [{}])[0]
    _profile_write(path, {"batch": progress["batchId"], "rows": progress["numInputRows"],
                          "durationMs": progress["durationMs"],
                          "state": {k: v for k, v in state.items() if k.endswith("Ms")},
                          "custom": state.get("customMetrics")})
    return int(progress["batchId"])


def _profile_write(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line to the profile file (``TIDEMARK_QUEUES_PROFILE``)."""
    import json
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


def _quietly(action: Any) -> None:
    """Run a shutdown step; a JVM that is already gone is not an error when stopping."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    try:
        action()
    except Exception as exc:  # Py4JError, ConnectionError... the JVM exited first
        log.info("ignored during shutdown: %s", type(exc).__name__)
