"""Every log line of a ``tidemark`` process is one valid JSON object, whatever the message
holds (quotes, newlines, control characters, non-ASCII, a traceback), with a UTC ``ts``."""

from __future__ import annotations

import io
import json
import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark import logs


def _lines(messages: list[str], with_traceback: bool) -> list[dict[str, object]]:
    buf = io.StringIO()
    root = logging.getLogger()
    saved = root.level, list(root.handlers), [h.level for h in root.handlers]
    for h in root.handlers:  # only the JSON handler writes to buf; pytest's stay attached
        h.setLevel(logging.CRITICAL + 1)
    logs.configure("DEBUG", stream=buf)
    log = logging.getLogger("tidemark.test")
    try:
        for i, m in enumerate(messages):
            if with_traceback and i % 3 == 0:
                try:
                    raise ValueError(m)
                except ValueError:
                    log.exception("failed: %s", m)
            else:
                log.warning("%s", m, extra={"peer": m[:8]})
    finally:
        for h in list(root.handlers):
            if h not in saved[1]:
                root.removeHandler(h)
        for h, level in zip(saved[1], saved[2], strict=True):
            h.setLevel(level)
        root.setLevel(saved[0])
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_ten_thousand_lines_with_tracebacks_parse() -> None:
    msgs = [f'msg {i} "quoted" \\ back\nnew line\ttab \x01 é' for i in range(10_000)]
    rows = _lines(msgs, with_traceback=True)
    assert len(rows) == 10_000
    assert sum("exc_info" in r for r in rows) == 3334
    assert all(str(r["ts"]).endswith("Z") and r["logger"] == "tidemark.test" for r in rows)
    assert rows[1]["msg"] == msgs[1] and rows[1]["peer"] == msgs[1][:8]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=5), st.booleans())
def test_any_message_is_one_json_line(messages: list[str], tb: bool) -> None:
    rows = _lines(messages, tb)
    assert len(rows) == len(messages)
    for r, m in zip(rows, messages, strict=True):
        assert m in str(r["msg"])
