"""Step 2 and 3 of a pass: the cooldowns its attempts call for, and the orphans it ends.

A spot market that interrupted an attempt (or gave it an advance notice) cools
down for ``cooldown_s``; a zone that lost all its instances at once cools down
as a whole (``zone_outage_*``). A spothop-tagged instance that no attempt owns,
or whose attempt ended, is terminated. Pure, like :func:`~.decide.decide`.
"""

from __future__ import annotations

from collections.abc import Sequence

from spothop.jobs.controller.actions import Action, CoolDown, Terminate
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.snapshot import TAG_JOB, TAG_TOKEN, AttemptView, JobView, Snapshot
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind


def outage_windows(
    snapshot: Snapshot, cooldowns: Sequence[CoolDown], config: ControllerConfig
) -> dict[MarketId, float]:
    """Each zone cooling for an outage → when its window opened: ``zone_outage_window_s``
    before its last loss, which is ``zone_cooldown_s`` before the cooldown ends."""
    until = {m: t for m, t in snapshot.cooldowns.items() if not m.instance_type}
    for c in cooldowns:
        if not c.market.instance_type:
            until[c.market] = max(c.until_s, until.get(c.market, float("-inf")))
    return {
        zone: t - config.zone_cooldown_s - config.zone_outage_window_s
        for zone, t in until.items()
        if t > snapshot.now
    }


# -- cooldowns and orphans -------------------------------------------------------------------


def lost_at(a: AttemptView) -> float | None:
    if a.interrupted:
        return a.interrupted_at
    if a.end_reason is EndReason.FAILED:
        return a.ended_at
    return None


def cooldowns_wanted(
    snapshot: Snapshot, jobs: Sequence[JobView], config: ControllerConfig
) -> list[CoolDown]:
    """Level-triggered: each cooldown is asked for until the snapshot holds one lasting as long."""
    wanted = market_cooldowns(snapshot.now, jobs, config)
    wanted.update(zone_outages(snapshot.now, jobs, config))
    out = []
    for market in sorted(wanted):
        until, why = wanted[market]
        if snapshot.cooldowns.get(market, float("-inf")) < until:
            out.append(CoolDown(market, until, why))
    return out


def market_cooldowns(
    now: float, jobs: Sequence[JobView], config: ControllerConfig
) -> dict[MarketId, tuple[float, str]]:
    """A spot market that interrupted an attempt (or gave it an advance notice) cools from then."""
    wanted: dict[MarketId, tuple[float, str]] = {}
    for job in jobs:
        for a in job.attempts:
            t, why = a.interrupted_at, "preempted here"
            if t is None and a.alive and a.state is AttemptState.NOTICED:
                t, why = a.noticed_at, "advance notice here"
            if t is None or a.market_kind is not MarketKind.SPOT:
                continue
            until = t + config.cooldown_s
            if until > now and until > wanted.get(a.market, (0.0, ""))[0]:
                wanted[a.market] = (until, f"{why} at {t:.0f} (job {job.job_id})")
    return wanted


def zone_outages(
    now: float, jobs: Sequence[JobView], config: ControllerConfig
) -> dict[MarketId, tuple[float, str]]:
    """A zone that lost at least ``zone_outage_min_instances`` within the window and kept none.

    Kept: an instance that was in the zone before the window's first loss and is
    still up, or ended after the last loss for another reason (so what this pass
    itself ends does not change the verdict on a second pass). A replacement
    launched into the zone during the window (a pass that saw only the first
    loss) is no survivor: it does not hide the outage, and is moved once the
    outage is declared (:meth:`~.jobrules.Pass.moved_by_outage`).
    """
    window = config.zone_outage_window_s
    if not any(
        (t := lost_at(a)) is not None and now - t <= window for j in jobs for a in j.attempts
    ):
        return {}  # the common pass: nothing was lost lately
    in_zone: dict[MarketId, list[AttemptView]] = {}
    for job in jobs:
        for a in job.attempts:
            if a.zone and a.instance_id:
                in_zone.setdefault(MarketId(a.provider, a.region, a.zone, ""), []).append(a)
    wanted: dict[MarketId, tuple[float, str]] = {}
    for zone in sorted(in_zone):
        times = []
        for a in in_zone[zone]:
            t = lost_at(a)
            if t is not None and now - t <= config.zone_outage_window_s:
                times.append(t)
        if len(times) < config.zone_outage_min_instances:
            continue
        first, last = min(times), max(times)
        kept = any(
            a.launched_at < first
            and lost_at(a) is None
            and a.state is not AttemptState.NOTICED
            and (a.alive or (a.ended_at is not None and a.ended_at >= last))
            for a in in_zone[zone]
        )
        if not kept:
            wanted[zone] = (
                last + config.zone_cooldown_s,
                f"zone outage: {len(times)} instances lost at once",
            )
    return wanted


def orphans(snapshot: Snapshot, jobs: Sequence[JobView], config: ControllerConfig) -> list[Action]:
    by_instance = {a.instance_id: a for j in jobs for a in j.attempts if a.instance_id}
    by_token = {a.launch_token: a for j in jobs for a in j.attempts}
    out: list[Action] = []
    for instance_id in sorted(snapshot.instances):
        inst = snapshot.instances[instance_id]
        if not inst.state.is_alive or TAG_JOB not in inst.tags:
            continue
        attempt = by_instance.get(instance_id) or by_token.get(inst.tags.get(TAG_TOKEN, ""))
        if attempt is None:
            if snapshot.now - inst.launched_at > config.listing_grace_s:
                out.append(
                    Terminate(
                        instance_id, inst.provider, "orphan: tagged by spothop, owned by no attempt"
                    )
                )
            continue
        if attempt.alive:
            continue
        if attempt.end_reason is EndReason.PREEMPTED:
            deadline = attempt.notice_deadline_s
            if deadline is not None and deadline > snapshot.now:
                continue  # the cloud takes it at its deadline; its emergency checkpoint may be uploading
        why = attempt.end_reason.value if attempt.end_reason else "ended"
        out.append(
            Terminate(instance_id, inst.provider, f"its attempt ended ({why})", attempt.job_id)
        )
    return out
