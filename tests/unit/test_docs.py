"""The docs stay in step with the code and stand on their own.

* docs/cli.md's settings table is exactly :func:`tidemark.log.registry.markdown_table`.
* README.md and docs/ link to nothing outside the repository and cite no tracker.
* docs/design.md exists.
* Every ``TIDEMARK_*`` variable the docs name is declared in the settings registry (or is a
  ``TIDEMARK_KAFKA_<NAME>`` client passthrough).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidemark.log.registry import KAFKA_CLIENT_PREFIX, SETTINGS, markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_the_settings_table_is_the_registry_table() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, \
        f"docs/cli.md needs exactly one {BEGIN} ... {END} block"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    assert table == markdown_table(), (
        "docs/cli.md's settings table differs from the registry; regenerate it with\n"
        "  .venv/bin/python -c 'from tidemark.log.registry import markdown_table;"
        " print(markdown_table())'")


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_are_self_contained(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    bad = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
           if "shared/" in line
           or re.search(r"\bissues?\b", line.replace("ca issue", ""), re.IGNORECASE)]
    assert not bad, f"{path.name} refers to something a user of the repo does not have: {bad}"


def test_design_doc_exists() -> None:
    assert (DOCS / "design.md").is_file()


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_documented_variables_are_declared(path: Path) -> None:
    declared = {s.env for s in SETTINGS}
    named = set(re.findall(r"TIDEMARK_[A-Z_]+", path.read_text(encoding="utf-8")))
    unknown = sorted(v for v in named
                     if v not in declared and not v.startswith(KAFKA_CLIENT_PREFIX))
    assert not unknown, f"{path.name} names variables the registry does not declare: {unknown}"
