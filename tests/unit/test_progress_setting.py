"""``TIDEMARK_PROGRESS`` means what it says: true shows progress, false hides it (even on a
terminal), unset leaves it to whether stderr is a terminal, anything else is one clear error."""

from __future__ import annotations

import pytest

from tidemark.log.exceptions import ConfigError
from tidemark.log.load import progress_wanted


@pytest.mark.parametrize("value, tty, wanted", [
    ("1", False, True), ("true", False, True), ("on", False, True),
    ("0", True, False), ("false", True, False), ("FALSE", False, False), ("off", True, False),
    (None, True, True), (None, False, False), ("", True, True), ("", False, False),
])
def test_progress_follows_the_setting_else_the_terminal(value: str | None, tty: bool,
                                                        wanted: bool) -> None:
    env = {} if value is None else {"TIDEMARK_PROGRESS": value}
    assert progress_wanted(env, tty) is wanted


def test_a_value_that_is_not_a_boolean_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="TIDEMARK_PROGRESS: must be true or false"):
        progress_wanted({"TIDEMARK_PROGRESS": "maybe"}, False)
