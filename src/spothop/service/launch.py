"""Launching a job, as both fronts do it: ``spothop launch`` and ``POST /v1/jobs``.

:func:`check_launchable` refuses, before anything is stored, a job that could never run;
:func:`launch_job` stores it (pending) for the controller to place. Starting this home's
controller is the CLI's business, waking the server's its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec
    from spothop.jobs.store import JobStore


@dataclass(frozen=True)
class LaunchedJob:
    """A job just stored: what ``launch --detach --json`` and ``POST /v1/jobs`` answer."""

    job_id: str
    name: str
    state: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_launchable(spec: JobSpec, *, loopback_control_plane: bool = False) -> None:
    """What ``launch`` checks before a job is stored: its checkpoint, output and input paths are
    reachable from the instances of every provider it may be placed on, and its checkpoint and
    output URLs can be written (:class:`~spothop.errors.StorageUnreachable`), and some offering of the controller's
    providers meets it at all (:class:`~spothop.scheduler.errors.NoCandidates`, naming the
    requirement that excluded the most). No capacity *now* is not refused: the job waits.

    ``loopback_control_plane`` (``spothop launch`` without a server: the embedded controller's
    agent API listens on this machine's loopback): a job none of whose providers' instances
    share this machine's network (every real cloud's) could never reach it, and is refused
    (:class:`~spothop.errors.JobSpecError`, naming ``spothop server run --public-url``)."""
    from spothop.jobs.controller.place import plan_inputs
    from spothop.jobs.reachable import check_reachable
    from spothop.providers.registry import default_providers
    from spothop.scheduler.errors import NoCapacityNow
    from spothop.scheduler.market_view import gather_market_view
    from spothop.scheduler.placement import rank

    configured = default_providers()
    if loopback_control_plane:
        _refuse_unreachable_control_plane(spec, configured)
    check_reachable(spec, configured)  # before anything is paid for
    providers = [p for n, p in configured.items() if n not in spec.providers.deny]
    profile, kinds, pools = plan_inputs(spec)
    view = gather_market_view(providers, on_error=lambda *_: None)
    with contextlib.suppress(NoCapacityNow):
        rank(view, spec.requirements(), profile, kinds, reserved=pools).raise_if_empty()


def _refuse_unreachable_control_plane(spec: JobSpec, configured: Mapping[str, object]) -> None:
    from spothop.errors import JobSpecError
    from spothop.jobs.reachable import placeable
    from spothop.providers.extensions import shares_host_network

    providers = placeable(spec, configured)
    if providers and not any(shares_host_network(p) for p in providers.values()):
        names = ", ".join(sorted(providers))
        message = (
            f"the job's instances ({names}) could not reach this machine's control plane "
            "(the embedded controller listens on 127.0.0.1): run `spothop server run "
            "--public-url URL` where they can reach it, and launch with --server URL"
        )
        raise JobSpecError(message, [("providers", message)])


def launch_job(store: JobStore, spec: JobSpec) -> LaunchedJob:
    """Store ``spec`` as a new job (pending). Call :func:`check_launchable` first.

    A ``workdir`` is packed and stored first (:func:`~spothop.controlplane.archives.store_workdir`,
    before anything is paid for: a workdir that cannot be packed is a
    :class:`~spothop.errors.JobSpecError` and no job is stored); the job
    records the archive's sha256, the one its agents may fetch. Its ``file_mounts`` are
    planned the same way (:func:`~spothop.controlplane.mounts.plan_mounts`: local paths
    packed and stored, bucket URLs and bucket paths left for the agent to copy).
    """
    code_sha256 = None
    if spec.workdir:
        from spothop.controlplane.archives import store_workdir

        code_sha256 = store_workdir(spec.workdir).sha256
    mounts_json = None
    if spec.file_mounts:
        from spothop.controlplane.mounts import plan_json, plan_mounts

        mounts_json = plan_json(plan_mounts(spec))
    job_id = store.create_job(spec, code_sha256=code_sha256, mounts_json=mounts_json)
    job = store.get_job(job_id)
    return LaunchedJob(job.job_id, job.name, str(job.state))
