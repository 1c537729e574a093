"""``spothop agent run [OPTIONS] -- CMD...``: the on-instance agent.

The command execs ``python -m spothop.agent run`` with the same options, so
the process that stays resident on the instance is the light agent (standard
library only), not the whole command line. Options the agent has beyond
those listed here pass through unchanged (``python -m spothop.agent run --help``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

agent_app = typer.Typer(help="The on-instance spot agent: notices, worker supervision, the emergency protocol.",
                        no_args_is_help=True)


@agent_app.command(
    "run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def run_command(
    ctx: typer.Context,
    protocol: Annotated[str | None, typer.Option("--protocol", help="aws, gcp, azure, aliyun, tencent, volcengine or sigterm (default: $SPOTHOP_METADATA_PROTOCOL)")] = None,
    metadata_url: Annotated[str | None, typer.Option("--metadata-url", help="metadata endpoint (default: $SPOTHOP_METADATA_URL)")] = None,
    poll_interval: Annotated[float | None, typer.Option("--poll-interval", help="seconds between notice polls (default 1)")] = None,
    safety_margin: Annotated[float | None, typer.Option("--safety-margin", help="seconds kept back from the worker's save (default 5)")] = None,
    restart_limit: Annotated[int | None, typer.Option("--restart-limit", help="restarts after a crash (default 3)")] = None,
    state_dir: Annotated[Path | None, typer.Option("--state-dir", help="events, status, logs, control folder")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print each event as a JSON status line")] = False,
) -> None:
    """Supervise CMD; on an interruption notice stop it, release its leases, record it, exit 75."""
    argv = [sys.executable, "-m", "spothop.agent", "run"]
    for flag, value in (("--protocol", protocol), ("--metadata-url", metadata_url),
                        ("--poll-interval", poll_interval), ("--safety-margin", safety_margin),
                        ("--restart-limit", restart_limit), ("--state-dir", state_dir)):
        if value is not None:
            argv += [flag, str(value)]
    if as_json:
        argv.append("--json")
    extra = list(ctx.args)
    if "--" not in extra:
        extra.insert(next((i for i, a in enumerate(extra) if not a.startswith("-")), len(extra)), "--")
    os.execv(sys.executable, argv + extra)


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")
