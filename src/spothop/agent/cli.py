"""``python -m spothop.agent run [OPTIONS] -- CMD...``: the agent's own, light entry point.

``spothop agent run`` (the typer CLI) execs this, so the process that stays
resident on the instance loads only the standard library and this package,
not the whole command line (rich, typer, numpy). The options are those of
:data:`spothop.agent.options.OPTIONS`; their defaults come from the
environment the cloud gives (``SPOTHOP_METADATA_URL``, ``SPOTHOP_METADATA_PROTOCOL``,
``SPOTHOP_INSTANCE_ID``, ``SPOTHOP_CLOUD``, ``SPOTHOP_JOB_ID``, ``SPOTHOP_QUEUE_URL``,
``SPOTHOP_CHECKPOINT_URL``, ``SPOTHOP_CONTROL_PLANE``, ``SPOTHOP_AGENT_TOKEN``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from spothop.agent import model
from spothop.agent.config import AgentConfig
from spothop.agent.hooks import load_hook
from spothop.agent.options import OPTIONS
from spothop.agent.runtime import Agent
from spothop.controlplane.open import open_control_plane
from spothop.controlplane.queue_leases import queue_leases
from spothop.errors import ConfigError
from spothop.wire.errors import AgentConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spothop agent", description="The spothop on-instance agent."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="supervise CMD, watch for interruption notices, handle them")
    for option in OPTIONS:
        if option.type is bool:
            run.add_argument(option.flag, action="store_true", help=option.help)
        else:
            run.add_argument(
                option.flag,
                type=option.type,
                default=None,
                metavar=option.metavar,
                choices=option.choices() if option.choices else None,
                help=option.help,
            )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


def _with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Options not given take their table default now (so environment defaults are read at start)."""
    for option in OPTIONS:
        if getattr(args, option.dest) is None:
            setattr(args, option.dest, option.default_value())
    return args


def _mounts(text: str | None) -> tuple[dict[str, Any], ...]:
    from spothop.agent.mounts import parse_mounts

    if not text:
        return ()
    try:
        return tuple(parse_mounts(text))
    except ValueError as err:
        raise AgentConfigError(str(err)) from None


def config_from(args: argparse.Namespace) -> AgentConfig:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise AgentConfigError("no worker command: spothop agent run [OPTIONS] -- CMD ARGS...")
    if bool(args.code_url) != bool(args.code_sha256):
        raise AgentConfigError("--code-url and --code-sha256 go together: give both or neither")
    for option in OPTIONS:  # every number in its bound: finite, in range, named by its flag
        option.check(getattr(args, option.dest))
    from spothop.paths import path_under, plain_name, spothop_home

    # The instance id names the agent's folder and its records: a plain name, kept under $SPOTHOP_HOME/agent.
    plain_name(args.instance_id, "--instance-id (or $SPOTHOP_INSTANCE_ID, or the host name)")
    state_dir = args.state_dir or path_under(spothop_home() / "agent", args.instance_id)
    return AgentConfig(
        command=command,
        protocol=args.protocol,
        state_dir=state_dir,
        metadata_url=args.metadata_url,
        instance_id=args.instance_id,
        cloud=args.cloud or args.protocol,
        worker_id=args.worker_id or args.instance_id,
        job_id=args.job_id,
        queue_url=args.queue_url,
        checkpoint_url=args.checkpoint_url,
        poll_interval_s=args.poll_interval,
        safety_margin_s=args.safety_margin,
        restart_limit=args.restart_limit,
        restart_backoff_s=args.restart_backoff,
        assumed_lead_s=args.assumed_lead,
        sigterm_grace_s=args.sigterm_grace,
        heartbeat_interval_s=args.heartbeat_interval,
        requests_interval_s=args.requests_interval,
        rendezvous_timeout_s=args.rendezvous_timeout,
        probe_first_boot=not args.no_probe,
        code_url=args.code_url,
        code_sha256=args.code_sha256,
        workdir=args.workdir,
        mounts=_mounts(args.mounts),
        token=args.token,
    )


def agent_from(args: argparse.Namespace) -> Agent:
    config = config_from(_with_defaults(args))
    queue = queue_leases(config.queue_url, config.job_id)
    plane = open_control_plane(
        args.control_plane,
        instance_id=config.instance_id,
        state_dir=config.state_dir,
        token=args.token,
        queue=queue,
    )
    return Agent(
        config,
        plane=plane,
        queue=queue,
        releaser=load_hook(args.lease_releaser) if args.lease_releaser else None,
        upload=load_hook(args.upload) if args.upload else None,
        echo_json=args.json,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, build, run; a bad option is one line on stderr and exit code 2."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s spothop-agent %(levelname)s %(message)s",
    )
    args = build_parser().parse_args(argv)
    try:
        agent = agent_from(args)
    except (
        ConfigError
    ) as exc:  # an agent option, a name that is not plain, a SPOTHOP_HOME that is a file
        print(f"error: {exc}", file=sys.stderr)
        return model.EXIT_USAGE
    return agent.run()
