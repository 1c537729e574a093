"""The agent's options, declared once: both entry points are built from :data:`OPTIONS`.

``python -m spothop.agent run`` (argparse, :mod:`spothop.agent.cli`) and
``spothop agent run`` (typer, :mod:`spothop.cli.agent`, which execs the
former) read this one table, so a new option is one row here. Standard
library only: the light agent imports it. Choices and help text that depend
on what is registered (the notice protocols) come from the registry, never
from a typed-out list.

``default`` is what the light agent uses when the option is not given (a
callable is called then: defaults read from the environment the cloud
gives). The typer wrapper passes only what was given, so defaults are
decided in one place. A ``secret`` option (the token) is handed to the light
agent through its environment variable, never on its command line, where
``ps`` would show it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spothop.agent import config as defaults
from spothop.agent import model
from spothop.agent.notices import WATCHERS
from spothop.agent.notices.sigterm import KUBERNETES_GRACE_S
from spothop.bounds import DURATION_S, LEAD_TIME_S, POLL_INTERVAL_S, Bound
from spothop.controlplane.open import NONE, TOKEN_ENV
from spothop.worker import channel

CONTROL_PLANE_ENV = "SPOTHOP_CONTROL_PLANE"
RESTARTS = Bound(
    0, 1_000, "restarts", integer=True
)  # a worker that crashed a thousand times will not recover
HEARTBEAT_INTERVAL_S = Bound(
    0, 3_600, "s", low_open=True
)  # an hour between beats is already "lost"


@dataclass(frozen=True)
class Option:
    """One ``--flag``: its value's type (``bool`` for a switch), help, default, and where it may come from."""

    flag: str
    help: str
    type: type = str
    default: Any = None  # or a zero-argument callable, called when the option is not given
    metavar: str | None = None
    choices: Callable[[], list[str]] | None = None
    env: str | None = None  # the variable a secret is passed in
    secret: bool = False
    bound: Bound | None = None  # a number's range (spothop.bounds), checked by check()

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def default_value(self) -> Any:
        return self.default() if callable(self.default) else self.default

    def check(self, value: Any) -> Any:
        """``value`` if it is in the option's bound (or it has none); ValueOutOfRange naming the flag else."""
        return value if value is None or self.bound is None else self.bound.check(value, self.flag)


def _env(name: str, fallback: Callable[[], Any] | Any = None) -> Callable[[], Any]:
    def read() -> Any:
        value = os.environ.get(name)
        if value:
            return value
        return fallback() if callable(fallback) else fallback

    return read


def _protocols() -> list[str]:
    return sorted(WATCHERS)


def _poll_defaults() -> str:
    return ", ".join(f"{name} {WATCHERS[name].default_poll_interval_s:g}" for name in _protocols())


OPTIONS: tuple[Option, ...] = (
    Option(
        "--protocol",
        f"notice protocol: {', '.join(_protocols())} "
        f"(default: ${model.METADATA_PROTOCOL_ENV}, else sigterm)",
        default=_env(model.METADATA_PROTOCOL_ENV, "sigterm"),
        choices=_protocols,
    ),
    Option(
        "--metadata-url",
        f"metadata endpoint base URL (default: ${model.METADATA_URL_ENV})",
        default=_env(model.METADATA_URL_ENV),
    ),
    Option(
        "--poll-interval",
        f"seconds between notice polls (default: the protocol's, {_poll_defaults()})",
        float,
        None,
        "S",
        bound=POLL_INTERVAL_S,
    ),
    Option(
        "--safety-margin",
        "seconds kept back from the worker's save for upload, release and record "
        f"(default {defaults.DEFAULT_SAFETY_MARGIN_S:g})",
        float,
        defaults.DEFAULT_SAFETY_MARGIN_S,
        "S",
        bound=LEAD_TIME_S,
    ),
    Option(
        "--restart-limit",
        f"restarts after a crash (default {defaults.DEFAULT_RESTART_LIMIT})",
        int,
        defaults.DEFAULT_RESTART_LIMIT,
        "N",
        bound=RESTARTS,
    ),
    Option(
        "--restart-backoff",
        "seconds before the first restart, doubling after "
        f"(default {defaults.DEFAULT_RESTART_BACKOFF_S:g})",
        float,
        defaults.DEFAULT_RESTART_BACKOFF_S,
        "S",
        bound=DURATION_S,
    ),
    Option(
        "--assumed-lead",
        "lead time of a notice that carries no time (default: the cloud's documented lead)",
        float,
        None,
        "S",
        bound=LEAD_TIME_S,
    ),
    Option(
        "--sigterm-grace",
        f"the lead a SIGTERM to the agent stands for (default {KUBERNETES_GRACE_S:g}, "
        "Kubernetes' grace)",
        float,
        KUBERNETES_GRACE_S,
        "S",
        bound=LEAD_TIME_S,
    ),
    Option(
        "--state-dir",
        "events, status, spool, logs, control folder (default: $SPOTHOP_HOME/agent/INSTANCE_ID)",
        Path,
    ),
    Option(
        "--instance-id",
        f"default: ${channel.INSTANCE_ID_ENV}, else the host name",
        default=_env(channel.INSTANCE_ID_ENV, socket.gethostname),
    ),
    Option(
        "--cloud",
        f"provider name for the records (default: ${model.CLOUD_ENV}, else the protocol)",
        default=_env(model.CLOUD_ENV),
    ),
    Option("--worker-id", "the worker's queue identity (default: the instance id)"),
    Option("--job-id", f"default: ${channel.JOB_ID_ENV}", default=_env(channel.JOB_ID_ENV)),
    Option(
        "--queue-url",
        "shard queue whose leases are released on a notice, directly when the control plane "
        f"is unreachable (default: ${channel.QUEUE_URL_ENV})",
        default=_env(channel.QUEUE_URL_ENV),
    ),
    Option(
        "--checkpoint-url",
        f"default: ${channel.CHECKPOINT_URL_ENV}",
        default=_env(channel.CHECKPOINT_URL_ENV),
    ),
    Option(
        "--control-plane",
        "a database URL (embedded: the store directly), an http(s):// URL of spothop "
        f"server, or '{NONE}' (default: ${CONTROL_PLANE_ENV}, else the default database)",
        default=_env(CONTROL_PLANE_ENV),
        metavar="URL",
    ),
    Option(
        "--token",
        f"bearer token for an http(s) control plane (default: ${TOKEN_ENV}; never logged)",
        default=_env(TOKEN_ENV),
        env=TOKEN_ENV,
        secret=True,
    ),
    Option(
        "--code-url",
        "where the job's packed workdir is fetched from with the token before the worker "
        "starts ({instance_id} in it is replaced by the instance id)",
        metavar="URL",
    ),
    Option(
        "--code-sha256",
        "the packed workdir's sha256 (a mismatch: the worker never starts)",
        metavar="HEX",
    ),
    Option(
        "--workdir",
        "the folder the job's code is unpacked into; the worker's working directory",
        Path,
    ),
    Option(
        "--mounts",
        "the job's file mounts, a JSON list of {dest, fetch|copy, ...} (spothop.agent.mounts), "
        "fetched or copied after the code and before the worker starts",
        metavar="JSON",
    ),
    Option(
        "--heartbeat-interval",
        "seconds between heartbeats to the control plane "
        f"(default {defaults.DEFAULT_HEARTBEAT_INTERVAL_S:g})",
        float,
        defaults.DEFAULT_HEARTBEAT_INTERVAL_S,
        "S",
        bound=HEARTBEAT_INTERVAL_S,
    ),
    Option(
        "--requests-interval",
        "seconds between reads of the control plane's checkpoint and stop requests "
        f"(default {defaults.DEFAULT_REQUESTS_INTERVAL_S:g})",
        float,
        defaults.DEFAULT_REQUESTS_INTERVAL_S,
        "S",
        bound=HEARTBEAT_INTERVAL_S,
    ),
    Option(
        "--rendezvous-timeout",
        "a grouped task's node: seconds to wait for its group's rendezvous before giving up "
        f"(default {defaults.DEFAULT_RENDEZVOUS_TIMEOUT_S:g})",
        float,
        defaults.DEFAULT_RENDEZVOUS_TIMEOUT_S,
        "S",
        bound=DURATION_S,
    ),
    Option(
        "--lease-releaser",
        "hook that releases the worker's leases (default: the control plane's)",
        metavar="MODULE:FACTORY",
    ),
    Option(
        "--upload",
        "hook that uploads what is still local after the worker's save",
        metavar="MODULE:FACTORY",
    ),
    Option("--no-probe", "skip the first-boot GPU probe of this instance type", bool, False),
    Option("--json", "print each event as a JSON line on stdout", bool, False),
)


def pass_through(values: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The light agent's argv for the options given in ``values`` (by dest; None or False: not given),
    and the environment variables that carry the secret ones."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for option in OPTIONS:
        value = values.get(option.dest)
        if value is None or value is False:
            continue
        if option.secret and option.env:
            env[option.env] = str(value)
        elif option.type is bool:
            argv.append(option.flag)
        else:
            argv += [option.flag, str(value)]
    return argv, env
