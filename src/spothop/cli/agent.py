"""``spothop agent run [OPTIONS] -- CMD...``: the on-instance agent.

The command execs ``python -m spothop.agent run`` with the same options, so
the process that stays resident on the instance is the light agent (standard
library only), not the whole command line. Every option of the light agent is
declared here too, so ``--help`` documents each one and each is passed
through as given (``tests/agent/test_review_cli.py`` keeps the two lists equal).
Defaults are left to the light agent, which reads them from the environment
the cloud gives.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

agent_app = typer.Typer(help="The on-instance spot agent: notices, worker supervision, the emergency protocol.",
                        no_args_is_help=True)

_PROTOCOLS = "aws, gcp, azure, aliyun, tencent, volcengine or sigterm"


@agent_app.command("run", context_settings={"allow_interspersed_args": False})
def run_command(
    command: Annotated[list[str] | None, typer.Argument(help="the worker command and its arguments (after --)", metavar="-- CMD...")] = None,
    protocol: Annotated[str | None, typer.Option("--protocol", help=f"{_PROTOCOLS} (default: $SPOTHOP_METADATA_PROTOCOL, else sigterm)")] = None,
    metadata_url: Annotated[str | None, typer.Option("--metadata-url", help="metadata endpoint base URL (default: $SPOTHOP_METADATA_URL)")] = None,
    poll_interval: Annotated[float | None, typer.Option("--poll-interval", help="seconds between notice polls (default: the protocol's, e.g. 0.2 on aws, 0.25 on azure)")] = None,
    safety_margin: Annotated[float | None, typer.Option("--safety-margin", help="seconds kept back from the worker's save for upload, release and record (default 5)")] = None,
    restart_limit: Annotated[int | None, typer.Option("--restart-limit", help="restarts after a crash (default 3)")] = None,
    restart_backoff: Annotated[float | None, typer.Option("--restart-backoff", help="seconds before the first restart, doubling after (default 1)")] = None,
    assumed_lead: Annotated[float | None, typer.Option("--assumed-lead", help="lead time of a notice that carries no time (default: the cloud's documented lead)")] = None,
    sigterm_grace: Annotated[float | None, typer.Option("--sigterm-grace", help="the lead a SIGTERM to the agent stands for (default 30, Kubernetes' grace)")] = None,
    state_dir: Annotated[Path | None, typer.Option("--state-dir", help="events, status, logs, control folder (default: $SPOTHOP_HOME/agent/INSTANCE_ID)")] = None,
    instance_id: Annotated[str | None, typer.Option("--instance-id", help="default: $SPOTHOP_INSTANCE_ID, else the host name")] = None,
    cloud: Annotated[str | None, typer.Option("--cloud", help="cloud name for the records (default: $SPOTHOP_CLOUD, else the protocol)")] = None,
    worker_id: Annotated[str | None, typer.Option("--worker-id", help="the worker's queue identity (default: the instance id)")] = None,
    job_id: Annotated[str | None, typer.Option("--job-id", help="default: $SPOTHOP_JOB_ID")] = None,
    queue_url: Annotated[str | None, typer.Option("--queue-url", help="shard queue whose leases are released on a notice (default: $SPOTHOP_QUEUE_URL)")] = None,
    checkpoint_url: Annotated[str | None, typer.Option("--checkpoint-url", help="default: $SPOTHOP_CHECKPOINT_URL")] = None,
    heartbeat_sqlite: Annotated[Path | None, typer.Option("--heartbeat-sqlite", help="embedded mode: heartbeat rows in this SQLite file")] = None,
    heartbeat_url: Annotated[str | None, typer.Option("--heartbeat-url", help="server mode: POST heartbeats here")] = None,
    heartbeat_interval: Annotated[float | None, typer.Option("--heartbeat-interval", help="seconds between heartbeats (default 10)")] = None,
    lease_releaser: Annotated[str | None, typer.Option("--lease-releaser", metavar="MODULE:FACTORY", help="hook that releases the worker's leases (default: the queue's)")] = None,
    upload: Annotated[str | None, typer.Option("--upload", metavar="MODULE:FACTORY", help="hook that uploads what is still local after the worker's save")] = None,
    no_store_record: Annotated[bool, typer.Option("--no-store-record", help="do not record the interruption in spothop's store (events.jsonl only)")] = False,
    no_probe: Annotated[bool, typer.Option("--no-probe", help="skip the first-boot GPU probe of this instance type")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print each event as a JSON status line")] = False,
) -> None:
    """Supervise CMD; on an interruption notice stop it, release its leases, record it, exit 75."""
    argv = [sys.executable, "-m", "spothop.agent", "run"]
    valued: tuple[tuple[str, object], ...] = (
        ("--protocol", protocol), ("--metadata-url", metadata_url), ("--poll-interval", poll_interval),
        ("--safety-margin", safety_margin), ("--restart-limit", restart_limit),
        ("--restart-backoff", restart_backoff), ("--assumed-lead", assumed_lead),
        ("--sigterm-grace", sigterm_grace), ("--state-dir", state_dir), ("--instance-id", instance_id),
        ("--cloud", cloud), ("--worker-id", worker_id), ("--job-id", job_id), ("--queue-url", queue_url),
        ("--checkpoint-url", checkpoint_url), ("--heartbeat-sqlite", heartbeat_sqlite),
        ("--heartbeat-url", heartbeat_url), ("--heartbeat-interval", heartbeat_interval),
        ("--lease-releaser", lease_releaser), ("--upload", upload),
    )
    for flag, value in valued:
        if value is not None:
            argv += [flag, str(value)]
    for flag, on in (("--no-store-record", no_store_record), ("--no-probe", no_probe), ("--json", as_json)):
        if on:
            argv.append(flag)
    os.execv(sys.executable, [*argv, "--", *(command or [])])


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")
