"""The local stack: a KRaft Kafka cluster from the Maven jars, plus any replica nodes and the
Spark job, all on loopback under one state folder.

``state.json`` in the folder records the bootstrap string and, per process, its kind, command
line, address and pid, so ``up`` again restarts only what is missing and ``down``/``kill``
act by pid. Every recorded command line contains the state folder, which guards against pid
reuse. With ``TIDEMARK_BOOTSTRAP`` set, no broker is started: the existing cluster is used.

``up(sasl=True)`` (``tidemark local up --sasl``) starts brokers whose only client listener is
SASL_PLAINTEXT with SCRAM-SHA-256 (brokers talk to each other through it too); the SCRAM
credentials, a random password each, are written at storage format time
(``StorageTool format --add-scram``). The client settings go into ``state.json``
(``client``), where :func:`tidemark.log.settings.load_settings` takes them with the bootstrap, and
into the environment of every process the stack starts.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from tidemark.gossip.pki import init_ca, write_private
from tidemark.gossip.tls import local_pki_dir
from tidemark.log import jvm, registry
from tidemark.log.exceptions import ClusterLaunchError
from tidemark.log.settings import Settings, default_state_dir, load_settings
from tidemark.log.topics import ensure_topics
from tidemark.spark_streaming.supervisor import STATUS_NAME, read_status
from tidemark.stack.acls import ROLES, SUPER_ROLES, grant_roles, wait_granted
from tidemark.stack.hosts import Hosts
from tidemark.stack.processes import (
    free_ports,
    is_alive,
    kill9,
    start_detached,
    terminate,
    wait_file,
    wait_port,
)

#: The Kafka user (role) of each kind of process the stack starts.
_ROLE_OF_KIND = {"replica": "replica", "spark": "job"}

__all__ = ["ProcessSpec", "LocalStack", "SCRAM_MECHANISM"]

#: The SASL mechanism of ``tidemark local up --sasl``.
SCRAM_MECHANISM = "SCRAM-SHA-256"

log = logging.getLogger(__name__)

_LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
"""


@dataclass
class ProcessSpec:
    """A process of the stack. ``argv`` must mention the state folder (the pid-reuse guard)."""

    name: str
    kind: str  # broker | replica | spark
    argv: list[str]
    address: str = ""
    env: dict[str, str] = field(default_factory=dict)
    ready_port: int | None = None
    ready_file: str | None = None  # a process without a port creates it once it serves
    pid: int | None = None
    host: str = ""  # the host (network namespace) it runs on; "": the machine itself


class LocalStack:
    """Start, inspect and stop the local stack kept in ``state_dir``."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None,
                 hosts: Hosts | None = None) -> None:
        """``hosts``: run each broker, replica node and the job on a host of its own (a
        network namespace of :class:`~tidemark.stack.hosts.Hosts`), reached over its
        bridge; None: everything on loopback."""
        self.hosts = hosts
        self.state_dir = Path(state_dir).resolve() if state_dir else default_state_dir()
        self.state_file = self.state_dir / "state.json"
        self.state: dict[str, Any] = self._load()

    # ---- state -----------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        if not self.state_file.exists():
            return {"bootstrap": "", "processes": {}}
        try:
            state = json.loads(self.state_file.read_text())
            state.setdefault("processes", {})
            return state
        except ValueError:
            raise ClusterLaunchError(f"{self.state_file} is corrupt; remove the folder "
                                     f"{self.state_dir} after stopping its processes") from None

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        write_private(tmp, json.dumps(self.state, indent=2, sort_keys=True).encode())
        tmp.replace(self.state_file)

    @property
    def marker(self) -> str:
        """The string every command line of this stack contains."""
        return str(self.state_dir)

    def processes(self, kind: str | None = None) -> list[ProcessSpec]:
        """Recorded processes, optionally of one kind, in start order."""
        specs = [ProcessSpec(**p) for p in self.state["processes"].values()]
        return [s for s in specs if kind is None or s.kind == kind]

    def alive(self, spec: ProcessSpec) -> bool:
        """Whether the recorded pid of ``spec`` still runs."""
        return is_alive(spec.pid, self.marker)

    def place(self, name: str) -> str:
        """The host ``name`` (made now if new) when the stack runs on hosts, else ""."""
        if self.hosts is None:
            return ""
        self.hosts.add(name)
        return name

    def host_address(self, host: str) -> str:
        """The address of ``host`` ("" or no hosts: 127.0.0.1)."""
        return self.hosts[host].address if host and self.hosts else "127.0.0.1"

    def settings(self) -> Settings:
        """Settings pointing at this stack's cluster (as the operator on a ``--sasl`` stack)."""
        return self.role_settings("operator")

    def role_settings(self, role: str) -> Settings:
        """Settings pointing at this stack's cluster as ``role``'s user."""
        key = registry.setting("stack_role").env
        return load_settings(state_dir=self.state_dir, env={**os.environ, key: role})

    # ---- processes -------------------------------------------------------------------------
    def ensure(self, spec: ProcessSpec, timeout_s: float = 90.0, wait: bool = True) -> ProcessSpec:
        """Start ``spec`` unless a live process of that name is recorded; waits for its port."""
        if self.marker not in " ".join(spec.argv):
            raise ClusterLaunchError(f"{spec.name}: command line must mention {self.marker}")
        known = self.state["processes"].get(spec.name)
        if known and is_alive(known.get("pid"), self.marker):
            return ProcessSpec(**known)
        env = {**os.environ, **self._client_env(_ROLE_OF_KIND.get(spec.kind, "operator")),
               **spec.env}
        if spec.ready_file:
            Path(spec.ready_file).unlink(missing_ok=True)  # from an earlier run
        argv = self.hosts[spec.host].argv(spec.argv) if spec.host and self.hosts else spec.argv
        spec.pid = start_detached(argv, self.state_dir / "logs" / f"{spec.name}.log", env)
        self.state["processes"][spec.name] = asdict(spec)
        self._save()
        if wait:
            self.wait_ready(spec, time.monotonic() + timeout_s)
        return spec

    def _client_env(self, role: str = "operator") -> dict[str, str]:
        """The Kafka client settings (SASL) of ``role``'s user as ``TIDEMARK_KAFKA_*``
        variables, and the role itself (``TIDEMARK_STACK_ROLE``)."""
        client = self.state.get("roles", {}).get(role) or self.state.get("client", {})
        out = registry.client_env(client)
        out[registry.setting("stack_role").env] = role
        return out

    def wait_ready(self, spec: ProcessSpec, deadline: float) -> None:
        """Wait until ``spec`` serves on its ready port, or has created its ready file."""
        logfile = self.state_dir / "logs" / (spec.name + ".log")
        if spec.ready_port and not wait_port(spec.ready_port, deadline, spec.pid,
                                             self.host_address(spec.host)):
            raise ClusterLaunchError(
                f"{spec.name} did not start serving on port {spec.ready_port}; see {logfile}")
        if spec.ready_file and not wait_file(Path(spec.ready_file), deadline, spec.pid):
            raise ClusterLaunchError(
                f"{spec.name} is not ready ({'still starting' if is_alive(spec.pid) else 'exited'}"
                f" after the deadline; a slow machine may need a longer --timeout); see {logfile}")

    def kill(self, name: str) -> int:
        """SIGKILL one process by name (a fault drill); returns its pid."""
        known = self.state["processes"].get(name)
        if not known:
            names = ", ".join(self.state["processes"]) or "none"
            raise ClusterLaunchError(f"no process named {name!r} (known: {names})")
        pid = known.get("pid")
        if not is_alive(pid, self.marker):
            raise ClusterLaunchError(f"{name} is not running")
        kill9(pid)
        return pid

    def forget(self, name: str) -> bool:
        """Drop a stopped process from the record (e.g. a node removed from the cluster),
        so that ``up`` does not restart it. Returns whether it was recorded."""
        known = self.state["processes"].get(name)
        if not known:
            return False
        if is_alive(known.get("pid"), self.marker):
            terminate([known["pid"]], self.marker)
        del self.state["processes"][name]
        self._save()
        return True

    def down(self, grace_s: float = 20.0) -> list[str]:
        """Stop everything this stack started: non-brokers first, then brokers."""
        specs = self.processes()
        order = [s for s in specs if s.kind != "broker"], [s for s in specs if s.kind == "broker"]
        stopped = []
        for group in order:
            terminate([s.pid for s in group if s.pid], self.marker, grace_s)
            stopped += [s.name for s in group]
        return stopped

    # ---- brokers ---------------------------------------------------------------------------
    def _broker_specs(self, count: int, sasl: bool = False) -> list[ProcessSpec]:
        existing = self.processes("broker")
        if existing:
            return existing
        ports = free_ports(2 * count)
        scram: list[str] = []
        broker_user: tuple[str, str] | None = None
        if sasl:
            broker_pw = secrets.token_hex(16)
            broker_user = ("broker", broker_pw)
            roles = {role: {"security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": role,
                            "sasl.password": secrets.token_hex(16)} for role in ROLES}
            self.state["roles"] = roles
            self.state["client"] = roles["operator"]  # the CLI is the operator's tool
            scram = [f"--add-scram={SCRAM_MECHANISM}=[name=broker,password={broker_pw}]"]
            scram += [f"--add-scram={SCRAM_MECHANISM}=[name={role},password="
                      f"{c['sasl.password']}]" for role, c in roles.items()]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        ips = [self.host_address(self.place(f"broker-{i + 1}")) for i in range(count)]
        voters = ",".join(f"{i + 1}@{ips[i]}:{ports[2 * i + 1]}" for i in range(count))
        jars = jvm.ensure_jars("kafka")
        java = jvm.java_binary()
        (self.state_dir / "log4j2.properties").write_text(_LOG4J2)
        specs, formats = [], []
        for i in range(count):
            node, port, cport = i + 1, ports[2 * i], ports[2 * i + 1]
            folder = self.state_dir / f"broker-{node}"
            folder.mkdir(parents=True, exist_ok=True)
            props = folder / "server.properties"
            props.write_text(_server_properties(node, port, cport, voters, folder, count,
                                                broker_user, ips[i]))
            base = [java, "-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                    "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
                    f"-Dkafka.logs.dir={folder / 'logs'}", "-cp", f"{jars}/*"]
            formats.append((f"format broker-{node}", base + [
                "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                "-c", str(props), "--ignore-formatted"] + scram))
            specs.append(ProcessSpec(name=f"broker-{node}", kind="broker",
                                     argv=base + ["kafka.Kafka", str(props)],
                                     address=f"{ips[i]}:{port}", ready_port=port,
                                     host=self.place(f"broker-{node}")))
        _run_all(formats)
        self.state["cluster_id"] = cluster_id
        self.state["bootstrap"] = ",".join(s.address for s in specs)
        return specs

    def up(self, brokers: int = 3,
           extra: Iterable[Callable[["LocalStack"], list[ProcessSpec]]] = (),
           timeout_s: float = 120.0, progress: Callable[[str], None] = lambda m: None,
           sasl: bool = False) -> dict:
        """Start what is missing, wait until the cluster serves, create the topics. With
        ``sasl``, new brokers listen with SASL_PLAINTEXT SCRAM-SHA-256 only (an existing
        stack keeps how it was made). The state folder is private (0700) and holds the
        stack's certificate authority (``pki/``), from which every process of the stack
        signs itself a certificate (mutual TLS on every gRPC channel); with
        ``TIDEMARK_TLS_ISSUER`` set, that CA serves instead."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        if (not registry.env_value("tls_issuer") and not registry.env_value("insecure")
                and not (local_pki_dir(self.state_dir) / "trust.pem").is_file()):
            init_ca(local_pki_dir(self.state_dir), name="tidemark local stack")
            progress(f"created the local CA in {local_pki_dir(self.state_dir)}")
        external = registry.env_value("bootstrap")
        if external and not self.processes("broker"):
            self.state["bootstrap"] = external
            self.state["external"] = True
        else:
            if sasl and not self.processes("broker") and self.state.get("external"):
                raise ClusterLaunchError("--sasl configures the stack's own brokers; unset "
                                         "TIDEMARK_BOOTSTRAP")
            specs = self._broker_specs(brokers, sasl)
            self._save()
            # The quorum needs every controller, so start all brokers before waiting on any.
            started = []
            for spec in specs:
                before = spec.pid
                spec = self.ensure(spec, timeout_s, wait=False)
                progress(f"{spec.name} on {spec.address}: "
                         + ("already running" if spec.pid == before
                            else f"started (pid {spec.pid})"))
                started.append(spec)
            deadline = time.monotonic() + timeout_s
            for spec in started:
                self.wait_ready(spec, deadline)
            self._wait_brokers(len(specs), time.monotonic() + timeout_s)
        self._save()
        progress("creating topics")
        ensure_topics(self.settings(), timeout_s=timeout_s)
        if self.state.get("roles") and not self.state.get("acls"):
            count = grant_roles(self.settings(), timeout_s)
            wait_granted(self.settings(), self.role_settings, timeout_s)
            self.state["acls"] = count
            self._save()
            progress(f"granted {count} topic ACLs to the replica, job and peer users")
        for plan in extra:
            for spec in plan(self):
                progress(f"starting {spec.name}")
                self.ensure(spec, timeout_s)
        for spec in self.processes():
            if spec.kind != "broker" and not self.alive(spec):
                progress(f"restarting {spec.name}")
                spec.pid = None
                self.ensure(spec, timeout_s)
        return self.status()

    def _wait_brokers(self, count: int, deadline: float) -> None:
        admin = AdminClient({**self.state.get("client", {}),
                             "bootstrap.servers": self.state["bootstrap"]})
        seen = 0
        while time.monotonic() < deadline:
            try:
                md = admin.list_topics(timeout=2)
                seen = len(md.brokers)
                if seen >= count and md.controller_id >= 0:
                    return
            except Exception:  # the cluster is still coming up
                pass
            time.sleep(0.3)
        raise ClusterLaunchError(f"only {seen} of {count} brokers registered before the deadline;"
                                 f" see {self.state_dir / 'logs'}")

    def status(self) -> dict[str, Any]:
        """The documented JSON shape: bootstrap, state_dir, brokers, replicas, spark."""
        def row(spec: ProcessSpec, ident: Any) -> dict[str, Any]:
            return {"id": ident, "address": spec.address, "pid": spec.pid, "up": self.alive(spec)}

        spark = [s for s in self.processes("spark")]
        return {
            "bootstrap": self.state.get("bootstrap", ""),
            "security_protocol": self.state.get("client", {}).get("security.protocol",
                                                                  "PLAINTEXT"),
            "state_dir": str(self.state_dir),
            "brokers": [row(s, int(s.name.split("-")[1])) for s in self.processes("broker")],
            "replicas": [row(s, s.name) for s in self.processes("replica")],
            "spark": ({"pid": spark[0].pid, "up": self.alive(spark[0]),
                       "restarts": self._query_restarts(spark[0])} if spark else None),
        }

    def _query_restarts(self, spec: ProcessSpec) -> int:
        """Restarts of the job's streaming query by the job itself (its ``supervisor.json``,
        next to its ready file), 0 when the file is from another process or missing."""
        if not spec.ready_file:
            return 0
        status = read_status(Path(spec.ready_file).with_name(STATUS_NAME)) or {}
        return int(status.get("restarts", 0)) if status.get("pid") == spec.pid else 0


def _listener_lines(port: int, cport: int, broker_user: tuple[str, str] | None,
                    ip: str = "127.0.0.1") -> list[str]:
    """Listener settings on ``ip``: PLAINTEXT, or (``broker_user`` given) SASL_PLAINTEXT
    SCRAM for clients and brokers alike; the controller listener stays PLAINTEXT."""
    if broker_user is None:
        return [f"listeners=PLAINTEXT://{ip}:{port},CONTROLLER://{ip}:{cport}",
                f"advertised.listeners=PLAINTEXT://{ip}:{port}",
                "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"]
    user, password = broker_user
    prefix = f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}"
    return [f"listeners=SASL_PLAINTEXT://{ip}:{port},CONTROLLER://{ip}:{cport}",
            f"advertised.listeners=SASL_PLAINTEXT://{ip}:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=SASL_PLAINTEXT",
            "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
            f"sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}",
            f"{prefix}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
            f" required username=\"{user}\" password=\"{password}\";"]


def _server_properties(node: int, port: int, cport: int, voters: str, folder: Path,
                       count: int, broker_user: tuple[str, str] | None = None,
                       ip: str = "127.0.0.1") -> str:
    rf = min(3, count)
    # with SASL, Kafka's StandardAuthorizer: the brokers (and the controllers, which talk
    # on the loopback-only PLAINTEXT controller listener, as ANONYMOUS) and the operator
    # are super users; every other user gets only its role's ACLs (tidemark.stack.acls)
    authz = ([] if broker_user is None else [
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=" + ";".join(f"User:{u}" for u in
                                  (broker_user[0], "ANONYMOUS", *SUPER_ROLES)),
        "allow.everyone.if.no.acl.found=false"])
    return "\n".join([*authz,
        "process.roles=broker,controller", f"node.id={node}",
        f"controller.quorum.voters={voters}",
        *_listener_lines(port, cport, broker_user, ip),
        f"log.dirs={folder / 'data'}", "num.partitions=1",
        f"default.replication.factor={rf}", f"min.insync.replicas={min(2, rf)}",
        f"offsets.topic.replication.factor={rf}", "offsets.topic.num.partitions=3",
        f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={min(2, rf)}",
        "unclean.leader.election.enable=false", "auto.create.topics.enable=false",
        "group.initial.rebalance.delay.ms=0", "num.network.threads=2", "num.io.threads=4",
        "num.recovery.threads.per.data.dir=1", "background.threads=4",
        "broker.heartbeat.interval.ms=500", "broker.session.timeout.ms=4000",
        "replica.lag.time.max.ms=6000", "log.cleaner.threads=1",
        "log.cleaner.backoff.ms=2000",
        "share.coordinator.state.topic.replication.factor=" + str(rf),
        "share.coordinator.state.topic.min.isr=" + str(min(2, rf)), "",
    ])


def _run_all(commands: list[tuple[str, list[str]]]) -> None:
    """Run commands in parallel; raise with the last output line of the first that failed."""
    import subprocess
    procs = [(what, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)) for what, argv in commands]
    for what, proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            lines = out.strip().splitlines() or ["(no output)"]
            raise ClusterLaunchError(f"{what} failed: {lines[-1][:300]}")
