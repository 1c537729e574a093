"""Hostile input to ``spothop ckpt`` and ``spothop agent``: one clear line with its exit code, never a traceback.

Two modules' worth of rows in one table each: ``ckpt`` runs in-process; ``agent run`` execs the
light agent, so its rows run the light agent's own entry point in-process (``spothop.agent.cli.main``).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import ConfigError, NotFoundError
from tests.cli.hostile import Row, rows, run_row, xfail_owner


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_bytes(b"\x00\xffnot a checkpoint folder")
    (tmp_path / "empty").mkdir()
    markup = tmp_path / "m[" / "x] [red]y[bold]"
    markup.mkdir(parents=True)
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "manifest.json").write_bytes(b"\x89PNG\x00\xff")
    return {"missing": str(tmp_path / "nowhere"), "file": str(tmp_path / "file"), "empty": str(tmp_path / "empty"),
            "markup": str(markup), "garbage": str(tmp_path / "garbage")}


CKPT = rows(
    Row("ls-missing", ["ckpt", "ls", "{missing}"], 3, NotFoundError, "nowhere"),
    Row("ls-a-file", ["ckpt", "ls", "{file}"], 2, ConfigError),
    Row("ls-empty", ["ckpt", "ls", "{empty}"], 0),
    Row("ls-markup", ["ckpt", "ls", "{markup}"], 0, None, "[red]y[bold]"),  # the title may wrap: part of the name
    Row("verify-missing", ["ckpt", "verify", "{missing}"], 3, NotFoundError, "nowhere"),
    Row("verify-garbage", ["ckpt", "verify", "{garbage}"], 0),
    Row("show-unknown-id", ["ckpt", "show", "{empty}", "--id", "[/x]"], 3, NotFoundError),
    Row("gc-negative-keep", ["ckpt", "gc", "{empty}", "--keep", "-1"], 2, ConfigError),
    Row("ls-bad-url", ["ckpt", "ls", "nosuchscheme://[red]bucket"], 2, ConfigError, "[red]bucket"),
)


@pytest.mark.parametrize("row", CKPT)
def test_ckpt_refuses_hostile_input_clearly(row: Row, files: dict[str, str], capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run_row(row, files, capsys, monkeypatch)


AGENT = [
    (["run", "--instance-id", "../../etc", "--", "true"], "is not a plain name"),
    (["run", "--instance-id", "a/b", "--", "true"], "is not a plain name"),
    (["run", "--instance-id", "", "--", "true"], "is not a plain name"),
    (["run", "--instance-id", "[/x]", "--", "true"], "'[/x]'"),
    (["run", "--protocol", "[red]ibm", "--", "true"], "invalid choice: '[red]ibm'"),
    (["run", "--instance-id", "ok"], "no worker command"),
    pytest.param(["run", "--instance-id", "ok", "--poll-interval", "nan", "--", "true"], "--poll-interval",
                 marks=xfail_owner("ctlplane", "agent options: a NaN --poll-interval is accepted")),
    pytest.param(["run", "--instance-id", "ok", "--safety-margin", "inf", "--", "true"], "--safety-margin",
                 marks=xfail_owner("ctlplane", "agent options: an infinite --safety-margin is accepted")),
    pytest.param(["run", "--instance-id", "ok", "--heartbeat-interval", "-1", "--", "true"], "--heartbeat-interval",
                 marks=xfail_owner("ctlplane", "agent options: a negative --heartbeat-interval is accepted")),
]


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Any:
    """A row the agent wrongly accepts runs the agent in this process; it must not keep its handlers."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(("argv", "message"), AGENT)
def test_agent_refuses_hostile_options_clearly(argv: list[str], message: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_agent_refuses_a_home_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from spothop.agent.cli import main

    (tmp_path / "home").write_text("")
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    assert main(["run", "--instance-id", "ok", "--", "true"]) == 2
    assert "is a file" in capsys.readouterr().err
