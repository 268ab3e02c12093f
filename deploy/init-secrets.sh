#!/usr/bin/env bash
# The secrets docker-compose.yml reads, created once with random passwords:
#   kafka_server_jaas.conf   the brokers' PLAIN users of the EXTERNAL listener (peer, operator)
#   peer.env                 what a peer or the tidemark CLI on the host sets to reach the
#                            brokers through that listener (localhost:19092-19094)
#   grafana_admin_password   Grafana's admin password
# Usage: deploy/init-secrets.sh [DIR]   (default: deploy/secrets beside this script; git
# ignores it). Files that exist are kept, so a second run changes nothing. The folder is
# private (0700); the files are 0644 because the containers read them as their own users.
set -euo pipefail

dir=${1:-"$(cd "$(dirname "$0")" && pwd)/secrets"}
mkdir -p "$dir"
chmod 700 "$dir"

password() { local p; p=$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9'); echo "${p:0:32}"; }

if [[ ! -f "$dir/kafka_server_jaas.conf" ]]; then
  peer_pw=$(password)
  operator_pw=$(password)
  cat > "$dir/kafka_server_jaas.conf" <<JAAS
KafkaServer {
  org.apache.kafka.common.security.plain.PlainLoginModule required
  user_peer="$peer_pw"
  user_operator="$operator_pw";
};
JAAS
  cat > "$dir/peer.env" <<ENV
TIDEMARK_BOOTSTRAP=localhost:19092,localhost:19093,localhost:19094
TIDEMARK_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT
TIDEMARK_KAFKA_SASL_MECHANISM=PLAIN
TIDEMARK_KAFKA_SASL_USERNAME=peer
TIDEMARK_KAFKA_SASL_PASSWORD=$peer_pw
ENV
  chmod 644 "$dir/kafka_server_jaas.conf" "$dir/peer.env"
  echo "created $dir/kafka_server_jaas.conf and $dir/peer.env"
fi
if [[ ! -f "$dir/grafana_admin_password" ]]; then
  password > "$dir/grafana_admin_password"
  chmod 644 "$dir/grafana_admin_password"
  echo "created $dir/grafana_admin_password"
fi
