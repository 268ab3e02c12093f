#!/usr/bin/env bash
# Submit the queues job (`tidemark queues run`) to a Spark cluster.
#
# Usage: deploy/spark-submit.sh [--dry-run] [--master URL] [--deploy-mode client|cluster]
#          [--config TOML] [--checkpoint URI] [--trigger INTERVAL] [-- SPARK-SUBMIT-ARGS...]
#
# The Kafka connector comes from Maven coordinates (--packages), read from the pom tidemark
# ships (log/poms/spark/pom.xml, the one `python -m tidemark.log.jvm` resolves locally), so it
# always matches the pinned pyspark. tidemark must be pip-installed ('tidemark[spark]') on the
# submitting host, the driver and every executor, with PYSPARK_PYTHON naming that interpreter:
# the entry point is the installed tidemark/__main__.py, and the executors' Python daemon is
# tidemark.spark_streaming.pydaemon. --dry-run prints the command instead of running it.
# Environment: PYTHON (default python3, the interpreter with tidemark), SPARK_SUBMIT (default
# spark-submit), TIDEMARK_CONFIG (the default of --config).
set -euo pipefail

dry_run=0
master=${SPARK_MASTER_URL:-spark://localhost:7077}
deploy_mode=client
config=${TIDEMARK_CONFIG:-/etc/tidemark/cluster.toml}
checkpoint=hdfs:///tidemark/queues-checkpoint
trigger=500ms
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --master) master=$2; shift ;;
    --deploy-mode) deploy_mode=$2; shift ;;
    --config) config=$2; shift ;;
    --checkpoint) checkpoint=$2; shift ;;
    --trigger) trigger=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "spark-submit.sh: error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

python=${PYTHON:-python3}
spark_submit=${SPARK_SUBMIT:-spark-submit}

# groupId:artifactId:version of every dependency of the shipped pom, comma-separated
packages=$("$python" - <<'PY'
import re
import xml.etree.ElementTree as ET
from tidemark.log.jvm import pom_dir

ns = {"m": "http://maven.apache.org/POM/4.0.0"}
root = ET.parse(pom_dir() / "spark" / "pom.xml").getroot()
props = {p.tag.split("}", 1)[1]: p.text or "" for p in root.find("m:properties", ns) or []}

def value(dep, tag):
    text = dep.find(f"m:{tag}", ns).text or ""
    return re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], text)

print(",".join(":".join(value(d, t) for t in ("groupId", "artifactId", "version"))
               for d in root.findall("m:dependencies/m:dependency", ns)))
PY
)
entry=$("$python" -c 'import pathlib, tidemark; print(pathlib.Path(tidemark.__file__).with_name("__main__.py"))')

cmd=("$spark_submit" --master "$master" --deploy-mode "$deploy_mode"
     --packages "$packages"
     --conf spark.sql.streaming.stateStore.providerClass=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider
     --conf spark.python.daemon.module=tidemark.spark_streaming.pydaemon
     ${extra[@]+"${extra[@]}"}
     "$entry" queues run --config "$config" --checkpoint "$checkpoint" --trigger "$trigger")

if [[ $dry_run -eq 1 ]]; then
  printf '%q ' "${cmd[@]}"
  echo
else
  exec "${cmd[@]}"
fi
