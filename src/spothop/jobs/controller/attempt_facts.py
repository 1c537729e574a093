"""Facts, not decisions: live attempts brought up to date with what the clouds list.

An attempt ``launching`` whose instance was found by its token gets its
``instance_id``; ``pending`` → ``running`` → ``noticed`` follow the instance
(the noticed time from the agent's ``final_notice`` or the cloud's
``notice_time``); the cloud's final notice (or the interruption itself) is stored
as the attempt's ``notice_final``. Ending an attempt is a decision (``EndAttempt``), never made
here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from spothop.jobs.controller import faults
from spothop.jobs.controller.clock import stamp
from spothop.jobs.controller.snapshot import TAG_TOKEN
from spothop.jobs.lifecycle import AttemptState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.providers.base import Instance, InstanceState, Provider
from spothop.wire.events import AgentEvent, FinalNotice, Interruption

log = logging.getLogger(__name__)


def sync_attempt_facts(
    store: JobStore,
    attempts: Sequence[AttemptRecord],
    instances: Mapping[str, Instance],
    events: Sequence[AgentEvent],
    providers: Mapping[str, Provider] | None = None,
) -> list[AttemptRecord]:
    """Bring live attempts' facts up to date with the clouds (module docstring); the attempts as now stored.

    Times written are on the attempt's provider's clock (:mod:`.clock`): the
    instance's own (``running_at``, ``notice_time``), else now on that clock
    (``providers``; the wall for one not given)."""
    providers = providers or {}
    by_token = {i.tags.get(TAG_TOKEN): i for i in instances.values() if i.tags.get(TAG_TOKEN)}
    from spothop.jobs.controller.snapshot import CONTROL_PLANE_PROTOCOL

    # The cloud's notices; an agent's report of the controller's own stop is left to decide's fold
    # (a grouped task's node stopped with its group is not noticed: docs/multinode.md).
    noticed = {
        e.instance_id
        for e in events
        if isinstance(e, FinalNotice) and e.protocol != CONTROL_PLANE_PROTOCOL
    }
    # The cloud's final notices and interruptions, stored on the attempt (``notice_final``): the
    # fact the one rule for an interruption reads (spothop.jobs.lifecycle.interrupted).
    final = noticed | {
        e.instance_id
        for e in events
        if isinstance(e, Interruption) and e.protocol != CONTROL_PLANE_PROTOCOL
    }
    out: list[AttemptRecord] = []
    for attempt in attempts:
        current = attempt
        if attempt.live:
            try:
                provider = providers.get(attempt.provider)
                current = _sync_one(store, attempt, instances, by_token, noticed, provider)
                if current.instance_id in final and not current.notice_final:
                    current = store.update_attempt(
                        current.attempt_id, event="attempt_final_notice", notice_final=True
                    )
            except Exception as exc:  # a refused update leaves the attempt as it was: next pass
                log.warning("syncing attempt %s failed: %s", attempt.attempt_id, exc)
        out.append(current)
    return out


_FOLLOW = {
    InstanceState.PENDING: AttemptState.PENDING,
    InstanceState.RUNNING: AttemptState.RUNNING,
    InstanceState.NOTICED: AttemptState.NOTICED,
}
_ORDER = [AttemptState.LAUNCHING, AttemptState.PENDING, AttemptState.RUNNING, AttemptState.NOTICED]


def _sync_one(
    store: JobStore,
    attempt: AttemptRecord,
    instances: Mapping[str, Instance],
    by_token: Mapping[str | None, Instance],
    noticed: AbstractSet[str],
    provider: Provider | None = None,
) -> AttemptRecord:
    instance = instances.get(attempt.instance_id or "") or by_token.get(attempt.launch_token)
    if instance is None:
        return attempt
    fields: dict[str, Any] = {}  # the store's attempt columns
    if attempt.instance_id != instance.instance_id:
        fields["instance_id"] = instance.instance_id
    target = _FOLLOW.get(instance.state)
    if instance.instance_id in noticed and attempt.state in _ORDER:
        target = AttemptState.NOTICED
    if target is not None and _ORDER.index(target) > _ORDER.index(attempt.state):
        if target is AttemptState.RUNNING:
            fields["running_unix_s"] = instance.running_at
        if target is AttemptState.NOTICED:
            fields["noticed_unix_s"] = instance.notice_time
            if attempt.running_unix_s is None and instance.running_at is not None:
                fields["running_unix_s"] = instance.running_at
        fields["state"] = target
        updated = store.update_attempt(attempt.attempt_id, **stamp(fields, provider))
        if target is AttemptState.RUNNING:
            faults.reached("running")
        return updated
    if fields:
        attempt = store.update_attempt(attempt.attempt_id, event="attempt_adopted", **fields)
    return attempt
