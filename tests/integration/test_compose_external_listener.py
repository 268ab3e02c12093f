"""Compose's EXTERNAL listener, stood in for by one real broker: deploy/init-secrets.sh makes
the secrets, the broker runs with kafka-1's environment from docker-compose.yml turned into
server.properties the way the apache/kafka image does (``KAFKA_FOO_BAR`` -> ``foo.bar``;
KAFKA_OPTS and CLUSTER_ID go to the JVM and the storage format), with the JAAS secret at its
``/run/secrets`` path mapped here. Only the ports (free ones), the quorum (one voter) and the
replication factors (1) differ. A client on the host, configured by the secrets' peer.env and
the project's Settings, reaches the broker through the advertised EXTERNAL address (the
INTERNAL one, ``kafka-1``, does not resolve here), creates the topics and produces and consumes
a record; without the SASL credentials the same listener refuses it."""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests import cluster
from tidemark.log import jvm
from tidemark.log.settings import load_settings
from tidemark.log.topics import ensure_topics
from tidemark.stack.processes import free_ports, wait_port

pytestmark = [pytest.mark.integration, pytest.mark.ops]

ROOT = Path(__file__).resolve().parents[2]
#: Variables the apache/kafka image does not turn into server properties.
_NOT_PROPERTIES = {"KAFKA_OPTS", "KAFKA_HEAP_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS",
                   "KAFKA_LOG4J_OPTS", "KAFKA_JMX_OPTS", "KAFKA_GC_LOG_OPTS"}


def image_properties(env: dict[str, str]) -> dict[str, str]:
    """The apache/kafka image's mapping: ``KAFKA_A_B`` -> ``a.b``, ``__`` -> ``_``,
    ``___`` -> ``-``."""
    out = {}
    for key, value in env.items():
        if not key.startswith("KAFKA_") or key in _NOT_PROPERTIES:
            continue
        name = key[len("KAFKA_"):].lower().replace("___", "-").replace("__", "\0")
        out[name.replace("_", ".").replace("\0", "_")] = str(value)
    return out


def _ports(listeners: str, ports: dict[int, int]) -> str:
    return re.sub(r":(\d+)(?=,|$)", lambda m: f":{ports[int(m.group(1))]}", listeners)


@pytest.fixture
def no_bootstrap() -> Iterator[None]:
    if os.environ.get("TIDEMARK_BOOTSTRAP"):
        pytest.skip("starts a broker of its own")
    with cluster.elsewhere():
        yield


def test_a_host_client_reaches_the_broker_through_the_external_listener(
        tmp_path: Path, no_bootstrap: None) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc = compose["services"]["kafka-1"]
    env = {k: str(v) for k, v in svc["environment"].items()}
    secrets = tmp_path / "secrets"
    subprocess.run(["bash", str(ROOT / "deploy" / "init-secrets.sh"), str(secrets)], check=True,
                   capture_output=True, timeout=30)
    assert svc["secrets"] == ["kafka_jaas"]
    jaas = Path(compose["secrets"]["kafka_jaas"]["file"]).name
    assert (secrets / jaas).is_file()
    props = image_properties(env)

    # compose's ports -> free local ones (published = container port for EXTERNAL)
    internal, external, controller = free_ports(3)
    ports = {9092: internal, 9093: controller}
    ext = re.search(r"EXTERNAL://:(\d+)", props["listeners"])
    assert ext and svc["ports"] == [f"127.0.0.1:{ext.group(1)}:{ext.group(1)}"]
    ports[int(ext.group(1))] = external
    props["listeners"] = _ports(props["listeners"], ports)
    props["advertised.listeners"] = _ports(props["advertised.listeners"], ports)
    assert f"EXTERNAL://localhost:{external}" in props["advertised.listeners"]
    assert f"INTERNAL://kafka-1:{internal}" in props["advertised.listeners"]
    props["controller.quorum.voters"] = f"1@127.0.0.1:{controller}"
    props["log.dirs"] = str(tmp_path / "data")
    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor"):
        props[key] = "1"
    for key in ("min.insync.replicas", "transaction.state.log.min.isr"):
        props[key] = "1"
    server = tmp_path / "server.properties"
    server.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    opts = env["KAFKA_OPTS"].replace("/run/secrets/kafka_jaas", str(secrets / jaas))

    jars, java = jvm.ensure_jars("kafka"), jvm.java_binary()
    base = [java, "-Xms128m", "-Xmx512m", "-Djava.awt.headless=true", *opts.split(),
            f"-Dkafka.logs.dir={tmp_path / 'logs'}", "-cp", f"{jars}/*"]
    subprocess.run([*base, "kafka.tools.StorageTool", "format",
                    f"--cluster-id={env['CLUSTER_ID']}", "-c", str(server)],
                   check=True, capture_output=True, timeout=120)
    log = (tmp_path / "broker.log").open("w")
    broker = subprocess.Popen([*base, "kafka.Kafka", str(server)], stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        assert wait_port(external, time.monotonic() + 90, broker.pid), \
            (tmp_path / "broker.log").read_text()[-3000:]
        peer_env = dict(line.split("=", 1) for line in
                        (secrets / "peer.env").read_text().splitlines() if "=" in line)
        assert peer_env["TIDEMARK_BOOTSTRAP"].split(",")[0] == f"localhost:{ext.group(1)}"
        peer_env["TIDEMARK_BOOTSTRAP"] = f"localhost:{external}"
        settings = load_settings(env=peer_env, topic_prefix=f"x{uuid.uuid4().hex[:8]}.",
                                 partitions=1, replication_factor=1, min_insync_replicas=1)
        assert settings.client["sasl.username"] == "peer"

        # without credentials the EXTERNAL listener does not let a client in
        anonymous = AdminClient({"bootstrap.servers": f"localhost:{external}",
                                 "socket.timeout.ms": 3000})
        with pytest.raises(Exception):  # noqa: B017 - a timeout or a transport failure
            anonymous.list_topics(timeout=5)

        md = AdminClient(settings.admin_config()).list_topics(timeout=30)
        assert [b.host for b in md.brokers.values()] == ["localhost"]  # EXTERNAL advertised
        ensure_topics(settings, timeout_s=60)
        topic = settings.topic("txlog")
        producer = Producer(settings.producer_config())
        producer.produce(topic, key=b"k", value=b"through the external listener", partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer(settings.consumer_config())
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = None
        try:
            for _ in range(60):
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    got = msg.value()
                    break
        finally:
            consumer.close()
        assert got == b"through the external listener"
    finally:
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait(10)
        log.close()
