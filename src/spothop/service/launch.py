"""Launching a job, as both fronts do it: ``spothop launch`` and ``POST /v1/jobs``.

:func:`check_launchable` refuses, before anything is stored, a job that could never run;
:func:`launch_job` stores it (pending) for the controller to place. Starting this home's
controller is the CLI's business, waking the server's its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
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


@dataclass(frozen=True)
class UploadedCode:
    """A remote launch's code, packed and uploaded by the client (``POST /v1/jobs``' ``code``,
    checked by :func:`spothop.server.code.uploaded_code`): the ``workdir``'s archive and, per
    ``file_mounts`` destination, ``(sha256, is_file)``. Its paths are never read here."""

    workdir: str | None = None
    mounts: Mapping[str, tuple[str, bool]] = field(default_factory=dict)


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

    check_spec(spec)
    configured = default_providers()
    if loopback_control_plane:
        _refuse_unreachable_control_plane(spec, configured)
    check_reachable(spec, configured)  # before anything is paid for
    _check_batch_inputs(spec)
    providers = [p for n, p in configured.items() if n not in spec.providers.deny]
    profile, kinds, pools = plan_inputs(spec)
    view = gather_market_view(providers, on_error=lambda *_: None)
    ranking = rank(view, spec.requirements(), profile, kinds, reserved=pools)
    with contextlib.suppress(NoCapacityNow):
        ranking.raise_if_empty()
    check_budget(spec, [c.price_usd_per_hour for c in ranking.candidates[:64]])


# Linux's limit on one "NAME=value" string handed to exec (MAX_ARG_STRLEN, 32 pages): a longer
# value makes every worker's start fail with E2BIG, on every instance, however often relaunched.
ENV_ENTRY_MAX_BYTES = 128 * 1024
# All of them together: exec takes arguments and environment up to a quarter of the stack limit
# (2 MiB under the usual 8 MiB); half of that leaves the launcher's own variables room.
ENV_TOTAL_MAX_BYTES = 1024 * 1024


def check_spec(spec: JobSpec) -> None:
    """What ``plan`` and ``launch`` refuse in a spec that validates but could never run as asked,
    each a :class:`~spothop.errors.JobSpecError` naming the field, the figures and the fix:

    - a cloud credential in ``envs`` (any cloud's rule: :mod:`spothop.providers.credentials`);
    - an ``envs`` entry longer than exec takes (:data:`ENV_ENTRY_MAX_BYTES`);
    - a ``deadline`` shorter than the job's ``work``: no market finishes in time.
    """
    from spothop.errors import ConfigError, JobSpecError
    from spothop.providers.credentials import refuse_cloud_credentials

    def refuse(field: str, message: str) -> None:
        raise JobSpecError(f"{field}: {message}", [(field, message)])

    try:
        refuse_cloud_credentials(spec.envs)
    except ConfigError as exc:
        refuse(
            "envs",
            f"{exc}; remove it from the job's envs, or give it as a secret (secrets: or "
            "--secret NAME: sealed at rest, never printed); nothing is stored or launched",
        )
    sizes = {
        name: len(name.encode()) + 1 + len(value.encode()) for name, value in spec.envs.items()
    }
    secret_bytes = sum(len(n) + 1 + len(v.encode()) for n, v in spec.secret_values.items())
    if sum(sizes.values()) + secret_bytes > ENV_TOTAL_MAX_BYTES:
        refuse(
            "envs" if not secret_bytes else "envs and secrets",
            f"{sum(sizes.values()) + secret_bytes:,} bytes in all, over the {ENV_TOTAL_MAX_BYTES:,} a process "
            "start takes (E2BIG): put the large values in files of the workdir",
        )
    for name, size in sizes.items():
        if size > ENV_ENTRY_MAX_BYTES:
            refuse(
                f"envs.{name}",
                f"{size:,} bytes, over the {ENV_ENTRY_MAX_BYTES:,} one variable may hold when a "
                "process starts (E2BIG): put the value in a file of the workdir and read it there",
            )
    work_s, deadline_s = spec.work_s, spec.deadline_s
    if work_s is not None and deadline_s is not None and deadline_s < work_s:
        refuse(
            "deadline",
            f"{_span(deadline_s)} is less than the job's work ({_span(work_s)}) on any market: no "
            "placement can finish in time; give a deadline of at least the work",
        )


def _check_batch_inputs(spec: JobSpec) -> None:
    """A batch job's local ``.jsonl`` inputs are text (their first 64 KiB read): a binary file
    named so is refused naming it and its line, not enqueued as shards no worker can read."""
    import glob

    from spothop.batch.inputs import check_jsonl_head
    from spothop.errors import JobSpecError
    from spothop.queue.errors import BatchSpecError

    if spec.batch is None:
        return
    for i, pattern in enumerate(spec.batch.inputs):
        if "://" in str(pattern):
            continue  # a bucket's object: read when its shards are planned
        for path in sorted(glob.glob(str(pattern))):
            if not path.endswith(".jsonl"):
                continue
            try:
                check_jsonl_head(path)
            except BatchSpecError as exc:
                field = f"batch.inputs.{i}"
                raise JobSpecError(f"{field}: {exc}", [(field, str(exc))]) from None


def check_budget(spec: JobSpec, prices_usd_per_hour: list[float]) -> None:
    """A ``budget_usd`` below what the cheapest candidate's first launch would cost (its work on
    every node where ``work`` is given, else the billing minimum) is refused with the figures."""
    from spothop.errors import JobSpecError
    from spothop.jobs.controller.progress import BILLING_MINIMUM_S

    budget = spec.budget_usd
    if budget is None or not prices_usd_per_hour:
        return
    cheapest = min(prices_usd_per_hour)
    seconds = max(spec.work_s or 0.0, BILLING_MINIMUM_S)
    least = cheapest * spec.node_count * seconds / 3600
    if least > budget:
        what = "its work" if spec.work_s else "the billing minimum"
        message = (
            f"${budget:g} is less than the cheapest launch would cost: ${least:.4f} "
            f"({spec.node_count} node(s) × {_span(seconds)}, {what}, at ${cheapest:.4f}/h); "
            "raise budget_usd or leave it out"
        )
        raise JobSpecError(f"budget_usd: {message}", [("budget_usd", message)])


def _span(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 3600 else f"{seconds / 3600:g} h"


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


def launch_job(
    store: JobStore, spec: JobSpec, *, uploaded: UploadedCode | None = None
) -> LaunchedJob:
    """Store ``spec`` as a new job (pending). Call :func:`check_launchable` first.

    A ``workdir`` is packed and stored first (:func:`~spothop.controlplane.archives.store_workdir`,
    before anything is paid for: a workdir that cannot be packed is a
    :class:`~spothop.errors.JobSpecError` and no job is stored); the job
    records the archive's sha256, the one its agents may fetch. Its ``file_mounts`` are
    planned the same way (:func:`~spothop.controlplane.mounts.plan_mounts`: local paths
    packed and stored, bucket URLs and bucket paths left for the agent to copy). Its secrets'
    values are stored sealed with the job (:mod:`spothop.state.sealed`), never in its spec.

    ``uploaded`` (a launch through the server): the client packed and uploaded the code, and
    nothing of the spec's paths is read here: the job records ``uploaded``'s archives.
    """
    from spothop.controlplane.mounts import plan_json, plan_mounts

    code_sha256 = None
    if uploaded is not None:
        code_sha256 = uploaded.workdir if spec.workdir else None
    elif spec.workdir:
        from spothop.controlplane.archives import store_workdir

        code_sha256 = store_workdir(spec.workdir).sha256
    mounts_json = None
    if spec.file_mounts:
        mounts = None if uploaded is None else uploaded.mounts
        mounts_json = plan_json(plan_mounts(spec, uploaded=mounts))
    job_id = store.create_job(
        spec, code_sha256=code_sha256, mounts_json=mounts_json, secret_values=spec.secret_values
    )
    job = store.get_job(job_id)
    return LaunchedJob(job.job_id, job.name, str(job.state))
