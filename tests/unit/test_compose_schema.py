"""docker-compose.yml against the Compose Specification's JSON schema (tests/data/
compose-spec.json, vendored from compose-go; its source: tests/data/compose-spec.SOURCE)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests" / "data" / "compose-spec.json").read_text())


def _errors(doc: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(doc)]


def test_compose_file_is_valid_compose() -> None:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert _errors(doc) == []


def test_the_schema_catches_a_mistake() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    bad = copy.deepcopy(doc)
    bad["services"]["p0r0"]["healthcheck"]["intervall"] = "5s"
    assert _errors(bad)
    bad = copy.deepcopy(doc)
    bad["services"]["topic-init"]["depends_on"]["kafka-1"]["condition"] = "service_ready"
    assert _errors(bad)
