"""The orphan reconciler: no spothop instance runs that no job of this store owns.

Every launch carries tags — ``spothop-job``, ``spothop-node``,
``spothop-token``, ``spothop-attempt``, ``spothop-store`` — and its attempt
row is written before the launch call (:mod:`spothop.jobs.controller.executor`).
So every live instance tagged with *this* store's tag is either

- **known**: an attempt names its instance id, or carries its token (the
  controller died inside the launch call: the observer adopts it, setting the
  attempt's instance id), or
- **an orphan**: no attempt of this store has its token or its id (the store
  was reset, or the row was lost) — it is terminated, and the termination is
  recorded as a ``orphan_terminated`` event of the job its tag names when that
  job exists.

Instances tagged by another store (another home or server sharing the cloud
account) are never touched. :func:`reconcile` runs on every controller pass
(it costs one query; the instances are those the pass already listed).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select

from spothop.jobs.controller.observe import TAG_JOB, TAG_STORE, TAG_TOKEN, store_tag
from spothop.jobs.errors import JobNotFound
from spothop.jobs.store import JobStore
from spothop.providers.base import Instance, Provider
from spothop.state.job_tables import job_attempts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Orphan:
    instance_id: str
    provider: str
    job_id: str | None
    token: str | None


def find_orphans(
    store: JobStore, store_url: str, instances: Mapping[str, Instance]
) -> list[Orphan]:
    """Live instances with this store's tag that no attempt knows (by id or token)."""
    mine = store_tag(store_url)
    candidates = [
        i for i in instances.values() if i.state.is_alive and i.tags.get(TAG_STORE) == mine
    ]
    if not candidates:
        return []
    with store.engine.connect() as conn:
        rows = conn.execute(select(job_attempts.c.instance_id, job_attempts.c.launch_token)).all()
    known_ids = {r[0] for r in rows if r[0]}
    known_tokens = {r[1] for r in rows}
    return [
        Orphan(i.instance_id, i.provider, i.tags.get(TAG_JOB), i.tags.get(TAG_TOKEN))
        for i in candidates
        if i.instance_id not in known_ids and i.tags.get(TAG_TOKEN) not in known_tokens
    ]


def reconcile(
    store: JobStore,
    store_url: str,
    providers: Mapping[str, Provider],
    instances: Mapping[str, Instance],
) -> list[Orphan]:
    """Terminate every orphan (module docstring); the ones terminated."""
    ended: list[Orphan] = []
    for orphan in find_orphans(store, store_url, instances):
        provider = providers.get(orphan.provider)
        if provider is None:
            continue
        try:
            provider.terminate(orphan.instance_id)
        except Exception as exc:
            log.warning("terminating orphan %s failed: %s", orphan.instance_id, exc)
            continue
        ended.append(orphan)
        log.warning("terminated orphan instance %s (no attempt owns it)", orphan.instance_id)
        if orphan.job_id:
            with contextlib.suppress(JobNotFound):  # a tag naming a job this store never had
                store.record_event(
                    orphan.job_id,
                    "orphan_terminated",
                    {"instance_id": orphan.instance_id, "provider": orphan.provider},
                )
    return ended
