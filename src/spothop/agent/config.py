"""The agent's settings, one frozen dataclass; defaults are the production values, with their sources."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spothop.agent.notices.sigterm import KUBERNETES_GRACE_S

DEFAULT_SAFETY_MARGIN_S = (
    5.0  # kept back from the worker's save for upload, lease release and the record
)
DEFAULT_RESTART_LIMIT = 3
DEFAULT_RESTART_BACKOFF_S = 1.0
DEFAULT_HEARTBEAT_INTERVAL_S = 10.0
# A request is the controller asking this instance to checkpoint or stop now: a group's other
# nodes when one node got its notice, an on-demand switch of a deadline job. It is read apart
# from the heartbeat and more often, so a node's stop does not wait up to a heartbeat interval
# (10 s of a 30 s notice: the group relaunches only once every node stopped).
DEFAULT_REQUESTS_INTERVAL_S = 1.0
# How long a grouped task's node waits for its group's rendezvous before it gives up (exit 1, the
# controller relaunches the generation): every other node must boot and register, a lost one be
# found lost (its provider's boot deadline, 10 to 15 minutes on the real clouds) and replaced.
DEFAULT_RENDEZVOUS_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class AgentConfig:
    """Everything ``spothop agent run`` is told. ``protocol`` ``sigterm`` means no endpoint to poll.

    ``assumed_lead_s`` is the lead for notices that carry no time (GCP
    ``preempted``); None uses the cloud's documented lead. ``sigterm_grace_s``
    is the lead a SIGTERM to the agent stands for.
    """

    command: Sequence[str]
    protocol: str
    state_dir: Path
    metadata_url: str | None = None
    instance_id: str = ""
    cloud: str = ""
    worker_id: str = ""
    job_id: str | None = None
    queue_url: str | None = None
    checkpoint_url: str | None = None
    poll_interval_s: float | None = (
        None  # None: the protocol's own (its watcher's default_poll_interval_s)
    )
    safety_margin_s: float = DEFAULT_SAFETY_MARGIN_S
    restart_limit: int = DEFAULT_RESTART_LIMIT
    restart_backoff_s: float = DEFAULT_RESTART_BACKOFF_S
    assumed_lead_s: float | None = None
    sigterm_grace_s: float = KUBERNETES_GRACE_S
    endpoint_lost_polls: int = 5
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    requests_interval_s: float = DEFAULT_REQUESTS_INTERVAL_S
    rendezvous_timeout_s: float = DEFAULT_RENDEZVOUS_TIMEOUT_S
    extra_env: dict[str, str] = field(default_factory=dict)
    code_url: str | None = None  # the job's packed workdir (spothop.agent.code)
    code_sha256: str | None = None
    workdir: Path | None = None  # where the code is unpacked; the worker's working directory
    mounts: tuple[dict[str, Any], ...] = ()  # the job's file mounts (spothop.agent.mounts)
    token: str | None = field(default=None, repr=False)  # bearer token, for the code's download
    probe_first_boot: bool = True  # measure the GPUs once per instance type (see first_boot.py)
