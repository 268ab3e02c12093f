"""Dead letters of a replica (replica/deadletter.py): an oversized copy is truncated with its
original size and hash, and a copy Kafka does not take is reported for the store's ledger
instead of raising (a poison record must never stop ingest)."""

from __future__ import annotations

import hashlib

from confluent_kafka import Message

from tidemark.log.settings import load_settings
from tidemark.replica.deadletter import KEY_MAX, DeadLetters


def _settings():  # type: ignore[no-untyped-def]
    # Nothing listens on port 1: every delivery fails.
    return load_settings(env={}, bootstrap="127.0.0.1:1", topic_prefix="dl.",
                         max_message_bytes=1000)


def test_oversized_copy_is_truncated_with_size_and_hash() -> None:
    letters = DeadLetters(_settings(), "replica:n1")
    value = b"v" * 5000
    msg = Message(topic="dl.txlog", partition=2, offset=7, key=b"k" * 3000, value=value)
    key, copy, headers = letters.copy_of(msg, "bad body")
    h = dict(headers)
    assert copy == value[:1000] and key == b"k" * KEY_MAX
    assert h["tidemark.truncated"] == b"5000"
    assert h["tidemark.sha256"] == hashlib.sha256(value).hexdigest().encode()
    assert h["tidemark.key_truncated"] == b"3000"
    assert h["tidemark.reason"] == b"bad body" and h["tidemark.offset"] == b"7"
    small = Message(topic="dl.txlog", partition=0, offset=1, key=b"k", value=b"x")
    assert "tidemark.truncated" not in dict(letters.copy_of(small, "r")[2])


def test_refused_copies_are_reported_for_the_ledger_not_raised() -> None:
    letters = DeadLetters(_settings(), "replica:n1", flush_timeout_s=1.0)
    poison = [(Message(topic="dl.txlog", partition=0, offset=3, key=b"p",
                       value=b"z" * 2_000_000), "too big and bad"),
              (Message(topic="dl.txlog", partition=1, offset=4, key=None, value=b"q"), "bad")]
    refused = letters.send(poison)
    assert [(e["partition"], e["offset"]) for e in refused] == [(0, 3), (1, 4)]
    assert refused[0]["size"] == 2_000_000 and refused[0]["reason"] == "too big and bad"
    assert refused[0]["sha256"] == hashlib.sha256(b"z" * 2_000_000).hexdigest()
    assert all(e["error"] for e in refused)
    assert letters.sent == 0 and letters.truncated == 1
