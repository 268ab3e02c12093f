"""The librdkafka -> Java client translation of ``[kafka.client]`` for Spark's Kafka source and
sink (log.settings.java_client_settings): JAAS escaping (checked with the Java client's own
JAAS parser), OAUTHBEARER, PEM client certificate and key (mTLS), and the local stack's SASL
client settings taken from the state folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tidemark.log import jvm
from tidemark.log.exceptions import ConfigError
from tidemark.log.settings import jaas_quote, java_client_settings, load_settings

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"

_PARSE = """
import java.util.Map;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.security.JaasContext;
public class Jaas {
    public static void main(String[] args) throws Exception {
        String cfg = new String(System.in.readAllBytes(), "UTF-8");
        var ctx = JaasContext.loadClientContext(Map.of("sasl.jaas.config", new Password(cfg)));
        var e = ctx.configurationEntries().get(0);
        System.out.print(e.getLoginModuleName() + "\\0" + e.getOptions().get("username")
                         + "\\0" + e.getOptions().get("password"));
    }
}
"""


def _java_parse(tmp_path: Path, jaas: str) -> list[str]:
    """Parse ``jaas`` with the Java Kafka client's JAAS parser (the jars Spark uses)."""
    source = tmp_path / "Jaas.java"
    source.write_text(_PARSE)
    jars = jvm.jar_dir("spark")
    if not list(jars.glob("kafka-clients-*.jar")):
        jars = jvm.ensure_jars("spark", quiet=True)
    out = subprocess.run([jvm.java_binary(), "-cp", f"{jars}/*", str(source)], input=jaas,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split("\0")


@pytest.mark.parametrize("password", ['pa"ss', "back\\slash", 'both\\"; x=y', "plain"])
def test_jaas_password_is_escaped_and_the_java_parser_reads_it_back(tmp_path: Path,
                                                                     password: str) -> None:
    conf = java_client_settings({"security.protocol": "SASL_SSL",
                                 "sasl.mechanisms": "SCRAM-SHA-256",
                                 "sasl.username": 'al"ice', "sasl.password": password})
    assert conf["sasl.mechanism"] == "SCRAM-SHA-256" and "sasl.mechanisms" not in conf
    assert "sasl.username" not in conf and "sasl.password" not in conf
    assert _java_parse(tmp_path, conf["sasl.jaas.config"]) == [SCRAM, 'al"ice', password]


def test_jaas_quote() -> None:
    assert jaas_quote('a"b\\c') == '"a\\"b\\\\c"'


def test_an_explicit_jaas_config_wins() -> None:
    conf = java_client_settings({"sasl.mechanism": "PLAIN", "sasl.username": "u",
                                 "sasl.password": "p", "sasl.jaas.config": "X required;"})
    assert conf["sasl.jaas.config"] == "X required;"


def test_oauthbearer_oidc() -> None:
    conf = java_client_settings({
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "svc",
        "sasl.oauthbearer.client.secret": 's"cret', "sasl.oauthbearer.scope": "kafka read",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1, poolId=p2"})
    assert conf["sasl.mechanism"] == "OAUTHBEARER"
    assert conf["sasl.login.callback.handler.class"].endswith(
        "oauthbearer.OAuthBearerLoginCallbackHandler")
    assert conf["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/token"
    assert conf["sasl.jaas.config"] == (
        f'{OAUTH} required clientId="svc" clientSecret="s\\"cret" scope="kafka read" '
        f'extension_logicalCluster="lkc-1" extension_poolId="p2";')
    assert not any(k.startswith("sasl.oauthbearer.c") or k == "sasl.oauthbearer.method"
                   for k in conf)


def test_oauthbearer_unsecured_jwt() -> None:
    conf = java_client_settings({"sasl.mechanism": "OAUTHBEARER",
                                 "sasl.oauthbearer.config": "principal=admin scope=a,b"})
    assert conf["sasl.jaas.config"] == (f'{OAUTH} required unsecuredLoginStringClaim_sub='
                                        f'"admin" unsecuredLoginListClaim_scope="a,b";')
    assert "sasl.login.callback.handler.class" not in conf


def test_pem_client_certificate_and_key(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
    conf = java_client_settings({"security.protocol": "SSL", "ssl.ca.location": "/ca.pem",
                                 "ssl.certificate.location": str(cert),
                                 "ssl.key.location": str(key), "ssl.key.password": "kp"})
    assert conf["ssl.keystore.type"] == "PEM"
    assert conf["ssl.keystore.certificate.chain"] == cert.read_text()
    assert conf["ssl.keystore.key"] == key.read_text()
    assert conf["ssl.key.password"] == "kp"
    assert conf["ssl.truststore.location"] == "/ca.pem" and conf["ssl.truststore.type"] == "PEM"
    assert not any(k in conf for k in ("ssl.certificate.location", "ssl.key.location",
                                       "ssl.ca.location"))
    both = tmp_path / "both.pem"
    both.write_text(key.read_text() + cert.read_text())
    conf = java_client_settings({"ssl.certificate.location": str(both),
                                 "ssl.key.location": str(both)})
    assert conf == {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(both)}
    conf = java_client_settings({"ssl.certificate.pem": "C", "ssl.key.pem": "K",
                                 "ssl.ca.pem": "CA"})
    assert conf == {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "C",
                    "ssl.keystore.key": "K", "ssl.truststore.certificates": "CA",
                    "ssl.truststore.type": "PEM"}


def test_pem_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs its key"):
        java_client_settings({"ssl.certificate.pem": "C"})
    with pytest.raises(ConfigError, match="cannot read the PEM file"):
        java_client_settings({"ssl.certificate.location": str(tmp_path / "none"),
                              "ssl.key.location": str(tmp_path / "k")})


def test_the_local_stacks_sasl_settings_come_from_the_state_folder(tmp_path: Path) -> None:
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
              "sasl.username": "tidemark", "sasl.password": "pw"}
    (tmp_path / "state.json").write_text(json.dumps({"bootstrap": "127.0.0.1:1",
                                                     "client": client}))
    settings = load_settings(env={}, state_dir=tmp_path)
    assert settings.bootstrap == "127.0.0.1:1" and dict(settings.client) == client
    assert settings.producer_config()["sasl.username"] == "tidemark"
    env = {"TIDEMARK_KAFKA_SASL_PASSWORD": "other"}
    assert load_settings(env=env, state_dir=tmp_path).client["sasl.password"] == "other"
