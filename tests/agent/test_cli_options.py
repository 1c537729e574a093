"""``spothop agent run`` documents and passes through every option of the light agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer.main

from spothop.agent import read_events
from spothop.agent.cli import build_parser
from spothop.cli.agent import agent_app
from tests.controlplane.control_server import ControlServer


def _light_options() -> set[str]:
    run = next(a for a in build_parser()._actions if a.dest == "action").choices["run"]  # type: ignore[union-attr,index]
    return {
        flag for action in run._actions for flag in action.option_strings if flag.startswith("--")
    } - {"--help"}


def test_the_wrapper_declares_every_option_of_the_light_agent() -> None:
    group = typer.main.get_command(agent_app)
    command = getattr(group, "commands", {}).get("run", group)  # one command: typer returns it bare
    declared = {flag for param in command.params for flag in param.opts if flag.startswith("--")}
    declared -= {"--install-completion", "--show-completion"}  # typer's own, on a bare command
    assert declared == _light_options()
    assert all(getattr(p, "help", None) for p in command.params if p.opts[0] in declared)


def test_valued_options_reach_the_agent_and_the_command_stays_whole(tmp_path: Path) -> None:
    state = tmp_path / "agent"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spothop.cli.main",
            "agent",
            "run",
            "--protocol",
            "sigterm",
            "--no-probe",
            "--state-dir",
            str(state),
            "--job-id",
            "job-7",
            "--worker-id",
            "w-3",
            "--restart-limit",
            "0",
            "--",
            "sh",
            "-c",
            'test "$SPOTHOP_JOB_ID" = job-7',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (started,) = read_events(state, "worker_started")
    assert started["worker_id"] == "w-3"
    assert started["command"] == ["sh", "-c", 'test "$SPOTHOP_JOB_ID" = job-7']
    assert [e["code"] for e in read_events(state, "worker_exited")] == [0]


def test_the_help_lists_every_option() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spothop.cli.main", "agent", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    missing = sorted(flag for flag in _light_options() if flag not in done.stdout)
    assert missing == []


def test_the_token_reaches_the_agent_in_its_environment_never_its_command_line_nor_the_worker(
    tmp_path: Path,
) -> None:
    state = tmp_path / "agent"
    script = f'tr "\\0" " " < /proc/$PPID/cmdline > {tmp_path}/argv; echo "${{SPOTHOP_AGENT_TOKEN:-}}" > {tmp_path}/env'
    with ControlServer(f"sqlite:///{tmp_path / 'store.db'}", token="tok-zz9") as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "spothop.cli.main",
                "agent",
                "run",
                "--protocol",
                "sigterm",
                "--no-probe",
                "--control-plane",
                server.url,
                "--token",
                "tok-zz9",
                "--state-dir",
                str(state),
                "--",
                "sh",
                "-c",
                script,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert server.received and all(
        h["Authorization"] == "Bearer tok-zz9" for _, _, h, _ in server.received
    )
    argv = (tmp_path / "argv").read_text()
    assert "spothop.agent run" in argv and f"--control-plane {server.url}" in argv
    assert "tok-zz9" not in argv and (tmp_path / "env").read_text().strip() == ""
    assert "tok-zz9" not in done.stderr + (state / "events.jsonl").read_text()
