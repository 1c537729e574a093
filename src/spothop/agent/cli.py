"""``python -m spothop.agent run [OPTIONS] -- CMD...``: the agent's own, light entry point.

``spothop agent run`` (the typer CLI) execs this, so the process that stays
resident on the instance loads only the standard library and this package,
not the whole command line (rich, typer, numpy). Options default from the
environment the cloud gives (``SPOTHOP_METADATA_URL``, ``SPOTHOP_METADATA_PROTOCOL``,
``SPOTHOP_INSTANCE_ID``, ``SPOTHOP_CLOUD``, ``SPOTHOP_JOB_ID``, ``SPOTHOP_QUEUE_URL``,
``SPOTHOP_CHECKPOINT_URL``).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from spothop.agent import config as defaults
from spothop.agent import model
from spothop.agent.config import AgentConfig
from spothop.agent.errors import AgentConfigError
from spothop.agent.heartbeat import Heartbeats, HttpHeartbeats, SqliteHeartbeats
from spothop.agent.hooks import InterruptionRecorder, StoreInterruptions, load_hook
from spothop.agent.notices import WATCHERS
from spothop.agent.notices.sigterm import KUBERNETES_GRACE_S
from spothop.agent.queue_release import queue_releaser
from spothop.agent.runtime import Agent
from spothop.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spothop agent", description="The spothop on-instance agent.")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="supervise CMD, watch for interruption notices, handle them")
    env = os.environ.get
    run.add_argument("--protocol", choices=sorted(WATCHERS), default=env(model.METADATA_PROTOCOL_ENV) or "sigterm",
                     help="notice protocol (default: $SPOTHOP_METADATA_PROTOCOL, else sigterm)")
    run.add_argument("--metadata-url", default=env(model.METADATA_URL_ENV),
                     help="metadata endpoint base URL (default: $SPOTHOP_METADATA_URL)")
    run.add_argument("--poll-interval", type=float, default=None, metavar="S",
                     help="seconds between notice polls (default: the protocol's, e.g. 0.2 on aws, 0.25 on azure)")
    run.add_argument("--safety-margin", type=float, default=defaults.DEFAULT_SAFETY_MARGIN_S, metavar="S",
                     help="seconds kept back from the worker's save for upload, release and record")
    run.add_argument("--restart-limit", type=int, default=defaults.DEFAULT_RESTART_LIMIT, metavar="N",
                     help="restarts after a crash (default %(default)s)")
    run.add_argument("--restart-backoff", type=float, default=defaults.DEFAULT_RESTART_BACKOFF_S, metavar="S",
                     help="seconds before the first restart, doubling after (default %(default)s)")
    run.add_argument("--assumed-lead", type=float, default=None, metavar="S",
                     help="lead time of a notice that carries no time (default: the cloud's documented lead)")
    run.add_argument("--sigterm-grace", type=float, default=KUBERNETES_GRACE_S, metavar="S",
                     help="the lead a SIGTERM to the agent stands for")
    run.add_argument("--state-dir", type=Path, default=None, help="events, status, logs, control folder")
    run.add_argument("--instance-id", default=env(model.INSTANCE_ID_ENV) or socket.gethostname(),
                     help="default: $SPOTHOP_INSTANCE_ID, else the host name")
    run.add_argument("--cloud", default=env(model.CLOUD_ENV),
                     help="cloud name for the records (default: $SPOTHOP_CLOUD, else the protocol)")
    run.add_argument("--worker-id", default=None, help="default: the instance id")
    run.add_argument("--job-id", default=env(model.JOB_ID_ENV), help="default: $SPOTHOP_JOB_ID")
    run.add_argument("--queue-url", default=env(model.QUEUE_URL_ENV),
                     help="shard queue whose leases are released on a notice (default: $SPOTHOP_QUEUE_URL)")
    run.add_argument("--checkpoint-url", default=env(model.CHECKPOINT_URL_ENV), help="default: $SPOTHOP_CHECKPOINT_URL")
    run.add_argument("--heartbeat-sqlite", type=Path, default=None, help="embedded mode: heartbeat rows here")
    run.add_argument("--heartbeat-url", default=None, help="server mode: POST heartbeats here")
    run.add_argument("--heartbeat-interval", type=float, default=defaults.DEFAULT_HEARTBEAT_INTERVAL_S, metavar="S",
                     help="seconds between heartbeats (default %(default)s)")
    run.add_argument("--lease-releaser", default=None, metavar="MODULE:FACTORY",
                     help="hook that releases the worker's leases (default: the queue's)")
    run.add_argument("--upload", default=None, metavar="MODULE:FACTORY",
                     help="hook that uploads what is still local after the worker's save")
    run.add_argument("--no-store-record", action="store_true",
                     help="do not record the interruption in spothop's store (events.jsonl only)")
    run.add_argument("--no-probe", action="store_true",
                     help="skip the first-boot GPU probe of this instance type")
    run.add_argument("--json", action="store_true", help="print each event as a JSON line on stdout")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


def config_from(args: argparse.Namespace) -> AgentConfig:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise AgentConfigError("no worker command: spothop agent run [OPTIONS] -- CMD ARGS...")
    if (args.poll_interval is not None and args.poll_interval <= 0) or args.safety_margin < 0 or args.restart_limit < 0:
        raise AgentConfigError("--poll-interval must be > 0; --safety-margin and --restart-limit must be ≥ 0")
    from spothop.paths import path_under, plain_name, spothop_home

    # The instance id names the agent's folder and its records: a plain name, kept under $SPOTHOP_HOME/agent.
    plain_name(args.instance_id, "--instance-id (or $SPOTHOP_INSTANCE_ID, or the host name)")
    state_dir = args.state_dir or path_under(spothop_home() / "agent", args.instance_id)
    return AgentConfig(
        command=command, protocol=args.protocol, state_dir=state_dir, metadata_url=args.metadata_url,
        instance_id=args.instance_id, cloud=args.cloud or args.protocol, worker_id=args.worker_id or args.instance_id,
        job_id=args.job_id, queue_url=args.queue_url, checkpoint_url=args.checkpoint_url,
        poll_interval_s=args.poll_interval, safety_margin_s=args.safety_margin, restart_limit=args.restart_limit,
        restart_backoff_s=args.restart_backoff, assumed_lead_s=args.assumed_lead,
        sigterm_grace_s=args.sigterm_grace, heartbeat_interval_s=args.heartbeat_interval,
        probe_first_boot=not args.no_probe)


def agent_from(args: argparse.Namespace) -> Agent:
    config = config_from(args)
    heartbeats: Heartbeats | None = None
    if args.heartbeat_url:
        heartbeats = HttpHeartbeats(args.heartbeat_url)
    elif args.heartbeat_sqlite:
        heartbeats = SqliteHeartbeats(args.heartbeat_sqlite)
    recorders: list[InterruptionRecorder] = [] if args.no_store_record else [StoreInterruptions()]
    releaser = load_hook(args.lease_releaser) if args.lease_releaser else queue_releaser(args.queue_url, args.job_id)
    return Agent(config, releaser=releaser,
                 upload=load_hook(args.upload) if args.upload else None, recorders=recorders,
                 heartbeats=heartbeats, echo_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, build, run; a bad option is one line on stderr and exit code 2."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s spothop-agent %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        agent = agent_from(args)
    except ConfigError as exc:  # an agent option, a name that is not plain, a SPOTHOP_HOME that is a file
        print(f"error: {exc}", file=sys.stderr)
        return model.EXIT_USAGE
    return agent.run()
