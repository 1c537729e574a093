"""A controller started with a bad setting in its environment exits before it counts as started,
so ``spothop launch`` (which waits for it) says why at once instead of following a job no
controller will ever run."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.jobs.controller import daemon


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SPOTHOP_DEADLINE_TICK_S", "nan"),
        ("SPOTHOP_METRICS_PORT", "abc"),
        ("SPOTHOP_CATALOG_REFRESH_S", "-1"),
    ],
)
def test_a_bad_setting_fails_the_controller_start_naming_it(
    tmp_path: Path, variable: str, value: str
) -> None:
    home = tmp_path / "home"
    with pytest.raises(daemon.ControllerStartFailed) as failed:
        daemon.start_background(home, env={variable: value})
    assert variable in str(failed.value) and "before it started" in str(failed.value)
    assert daemon.status(home) is None  # nothing runs, nothing to stop
