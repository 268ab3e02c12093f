"""``tidemark log tail`` on a real cluster: the records ``tidemark load`` wrote, decoded, one
JSON object a line; a poison record is shown with its reason and does not stop the read."""

from __future__ import annotations

import json

from confluent_kafka import Producer

from tests.support import tidemark_cli
from tidemark.log.settings import Settings


def test_log_tail_decodes_what_load_wrote_and_shows_a_poison_record(
        fresh_settings: Settings) -> None:
    s = fresh_settings
    tidemark_cli(s, "load", "--peers", "3", "--messages", "40", "--ack-ratio", "0.5",
                 "--seed", "1")
    raw = Producer({**s.producer_config()})
    raw.produce(s.topic("txlog"), b"\x00not avro at all", key=b"B", partition=0)
    raw.flush(30)
    out = tidemark_cli(s, "log", "tail", "--from-beginning", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    sends = [r for r in rows if r.get("schema") == "Send"]
    assert len(sends) == 40
    assert all(isinstance(r["record"]["payload"], str) for r in sends)  # base64 text
    assert all(r["time"].endswith("Z") and r["topic"] == "txlog" for r in rows)
    assert {r.get("schema") for r in rows} - {None} <= {"Send", "Ack", "AckBatch"}
    poison = [r for r in rows if "error" in r]
    assert len(poison) == 1 and poison[0]["head"].startswith("006e6f74") \
        and "marker" in poison[0]["error"]
    # the human form: one line per record, and --last bounds each partition
    lines = tidemark_cli(s, "log", "tail", "--last", "1").splitlines()
    assert 1 <= len(lines) <= s.partitions
    assert all(" txlog/" in line for line in lines)
