"""docker-compose.yml: the deployment's structure (no Docker engine runs here)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
REPLICAS = ["p0r0", "p0r1", "p1r0", "p1r1"]


def test_services_present() -> None:
    assert {"kafka-1", "kafka-2", "kafka-3", "topic-init", "spark", *REPLICAS} <= set(SERVICES)


def test_brokers_form_one_kraft_quorum_with_durable_defaults() -> None:
    ids, voters = set(), set()
    for name in ("kafka-1", "kafka-2", "kafka-3"):
        svc = SERVICES[name]
        env = svc["environment"]
        assert svc["image"].startswith("apache/kafka:4.")
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
        assert "healthcheck" in svc and svc["volumes"]
        ids.add(env["KAFKA_NODE_ID"])
        voters.add(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
    assert ids == {"1", "2", "3"} and len(voters) == 1


def test_topic_init_waits_for_healthy_brokers() -> None:
    deps = SERVICES["topic-init"]["depends_on"]
    assert {k: v["condition"] for k, v in deps.items()} == {
        f"kafka-{i}": "service_healthy" for i in (1, 2, 3)}
    assert SERVICES["topic-init"]["command"][:2] == ["topics", "create"]


def test_every_replica_gets_its_config_and_own_volume() -> None:
    volumes_seen = set()
    config = tomllib.loads((ROOT / "deploy" / "cluster.toml").read_text())
    for name in REPLICAS:
        svc = SERVICES[name]
        assert svc["depends_on"]["topic-init"]["condition"] == "service_completed_successfully"
        cmd = svc["command"]
        assert cmd[:2] == ["replica", "run"] and cmd[cmd.index("--node") + 1] == name
        mounts = [m for m in svc["volumes"] if isinstance(m, str)]  # the TLS one: below
        cfg = cmd[cmd.index("--config") + 1]
        assert any(m.endswith(f":{cfg}:ro") for m in mounts)
        data = [m.split(":")[0] for m in mounts if m.split(":")[1] == "/var/lib/tidemark"]
        assert len(data) == 1 and data[0] in COMPOSE["volumes"]
        volumes_seen.add(data[0])
        assert "healthcheck" in svc
        assert name in config["nodes"]
        assert config["nodes"][name]["address"].startswith(f"{name}:")
    assert len(volumes_seen) == len(REPLICAS)
    owners = [r for p in config["cluster"]["partitions"] for r in p["replicas"]]
    assert sorted(owners) == sorted(REPLICAS)


def test_spark_job_has_a_checkpoint_volume() -> None:
    svc = SERVICES["spark"]
    cmd = svc["command"]
    assert cmd[:2] == ["queues", "run"]
    ckpt = cmd[cmd.index("--checkpoint") + 1]
    mounts = [m for m in svc["volumes"] if isinstance(m, str)]
    assert any(ckpt.startswith(m.split(":")[1]) and m.split(":")[0] in COMPOSE["volumes"]
               for m in mounts)
    # it checks who signed txlog records: the CA bundle and CRL only, never a key
    assert svc["environment"]["TIDEMARK_TLS_CA"] == "/tls/trust.pem"
    assert "TIDEMARK_TLS_KEY" not in svc["environment"]
    assert [(m["source"], m["volume"]["subpath"], m["read_only"])
            for m in svc["volumes"] if isinstance(m, dict)] == [("pki", "trust", True)]


def test_each_replica_healthcheck_asks_its_own_node() -> None:
    config = tomllib.loads((ROOT / "deploy" / "cluster.toml").read_text())
    for name in REPLICAS:
        test = SERVICES[name]["healthcheck"]["test"]
        # grpc.health.v1 over mutual TLS with the node's own certificate (the service's
        # TIDEMARK_TLS_* environment): tests/integration/test_compose_healthcheck.py runs it
        assert test[:4] == ["CMD", "tidemark", "replica", "health"]
        assert test[test.index("--address") + 1] == config["nodes"][name]["address"]
        assert test[test.index("--node") + 1] == name


def test_brokers_publish_an_external_listener_on_the_host() -> None:
    published = set()
    for i in (1, 2, 3):
        svc = SERVICES[f"kafka-{i}"]
        env = svc["environment"]
        listeners = dict(x.split("://") for x in env["KAFKA_LISTENERS"].split(","))
        advertised = dict(x.split("://") for x in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
        assert set(listeners) == {"INTERNAL", "EXTERNAL", "CONTROLLER"}
        assert advertised["INTERNAL"] == f"kafka-{i}:9092"
        port = listeners["EXTERNAL"].rsplit(":", 1)[1]
        assert advertised["EXTERNAL"] == f"localhost:{port}"
        # published on the host's loopback, at the port it advertises
        assert svc["ports"] == [f"127.0.0.1:{port}:{port}"]
        published.add(port)
        protocols = dict(x.split(":") for x in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
        assert protocols["EXTERNAL"] == "SASL_PLAINTEXT" and env["KAFKA_SASL_ENABLED_MECHANISMS"] == "PLAIN"
        assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        assert "/run/secrets/kafka_jaas" in env["KAFKA_OPTS"] and svc["secrets"] == ["kafka_jaas"]
    assert published == {"19092", "19093", "19094"}
    init = (ROOT / "deploy" / "init-secrets.sh").read_text()
    assert "TIDEMARK_BOOTSTRAP=localhost:19092,localhost:19093,localhost:19094" in init


def test_secrets_come_from_files_git_ignores() -> None:
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "deploy/secrets/" in ignored
    assert "deploy/secrets" in (ROOT / ".dockerignore").read_text().split()
    for name, spec in COMPOSE["secrets"].items():
        assert spec["file"].startswith("./deploy/secrets/"), name
        assert Path(spec["file"]).name in (ROOT / "deploy" / "init-secrets.sh").read_text()


def test_prometheus_and_grafana_are_provisioned_from_deploy() -> None:
    prom = SERVICES["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus/tidemark:ro" in prom["volumes"]
    assert "--config.file=/etc/prometheus/tidemark/prometheus.yml" in prom["command"]
    graf = SERVICES["grafana"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in graf["volumes"]
    dash = [v for v in graf["volumes"] if v.startswith("./deploy/grafana/tidemark.json:")]
    assert len(dash) == 1
    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/tidemark.yml").read_text())
    folder = provider["providers"][0]["options"]["path"]
    assert dash[0].split(":")[1].startswith(folder + "/")
    sources = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert sources["datasources"][0]["url"] == "http://prometheus:9090"
    assert graf["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == \
        "/run/secrets/grafana_admin_password"
    assert all(p.startswith("127.0.0.1:") for s in SERVICES.values() for p in s.get("ports", []))


def test_metrics_are_reachable_from_the_network_in_containers() -> None:
    for name in REPLICAS:
        assert SERVICES[name]["environment"]["TIDEMARK_METRICS_HOST"] == "0.0.0.0"


def test_image_is_a_non_editable_install_without_local_state() -> None:
    docker = (ROOT / "Dockerfile").read_text()
    assert "pip install" in docker and " -e " not in docker and "ensure_jars('spark')" in docker
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".tidemark"} <= set(ignored)


def test_replicas_speak_mutual_tls_with_their_own_certificate_only() -> None:
    init = SERVICES["pki-init"]
    script = " ".join(init["command"])
    assert "ca init --dir /pki/ca --exist-ok" in script
    for node in REPLICAS:
        svc = SERVICES[node]
        assert svc["depends_on"]["pki-init"]["condition"] == "service_completed_successfully"
        env = svc["environment"]
        assert env["TIDEMARK_TLS_CERT"] == f"/tls/node-{node}.crt"
        assert env["TIDEMARK_TLS_KEY"] == f"/tls/node-{node}.key"
        assert "TIDEMARK_INSECURE" not in env
        mounts = [v for v in svc["volumes"] if isinstance(v, dict)]
        assert [(m["source"], m["volume"]["subpath"], m["read_only"]) for m in mounts] == [
            ("pki", node, True)]  # its own folder: never the CA key in /pki/ca
        assert "ca issue node $$n" in script and node in script
