"""The payload-copy bench on real LevelDB (small, not timed): both layouts replay the same
messages, and the reference layout writes and keeps fewer bytes per message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemark.bench import payload_copy as bench


def test_both_layouts_replay_every_payload_and_the_reference_stores_less() -> None:
    out = bench.payload_copy(messages=300, payload_bytes=200, share=0.5, rounds=1)
    copy, ref = out["per_message"]["copy"], out["per_message"]["reference"]
    # one payload fewer per queued message (200 B), less the span it stores instead
    assert copy["written_bytes"] - ref["written_bytes"] > 150
    assert out["reference_over_copy"]["written_bytes"] < 1


def test_the_replays_read_the_same_bytes(tmp_path: Path) -> None:
    import plyvel
    records = bench._records(50, 64, 0.5)
    totals = []
    for reference in (False, True):
        db = plyvel.DB(str(tmp_path / str(reference)), create_if_missing=True)
        bench._write(db, records, reference)
        totals.append(bench._replay(db, reference))
        db.close()
    assert totals[0] == totals[1] >= 50 * 64


def test_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--messages", "100", "--rounds", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["per_message"]) == {"copy", "reference"}


def test_cli_refuses_a_bad_share() -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--share", "0"])
    assert exc.value.code == 2
