"""``$SPOTHOP_DEADLINE_TICK_S``, the controller's deadline tick, checked where it is read. The
deadline job under the real controller is tests/jobs/e2e/test_deadline.py."""

from __future__ import annotations

import pytest

from spothop.errors import ConfigError
from spothop.jobs.controller.config import DEADLINE_TICK_ENV, config_from_env


def test_the_deadline_tick_variable_is_checked() -> None:
    assert config_from_env({}) is None
    config = config_from_env({DEADLINE_TICK_ENV: "2.5"})
    assert config is not None and config.deadline_tick_s == 2.5
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(ConfigError, match=DEADLINE_TICK_ENV):
            config_from_env({DEADLINE_TICK_ENV: bad})
