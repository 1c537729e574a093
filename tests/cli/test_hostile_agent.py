"""Hostile input to ``spothop agent run``: one clear line with exit 2, never a traceback.

``spothop agent run`` execs the light agent, so these rows run the light agent's
own entry point in-process (``spothop.agent.cli.main``).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

AGENT = [
    (["run", "--instance-id", "../../etc", "--", "true"], "is not a plain name"),
    (["run", "--instance-id", "a/b", "--", "true"], "is not a plain name"),
    (["run", "--instance-id", "", "--", "true"], "is not a plain name"),
    (["run", "--instance-id", "[/x]", "--", "true"], "'[/x]'"),
    (["run", "--protocol", "[red]ibm", "--", "true"], "invalid choice: '[red]ibm'"),
    (["run", "--instance-id", "ok"], "no worker command"),
    (["run", "--instance-id", "ok", "--poll-interval", "nan", "--", "true"], "--poll-interval"),
    (["run", "--instance-id", "ok", "--safety-margin", "inf", "--", "true"], "--safety-margin"),
    (["run", "--instance-id", "ok", "--poll-interval", "1e9", "--", "true"], "at most 60 s"),
    (
        ["run", "--instance-id", "ok", "--heartbeat-interval", "-1", "--", "true"],
        "--heartbeat-interval",
    ),
]


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Any:
    """A row the agent wrongly accepts runs the agent in this process; it must not keep its handlers."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(("argv", "message"), AGENT)
def test_agent_refuses_hostile_options_clearly(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spothop.agent.cli import main

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path))
    try:
        code = main(argv)
    except SystemExit as usage:  # argparse's own usage error: its message, exit 2
        code = usage.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert "error:" in err and message in err and "Traceback" not in err
    assert not (tmp_path.parent / "etc").exists() and not (tmp_path / "a").exists()


def test_agent_refuses_a_home_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.agent.cli import main

    (tmp_path / "home").write_text("")
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    assert main(["run", "--instance-id", "ok", "--", "true"]) == 2
    assert "is a file" in capsys.readouterr().err
