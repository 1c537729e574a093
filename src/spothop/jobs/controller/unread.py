"""A provider that cannot be read: its jobs say so, instead of running on unwatched.

When a provider's listing fails (credentials that expired mid-job, a revoked permission, an
endpoint that does not answer), the fold leaves its attempts as they were ("unknown, not
gone": :mod:`.fold`), and nothing is launched on it or terminated there until it answers
again. Without a word, a job would then look healthy while its instances run unwatched and
billed. :func:`unread_waits` gives each such job a :class:`~.actions.Waiting` reason naming
the provider, the cloud's error, the instances it cannot see and the fix; once the provider
answers again, a job whose reason still says it could not be read is told it can.

Pure, like ``decide``: the snapshot's ``provider_errors`` are what this pass's listing raised.
"""

from __future__ import annotations

from spothop.jobs.controller.actions import Waiting
from spothop.jobs.controller.snapshot import JobView, Snapshot

UNREAD = "cannot be read"  # the words every reason of this rule carries after the provider's name
AUTH_FIX = (
    "renew or fix its credentials (spothop reads them as the cloud's own tools do); until then "
    "spothop can neither see nor end those instances: they run and bill unwatched"
)
OTHER_FIX = (
    "spothop asks again every pass; until it answers, it can neither see nor end those "
    "instances: they run and bill unwatched"
)


def unread_waits(snapshot: Snapshot, jobs: tuple[JobView, ...] | list[JobView]) -> list[Waiting]:
    """Waiting reasons for the live jobs whose instances a provider could not list this pass."""
    out: list[Waiting] = []
    for job in jobs:
        if job.state.final:
            continue
        unread = [
            a
            for a in job.attempts
            if a.alive and a.instance_id is not None and a.provider in snapshot.provider_errors
        ]
        if unread:
            provider = unread[0].provider
            ids = ", ".join(sorted({str(a.instance_id) for a in unread if a.provider == provider}))
            error = snapshot.provider_errors[provider]
            fix = AUTH_FIX if error.startswith("AuthFailed") else OTHER_FIX
            reason = f"{provider} {UNREAD} ({error}): its instances {ids} are not seen; {fix}"
            out.append(Waiting(job_id=job.job_id, node=unread[0].node, reason=reason))
            continue
        said = next(
            (p for p in snapshot.listed_providers if job.reason.startswith(f"{p} {UNREAD} (")),
            None,
        )
        if said is not None:
            out.append(Waiting(job_id=job.job_id, node=0, reason=f"{said} can be read again"))
    return out
