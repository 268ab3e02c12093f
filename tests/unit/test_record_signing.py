"""Signed acker records end to end, without Kafka: what peers and operators write, what the
queues job's pandas step and the replica's ingest index do with it (round trips, a forged
signature, another peer's signature, a Purge signed by a peer, a revoked certificate, an old
unsigned record of the history schema in secure mode, another environment's records)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.pki_fixtures import encode, pki
from tidemark import schemas
from tidemark.gossip.pki import TlsFiles
from tidemark.gossip.record_signing import RecordSigner, SignatureVerifier, sealer_of
from tidemark.gossip.tls import TlsMissingError, Transport, resolve_trust
from tidemark.gossip.txlog_admission import ENVIRONMENT, SIGNATURE, TxlogAdmission
from tidemark.log.queue_state import Ttl, queue_key
from tidemark.log.wire import AckBatchEncoder, Codec, default_codec, signed_message
from tidemark.spark_streaming.state_layout import MemoryMaps
from tidemark.spark_streaming.transform import (
    ENTRY,
    REFUSED_ENVIRONMENT,
    REFUSED_SIGNATURE,
    process_rows,
)

C = default_codec()
# the test PKI's certificates are valid from 5 minutes before they were made, and a record
# counts only if signed within its signer's validity (at its own timestamp): make the PKI
# (once per process, maybe long after this module was collected) before taking NOW
pki()
NOW = int(time.time() * 1000)


def admission(env: str = "prod") -> TxlogAdmission:
    return TxlogAdmission(env, pki().verifier())


def check(value: bytes, env: str = "prod") -> str | None:
    dec = C.decode(value)
    got = admission(env).check(dec.name, dec.record, value)
    return None if got is None else got.kind


def test_a_peers_sealed_ack_batch_round_trips_and_is_fastavros() -> None:
    signer = pki().signers["peer:prod:billing"]
    enc = AckBatchEncoder(C, "billing", "prod", signer.seal)  # self-checks against fastavro
    value = enc.encode(["m-1", "m-2", "é"], NOW)
    rec = C.decode(value).record
    assert rec["message_ids"] == ["m-1", "m-2", "é"] and rec["signer"] == signer.certificate
    assert value == C.encode_with_fastavro("AckBatch", rec)
    assert signed_message(value, rec["signer"], rec["signature"]) is not None
    assert check(value) is None
    assert enc.encode_with_codec(["m-9"], NOW)[:10] == value[:10]
    assert check(enc.encode_with_codec(["m-9"], NOW)) is None


def test_a_forged_signature_is_refused() -> None:
    value = pki().signers["peer:prod:billing"].seal(encode("AckBatch", "billing", "prod", NOW))
    forged = value[:-3] + bytes([value[-3] ^ 0xFF]) + value[-2:]
    assert check(forged) == SIGNATURE
    # the certificate of billing with a signature made by another key
    other = pki().signers["peer:prod:shipping"]
    rec = C.decode(value).record
    unsigned = encode("AckBatch", "billing", "prod", NOW)
    stolen = C.encode("AckBatch", {**C.decode(unsigned).record, "signer": rec["signer"],
                                   "signature": other.sign(b"anything")})
    assert check(stolen) == SIGNATURE


def test_a_signature_by_another_peer_is_refused() -> None:
    for label in ("peer:prod:shipping", "peer:staging:billing", "operator:alice"):
        for name in ("AckBatch", "DeliveryFailed"):
            value = pki().signers[label].seal(encode(name, "billing", "prod", NOW))
            assert check(value) == SIGNATURE, (label, name)


def test_a_purge_counts_only_when_an_operator_signed_it() -> None:
    unsigned = encode("Purge", "billing", "prod", NOW)
    assert check(unsigned) == SIGNATURE
    assert check(pki().signers["peer:prod:billing"].seal(unsigned)) == SIGNATURE
    assert check(pki().signers["operator:alice"].seal(unsigned)) is None
    # another environment's Purge is refused whoever signed it
    staging = pki().signers["operator:alice"].seal(encode("Purge", "billing", "staging", NOW))
    assert check(staging) == ENVIRONMENT


def test_a_revoked_certificate_is_refused_and_rotation_keeps_both_cas() -> None:
    value = pki().signers["revoked:prod:billing"].seal(encode("AckBatch", "billing", "prod", NOW))
    dec = C.decode(value)
    got = admission().check(dec.name, dec.record, value)
    assert got is not None and got.kind == SIGNATURE and "revoked" in got.reason
    for label in ("peer:prod:billing", "peer2:prod:billing"):  # issued by CA 1 and CA 2
        assert check(pki().signers[label].seal(encode("AckBatch", "billing", "prod", NOW))) \
            is None
    untrusted = pki().signers["untrusted:prod:billing"].seal(
        encode("AckBatch", "billing", "prod", NOW))
    assert check(untrusted) == SIGNATURE


def test_revocation_counts_from_the_crl_refresh(tmp_path: Path) -> None:
    from tidemark.gossip.pki import Identity, init_ca, issue, revoke
    from tidemark.log.wire import HEADER_SIZE
    folder = tmp_path / "ca"
    init_ca(folder)
    files = issue(folder, Identity("peer", "billing", "prod"), tmp_path / "out")
    signer = RecordSigner.from_files(files)
    verifier = SignatureVerifier.from_files(folder / "trust.pem", folder / "crl.pem")
    adm = TxlogAdmission("prod", verifier)
    # signed now: this CA was made by this test, later than NOW
    value = signer.seal(encode("AckBatch", "billing", "prod", int(time.time() * 1000)))
    rec = C.decode(value).record
    assert adm.check("AckBatch", rec, value) is None
    import os

    from cryptography import x509
    revoke(folder, x509.load_der_x509_certificate(signer.certificate).serial_number)
    os.utime(folder / "crl.pem", (time.time() + 5, time.time() + 5))  # a visible change
    verifier.refresh_crl()
    assert adm.check("AckBatch", rec, value) is not None
    assert value[:HEADER_SIZE] == C.encode("AckBatch", rec)[:HEADER_SIZE]


def test_an_old_unsigned_record_decodes_and_is_refused_in_secure_mode_only() -> None:
    for name in ("AckBatch", "Purge", "DeliveryFailed"):
        old = dict(json.loads((schemas.SCHEMA_DIR / "history" / f"{name}.v1.avsc")
                              .read_text()))
        old_codec = Codec({name: old})
        rec = C.decode(encode(name, "billing", "prod", NOW)).record
        value = old_codec.encode(name, {k: v for k, v in rec.items()
                                        if k not in ("signer", "signature")})
        dec = C.decode(value)  # the history schema is still registered
        assert dec.record["signer"] == b"" and dec.record["signature"] == b""
        assert check(value) == SIGNATURE
        assert TxlogAdmission("prod", None).check(dec.name, dec.record, value) is None
    ack = encode("Ack", "billing", "prod", NOW)  # the single-id Ack cannot be signed
    assert check(ack) == SIGNATURE and TxlogAdmission("prod", None).check(
        "Ack", C.decode(ack).record, ack) is None


def test_sealer_of_an_insecure_transport_is_none_and_trust_fails_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidemark.gossip.pki import Identity
    assert sealer_of(Transport(Identity("peer", "a", "prod"), None)) is None
    for var in ("TIDEMARK_TLS_CA", "TIDEMARK_TLS_ISSUER", "TIDEMARK_INSECURE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(TlsMissingError):
        resolve_trust(state_dir=tmp_path)
    assert resolve_trust(insecure=True) is None
    trust = resolve_trust(files=TlsFiles(pki().folder / "trust.pem", Path("c"), Path("k"),
                                         pki().folder / "crl.pem"))
    assert trust is not None and trust.ca.is_file()


def _rows(values: list[tuple[bytes, bytes]]) -> pd.DataFrame:
    return pd.DataFrame([(k, v, 0, off) for off, (k, v) in enumerate(values)],
                        columns=["key", "value", "partition", "offset"])


def test_the_job_step_refuses_and_keeps_the_message_queued() -> None:
    signers = pki().signers
    rows = _rows([
        (b"billing", encode("Send", "billing", "prod", NOW, ("m-1",))),
        (b"billing", encode("Send", "billing", "prod", NOW, ("m-2",))),
        (b"billing", encode("Send", "billing", "staging", NOW, ("m-3",))),   # other env
        (b"billing", encode("AckBatch", "billing", "prod", NOW, ("m-1",))),  # unsigned
        (b"billing", signers["peer:prod:shipping"].seal(
            encode("AckBatch", "billing", "prod", NOW, ("m-1",)))),         # another peer
        (b"billing", signers["peer:prod:billing"].seal(
            encode("Purge", "billing", "prod", NOW))),                      # peer's Purge
        (b"billing", signers["operator:alice"].seal(
            encode("Purge", "billing", "staging", NOW))),                   # other env
        (b"billing", signers["peer:prod:billing"].seal(
            encode("AckBatch", "billing", "prod", NOW, ("m-2",)))),         # counts
    ])
    maps = MemoryMaps()
    out = process_rows(rows, maps, Ttl(1000, 500), admission=admission())
    assert list(out[out.kind == REFUSED_ENVIRONMENT].offset) == [2, 6]
    assert list(out[out.kind == REFUSED_SIGNATURE].offset) == [3, 4, 5]
    assert all(out[out.kind.str.startswith("refused")].reason.str.len() > 0)
    assert list(out[out.kind == ENTRY].key) == [queue_key("billing", "m-1").encode()]
    queued = {k for k, e in maps.entries().items() if e.queued}
    assert queued == {("billing", "m-1")}


def test_the_replica_index_refuses_without_indexing(tmp_path: Path) -> None:
    from tidemark.replica.ingest import REFUSED_PREFIX, index_txlog
    from tidemark.replica.store import Store
    store = Store(tmp_path / "s", "n")
    try:
        batch = store.batch()
        good = pki().signers["peer:prod:billing"].seal(encode("AckBatch", "billing", "prod", NOW))
        bad = encode("AckBatch", "billing", "prod", NOW)
        other = encode("Send", "billing", "staging", NOW)
        assert index_txlog(batch, 0, 0, good, admission=admission()) is None
        reason = index_txlog(batch, 0, 1, bad, admission=admission())
        assert reason is not None and reason.startswith(REFUSED_PREFIX + SIGNATURE)
        reason = index_txlog(batch, 0, 2, other, admission=admission())
        assert reason is not None and reason.startswith(REFUSED_PREFIX + ENVIRONMENT)
        batch.commit()
        assert [off for off, _ in store.records(0, 0, 3)] == [0]
    finally:
        store.close()


class _Msg:
    """What ingest reads of a consumed Kafka message."""

    def __init__(self, topic: str, offset: int, key: bytes, value: bytes) -> None:
        self._t, self._o, self._k, self._v = topic, offset, key, value

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes:
        return self._v


class _Letters:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def send(self, poison: list) -> list:
        self.sent += [(m.offset(), reason) for m, reason in poison]
        return []

    def close(self) -> None:
        pass


def test_an_ingest_step_applies_only_what_the_admission_admits(tmp_path: Path) -> None:
    """The fast path keeps this environment's Sends; every other record is decoded and
    checked: refused ones are dead-lettered and counted, neither stored nor indexed."""
    from tidemark.log.settings import load_settings
    from tidemark.replica.ingest import PURGE_IN_TXLOG, Ingestor
    from tidemark.replica.keys import ack_key
    from tidemark.replica.store import Store
    settings = load_settings(env={"TIDEMARK_ENVIRONMENT": "prod"}, bootstrap="127.0.0.1:1",
                             topic_prefix="sg.", partitions=1)
    assert settings.environment == "prod"
    store = Store(tmp_path / "s", "n1")
    ingest = Ingestor(settings, store, "n1", admission=admission())
    ingest.consumer.close()
    ingest.deadletters.close()
    letters = ingest.deadletters = _Letters()  # type: ignore[assignment]
    counted: list[tuple[str, int]] = []
    ingest.on_refused = lambda kind, n: counted.append((kind, n))
    billing = pki().signers["peer:prod:billing"]
    values = [
        encode("Send", "billing", "prod", NOW, ("m-1",)),                       # 0 applied
        encode("Send", "billing", "staging", NOW, ("m-2",)),                    # 1 env
        billing.seal(encode("AckBatch", "billing", "prod", NOW, ("m-1",))),     # 2 applied
        encode("AckBatch", "billing", "prod", NOW, ("m-9",)),                   # 3 unsigned
        billing.seal(encode("Purge", "billing", "prod", NOW)),                  # 4 a peer's
        encode("Ack", "billing", "prod", NOW, ("m-8",)),                        # 5 unsignable
        # 6: an operator's Purge, but in txlog: only the purges topic carries Purges
        pki().signers["operator:alice"].seal(encode("Purge", "billing", "prod", NOW)),
    ]
    topic = settings.topic("txlog")
    try:
        assert ingest._apply([_Msg(topic, i, b"billing", v) for i, v in enumerate(values)]) \
            == len(values)
        assert [off for off, _ in store.records(0, 0, 10)] == [0, 2]
        assert store.db.get(ack_key(0, "billing", "m-1")) is not None
        assert store.db.get(ack_key(0, "billing", "m-9")) is None
        assert store.db.get(ack_key(0, "billing", "m-8")) is None
        assert [off for off, _ in letters.sent] == [1, 3, 4, 5, 6]
        assert letters.sent[-1][1] == PURGE_IN_TXLOG
        assert ingest.refused == {"environment": 1, "signature": 3} and ingest.poison == 1
        assert sorted(counted) == [("environment", 1), ("signature", 3)]
    finally:
        store.close()


def test_ingest_indexes_an_operators_purge_from_queues_and_refuses_others(
        tmp_path: Path) -> None:
    """A Purge reaches the replicas through queues (the job keeps the latest of each peer
    under its purge key): ingest writes its Purge index entry at the offset it reaches; one
    under another key, of another partition, of another environment or signed by a peer is
    dead-lettered and indexes nothing."""
    from tidemark.log.queue_state import purge_key
    from tidemark.log.settings import load_settings
    from tidemark.replica.ingest import Ingestor
    from tidemark.replica.keys import purge_prefix
    from tidemark.replica.store import Store
    settings = load_settings(env={"TIDEMARK_ENVIRONMENT": "prod"}, bootstrap="127.0.0.1:1",
                             topic_prefix="sg.", partitions=1)
    store = Store(tmp_path / "s", "n1")
    ingest = Ingestor(settings, store, "n1", admission=admission())
    ingest.consumer.close()
    ingest.deadletters.close()
    letters = ingest.deadletters = _Letters()  # type: ignore[assignment]
    ops, billing = pki().signers["operator:alice"], pki().signers["peer:prod:billing"]

    def purge(env: str = "prod", part: int = 0, below: int = 7) -> bytes:
        return C.encode("Purge", {"peer": "billing", "environment": env, "timestamp_ms": NOW,
                                  "txlog_partition": part, "below_offset": below,
                                  "signer": b"", "signature": b""})
    key = purge_key("billing").encode()
    msgs = [(key, ops.seal(purge())),                        # 0 indexed at 7
            (b"\0other", ops.seal(purge(below=9))),          # 1 another peer's key
            (key, ops.seal(purge(part=1, below=9))),         # 2 another partition
            (key, ops.seal(purge(env="staging", below=9))),  # 3 another environment
            (key, billing.seal(purge(below=9)))]             # 4 a peer's signature
    topic = settings.topic("queues")
    try:
        ingest._apply([_Msg(topic, i, k, v) for i, (k, v) in enumerate(msgs)])
        entries = [k for k, _ in store.db.iterator(prefix=purge_prefix(0))]
        assert entries == [purge_prefix(0) + b"billing\0" + (7).to_bytes(8, "big")]
        assert [off for off, _ in letters.sent] == [1, 2, 3, 4]
    finally:
        store.close()


def test_a_peers_acker_signs_its_ack_batches_and_failures() -> None:
    """What the peer's Acker appends with its transport's seal passes the admission."""
    from collections import Counter

    from tidemark.peer_client.acks import AckBatcher, Acker
    from tidemark.peer_client.records import Envelope
    seal = pki().signers["peer:prod:billing"].seal
    appended: list[bytes] = []

    class Log:
        def append(self, key: str, value: bytes, on_delivery: object = None) -> None:
            assert key == "billing"
            appended.append(value)

    acker = Acker("billing", "prod", AckBatcher(2, 10), log_port=Log(),  # type: ignore[arg-type]
                  encode_acks=AckBatchEncoder(C, "billing", "prod", seal).encode,
                  encode_record=C.encode, clock_ms=lambda: NOW, stats=Counter(), seal=seal)
    envs = [Envelope(f"m-{i}", "shop", "t", b"", NOW, True, "prod") for i in range(3)]
    acker.ack_many(envs[:2])
    acker.record_failure(envs[2], "boom", "handler")
    assert [C.decode(v).name for v in appended] == ["AckBatch", "DeliveryFailed"]
    assert [check(v) for v in appended] == [None, None]
    assert C.decode(appended[0]).record["message_ids"] == ["m-0", "m-1"]  # one signature
