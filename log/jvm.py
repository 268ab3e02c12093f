"""JVM artifacts from Maven Central: the Kafka broker and Spark's Kafka connector.

``python -m log.jvm`` (run by ``make``) resolves ``log/poms/kafka/pom.xml`` and
``log/poms/spark/pom.xml`` (package data, so this works from any install) with Maven into
``~/.cache/tidemark/jars/{kafka,spark}`` (override with ``TIDEMARK_CACHE``). A folder that
is already complete is not resolved again, so a second run does not touch the network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from tidemark.log import registry
from tidemark.log.exceptions import JvmSetupError

__all__ = ["pom_dir", "cache_dir", "jar_dir", "ensure_jars", "java_binary", "spark_connector_jars"]

ARTIFACTS = ("kafka", "spark")


def cache_dir() -> Path:
    """``TIDEMARK_CACHE`` or ``~/.cache/tidemark``."""
    return Path(registry.env_value("cache")).expanduser()


def pom_dir() -> Path:
    """The folder of the poms shipped inside the package (``log/poms``)."""
    return Path(str(resources.files("tidemark.log") / "poms"))


def jar_dir(artifact: str) -> Path:
    """Where the jars of ``artifact`` (``kafka`` or ``spark``) are cached."""
    return cache_dir() / "jars" / artifact


def java_binary() -> str:
    """The ``java`` to run, or a :class:`JvmSetupError` naming what to install."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JvmSetupError("java not found: install a JDK 17 or newer (e.g. apt-get install"
                            " openjdk-17-jdk-headless) or set JAVA_HOME")
    return found


def _marker(artifact: str) -> Path:
    return jar_dir(artifact) / ".complete"


def _pom_stamp(artifact: str) -> str:
    return (pom_dir() / artifact / "pom.xml").read_text()


def ensure_jars(artifact: str, quiet: bool = False) -> Path:
    """Resolve ``artifact``'s jars once; returns the folder holding them."""
    if artifact not in ARTIFACTS:
        raise JvmSetupError(f"unknown JVM artifact {artifact!r}")
    out = jar_dir(artifact)
    marker = _marker(artifact)
    if marker.exists() and marker.read_text() == _pom_stamp(artifact):
        return out
    java_binary()
    mvn = shutil.which("mvn")
    if not mvn:
        raise JvmSetupError("mvn not found: install Apache Maven (e.g. apt-get install maven)")
    if out.exists():
        shutil.rmtree(out)
    poms = pom_dir()
    cmd = [mvn, "-B", "-q", "-s", str(poms / "settings.xml"),
           f"-Dmaven.repo.local={cache_dir() / 'm2'}", "-f", str(poms / artifact / "pom.xml"),
           "dependency:copy-dependencies", f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
    if not quiet:
        print(f"tidemark: resolving {artifact} jars from Maven Central into {out}", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln for ln in proc.stdout.splitlines() if "[ERROR]" in ln] or [proc.stderr.strip()]
        raise JvmSetupError(f"maven could not resolve {artifact} jars: {errors[0][:300]}")
    marker.write_text(_pom_stamp(artifact))
    return out


def spark_connector_jars() -> list[str]:
    """Connector jars for ``spark.jars``, minus those pyspark already ships."""
    folder = ensure_jars("spark", quiet=True)
    try:
        import pyspark
        jars = Path(pyspark.__file__).parent / "jars"
        shipped = {p.name.rsplit("-", 1)[0] for p in jars.glob("*.jar")}
    except ImportError:
        shipped = set()
    return sorted(str(p) for p in folder.glob("*.jar") if p.name.rsplit("-", 1)[0] not in shipped)


def main() -> int:
    """Resolve every artifact; one readable line on failure."""
    try:
        for artifact in ARTIFACTS:
            print(f"{artifact}: {ensure_jars(artifact)}")
    except JvmSetupError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
