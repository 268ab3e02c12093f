"""The queues job's Prometheus metrics: the listener's pure update logic over progress dicts
(the JSON shape of ``StreamingQueryProgress``), every metric present from the first scrape,
``/metrics`` served over HTTP, the ``--metrics-port`` setting, the local stack's address."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidemark.log.registry import env_value, setting
from tidemark.log.settings import load_settings
from tidemark.spark_streaming.job import JobOptions, spark_conf
from tidemark.spark_streaming.metrics import (
    QueuesMetrics,
    apply_idle,
    apply_progress,
    apply_terminated,
    parse_spark_time,
)
from tidemark.stack.launcher import LocalStack, ProcessSpec
from tidemark.stack.spark import metrics_address

NAMES = {
    "tidemark_queues_batch_duration_seconds": "histogram",
    "tidemark_queues_input_rows": "counter",
    "tidemark_queues_input_rows_per_second": "gauge",
    "tidemark_queues_state_rows": "gauge",
    "tidemark_queues_batches": "counter",
    "tidemark_queues_last_progress_timestamp_seconds": "gauge",
    "tidemark_queues_watermark_lag_seconds": "gauge",
    "tidemark_queues_query_terminated": "counter",
}


def _iso(seconds: float) -> str:
    """Spark's progress timestamp format."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _samples(metrics: QueuesMetrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {s.name + (str(sorted(s.labels.items())) if s.labels else ""): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _progress(batch: int, rows: int, duration_ms: int, started: float, state: list[int],
              **extra: object) -> dict:
    return {"id": "q", "runId": "r", "name": "tidemark-queues", "timestamp": _iso(started),
            "batchId": batch, "batchDuration": duration_ms, "numInputRows": rows,
            "inputRowsPerSecond": 10.0, "processedRowsPerSecond": rows / (duration_ms / 1e3),
            "durationMs": {"addBatch": duration_ms - 10, "triggerExecution": duration_ms},
            "eventTime": {}, "stateOperators": [{"numRowsTotal": n} for n in state],
            "sources": [], "sink": {}, **extra}


def test_every_metric_is_there_from_the_first_scrape_with_help_and_type() -> None:
    metrics = QueuesMetrics()
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(metrics.registry).decode())}
    for name, kind in NAMES.items():
        assert families[name].type == kind, name
        assert families[name].documentation, name
    samples = _samples(metrics)
    for counter in ("tidemark_queues_batches_total", "tidemark_queues_input_rows_total",
                    "tidemark_queues_query_terminated_total",
                    "tidemark_queues_batch_duration_seconds_count"):
        assert samples[counter] == 0
    assert any(n.startswith("process_") for n in families)
    assert any(n.startswith("python_gc_") for n in families)
    helps = [families[n].documentation for n in NAMES]
    assert len(set(helps)) == len(helps)


def test_progress_events_update_counters_gauges_and_the_histogram() -> None:
    metrics, t0 = QueuesMetrics(), 1_800_000_000.0
    apply_progress(metrics, _progress(0, 1200, 800, t0, [300, 200]), now=t0 + 0.9)
    apply_progress(metrics, _progress(1, 600, 2000, t0 + 1, [450, 250]), now=t0 + 3.5)
    s = _samples(metrics)
    assert s["tidemark_queues_batches_total"] == 2
    assert s["tidemark_queues_input_rows_total"] == 1800
    assert s["tidemark_queues_input_rows_per_second"] == 300       # the last batch: 600 / 2 s
    assert s["tidemark_queues_state_rows"] == 700                  # summed over the operators
    assert s["tidemark_queues_last_progress_timestamp_seconds"] == t0 + 3.5
    assert s["tidemark_queues_watermark_lag_seconds"] == pytest.approx(2.5)  # now - batch start
    assert s["tidemark_queues_batch_duration_seconds_count"] == 2
    assert s["tidemark_queues_batch_duration_seconds_sum"] == pytest.approx(2.8)
    assert s["tidemark_queues_batch_duration_seconds_bucket[('le', '1.0')]"] == 1
    assert s["tidemark_queues_batch_duration_seconds_bucket[('le', '2.0')]"] == 2


def test_a_watermark_wins_over_the_batch_start_and_the_epoch_is_none() -> None:
    metrics, t0 = QueuesMetrics(), 1_800_000_000.0
    apply_progress(metrics, _progress(0, 1, 100, t0, [], eventTime={"watermark": _iso(t0 - 60)}),
                   now=t0 + 1)
    assert _samples(metrics)["tidemark_queues_watermark_lag_seconds"] == pytest.approx(61)
    # a watermark before any data is the epoch: the batch start serves instead
    apply_progress(metrics, _progress(1, 1, 100, t0, [],
                                      eventTime={"watermark": "1970-01-01T00:00:00.000Z"}),
                   now=t0 + 2)
    assert _samples(metrics)["tidemark_queues_watermark_lag_seconds"] == pytest.approx(2)
    assert parse_spark_time(None) is None and parse_spark_time("not a time") is None
    assert parse_spark_time("2027-01-15T08:00:00.250Z") == 1_800_000_000.25


def test_missing_or_nan_figures_do_not_break_the_update() -> None:
    metrics = QueuesMetrics()
    apply_progress(metrics, {"batchId": 3, "numInputRows": 0, "batchDuration": 5,
                             "processedRowsPerSecond": float("nan"), "stateOperators": None},
                   now=100.0)
    s = _samples(metrics)
    assert s["tidemark_queues_batches_total"] == 1
    assert s["tidemark_queues_input_rows_per_second"] == 0
    assert s["tidemark_queues_state_rows"] == 0
    assert s["tidemark_queues_watermark_lag_seconds"] == 0  # no timestamp: left as it was


def test_idle_means_caught_up_and_only_failures_count_as_terminations() -> None:
    metrics, t0 = QueuesMetrics(), 1_800_000_000.0
    apply_progress(metrics, _progress(0, 10, 100, t0, [5]), now=t0 + 4)
    apply_idle(metrics, now=t0 + 14)
    s = _samples(metrics)
    assert s["tidemark_queues_watermark_lag_seconds"] == 0
    assert s["tidemark_queues_last_progress_timestamp_seconds"] == t0 + 14
    assert s["tidemark_queues_batches_total"] == 1                 # idle is not a batch
    apply_progress(metrics, _progress(0, 0, 3, t0 + 20, [5], durationMs={"getOffset": 1,
                                                                     "triggerExecution": 3}),
                   now=t0 + 24)                                    # a trigger without a batch
    s = _samples(metrics)
    assert s["tidemark_queues_batches_total"] == 1
    assert s["tidemark_queues_last_progress_timestamp_seconds"] == t0 + 24
    assert s["tidemark_queues_watermark_lag_seconds"] == 0
    apply_terminated(metrics, None)                                # a clean stop
    apply_terminated(metrics, "StreamingQueryException: [STREAM_FAILED] boom")
    assert _samples(metrics)["tidemark_queues_query_terminated_total"] == 1


def test_metrics_are_served_over_http() -> None:
    metrics = QueuesMetrics()
    port = metrics.serve(0)
    apply_progress(metrics, _progress(0, 42, 100, 1_800_000_000.0, [7]))
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "tidemark_queues_input_rows_total 42.0" in body
    assert "tidemark_queues_batches_total 1.0" in body


def test_the_metrics_port_setting_and_flag() -> None:
    spec = setting("queues_metrics_port")
    assert spec.env == "TIDEMARK_QUEUES_METRICS_PORT" and spec.default == 0
    assert env_value("queues_metrics_port", {}) == 0
    assert env_value("queues_metrics_port", {"TIDEMARK_QUEUES_METRICS_PORT": "9464"}) == 9464
    from tidemark.console import build_parser
    args = build_parser().parse_args(["queues", "run", "--metrics-port", "9500"])
    assert args.metrics_port == 9500
    assert build_parser().parse_args(["queues", "run"]).metrics_port == 0


def test_the_spark_ui_is_off_only_in_local_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    import tidemark.log.jvm
    monkeypatch.setattr(tidemark.log.jvm, "spark_connector_jars", lambda: ["/x.jar"])
    monkeypatch.setenv("PYSPARK_PYTHON", "python3")  # spark_conf sets it when unset
    monkeypatch.delenv("TIDEMARK_SPARK_CONF", raising=False)
    settings = load_settings(env={}, bootstrap="127.0.0.1:1", partitions=2)
    local = spark_conf(settings, JobOptions(checkpoint="/tmp/c", state_partitions=2))
    assert local["spark.ui.enabled"] == "false"
    submitted = spark_conf(settings, JobOptions(checkpoint="/tmp/c", master=None,
                                                state_partitions=2))
    assert "spark.ui.enabled" not in submitted


def test_the_local_stacks_job_gets_a_metrics_port_that_stays(tmp_path: Path) -> None:
    from tidemark.stack.spark import plan
    stack = LocalStack(tmp_path / "state")
    assert metrics_address(stack) is None                          # no job recorded
    spec = plan(stack)[0]
    port = int(spec.argv[spec.argv.index("--metrics-port") + 1])
    assert port > 0
    stack.state["processes"]["spark"] = {**spec.__dict__, "pid": None}
    assert metrics_address(stack) == f"127.0.0.1:{port}"
    again = plan(stack)[0]                                         # restarted: same port
    assert again.argv[again.argv.index("--metrics-port") + 1] == str(port)
    stack.state["processes"]["spark"] = {**ProcessSpec(
        name="spark", kind="spark", argv=[str(stack.state_dir), "queues", "run"]).__dict__}
    assert metrics_address(stack) is None                          # a job without a port
