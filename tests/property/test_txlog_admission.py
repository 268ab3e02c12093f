"""The txlog admission (gossip/txlog_admission.py) against reference models: the environment
filter, and who may sign what, over records signed by peers, operators, a revoked peer, a
certificate of an untrusted CA, tampered records and records outside the signer's validity,
with two CAs trusted at once (a rotation)."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.pki_fixtures import ENVS, PEERS, encode, pki
from tidemark.gossip.txlog_admission import (
    ENVIRONMENT,
    SIGNATURE,
    TXLOG_RECORDS,
    TxlogAdmission,
    environment_refusal,
)
from tidemark.log.wire import default_codec

NAMES = st.sampled_from((*TXLOG_RECORDS, "QueueEntry", "PeerDescriptor"))
ENV = st.sampled_from(("prod", "staging", "", "prod ", "Prod"))


@given(NAMES, ENV, ENV, st.booleans())
def test_environment_filter_matches_the_model(name: str, record_env: str, mine: str,
                                              missing: bool) -> None:
    record = {} if missing else {"environment": record_env}
    got = environment_refusal(name, record, mine)
    in_txlog = name in TXLOG_RECORDS
    expected_refused = in_txlog and (missing or record_env != mine)
    assert (got is not None) == expected_refused
    if got is not None:
        assert got.kind == ENVIRONMENT and name in got.reason


SIGNER_LABELS = st.sampled_from((None, "peer:prod:billing", "peer:prod:shipping",
                                 "peer:staging:billing", "peer2:prod:billing",
                                 "peer2:staging:shipping", "operator:alice",
                                 "revoked:prod:billing", "untrusted:prod:billing"))
TAMPER = st.sampled_from(("none", "signature", "record", "append"))


def model(name: str, peer: str, env: str, mine: str, label: str | None, tamper: str,
          valid_time: bool) -> str | None:
    """The reference: what a component of environment ``mine`` (secure) does."""
    if env != mine:
        return ENVIRONMENT
    if name == "Send":
        return None
    if name == "Ack" or label is None or tamper != "none" or not valid_time:
        return SIGNATURE
    kind = label.split(":")[0]
    if kind in ("revoked", "untrusted"):
        return SIGNATURE
    if name == "Purge":
        return None if kind == "operator" else SIGNATURE
    return None if kind in ("peer", "peer2") and label.split(":")[1:] == [env, peer] \
        else SIGNATURE


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(TXLOG_RECORDS), st.sampled_from(PEERS), st.sampled_from(ENVS),
       st.sampled_from(ENVS), SIGNER_LABELS, TAMPER, st.booleans(), st.data())
def test_secure_admission_matches_the_model(name: str, peer: str, env: str, mine: str,
                                            label: str | None, tamper: str, valid_time: bool,
                                            data: st.DataObject) -> None:
    p = pki()
    now = int(time.time() * 1000)
    ts = now if valid_time else now + 40 * 86_400_000  # after every certificate expired
    value = encode(name, peer, env, ts)
    signable = name in ("AckBatch", "Purge", "DeliveryFailed")
    if label is not None and signable:
        value = p.signers[label].seal(value)
        if tamper == "signature":
            i = len(value) - data.draw(st.integers(1, 8))
            value = value[:i] + bytes([value[i] ^ 0x01]) + value[i + 1:]
        elif tamper == "record":  # the peer field's last character changed after signing
            at = value.index(peer.encode()) + len(peer) - 1
            value = value[:at] + b"X" + value[at + 1:]
        elif tamper == "append":
            value = value + b"\x00"
    elif signable or name == "Ack":
        label = None  # unsigned
    try:
        record = default_codec().decode(value).record
    except Exception:  # a tampered value that no longer decodes: dead-lettered as poison
        return
    got = TxlogAdmission(mine, p.verifier()).check(name, record, value)
    if tamper == "record" and label is not None and signable:
        # the record now names another peer (billinX...): never applied either way
        assert got is not None
        return
    expected = model(name, peer, env, mine, label if signable else None, tamper,
                     valid_time)
    assert (got.kind if got else None) == expected, (got, label, tamper)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TXLOG_RECORDS), st.sampled_from(PEERS), st.sampled_from(ENVS),
       st.sampled_from(ENVS))
def test_insecure_admission_only_filters_environments(name: str, peer: str, env: str,
                                                      mine: str) -> None:
    value = encode(name, peer, env, int(time.time() * 1000))
    record = default_codec().decode(value).record
    got = TxlogAdmission(mine, None).check(name, record, value)
    assert (got.kind if got else None) == (ENVIRONMENT if env != mine else None)
    assert SIGNATURE != ENVIRONMENT
