"""What the agents reported of their workers' work: the only evidence a report counts as useful time.

An instance that was billed is not an instance that worked: a boot script that
failed, an agent that never registered, a worker that never started all bill
their hours and do nothing. So a report counts an attempt's running time as
useful only where its agent reported work (:mod:`.report`, rule 2):

1. a heartbeat that carried the worker's training step (``worker_step``) or
   the worker's own beat (``worker_heartbeat_unix_s``: the SDK's
   ``heartbeat()``);
2. a checkpoint the worker said it saved (a ``saved`` event with outcome
   ``saved``, an ``interruption`` whose worker saved);
3. the worker's exit with code 0 (``worker_exited``: it finished its work);
4. shards it completed: a batch worker's ``iter_shards`` beats through the
   SDK at each shard done (rule 1), and a caller that knows the shards done
   by worker id passes them (the queue forgets who completed a shard).

Nothing else is evidence of work: not the instance's state, its billed
seconds, the agent's registration or its own heartbeats, a worker that
started and failed. An attempt without any is listed in the report with its
paid time, none of it useful.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.store import JobStore
    from spothop.observe.events import StreamEvent

SAVED = "saved"  # an event's outcome (or an interruption's) when the worker said it saved
WORK_KINDS = frozenset(
    {"saved", "worker_exited", "interruption"}
)  # the events that may report work


@dataclass(frozen=True)
class Beat:
    """An instance's latest heartbeat, as far as it says what the worker did."""

    instance_id: str
    worker_id: str = ""
    worker_step: int | None = None
    worker_heartbeat_unix_s: float | None = None


@dataclass(frozen=True)
class ReportedWork:
    """What one instance's agent reported of its worker's work (the module's four kinds)."""

    instance_id: str
    step: int | None = None  # the training step its last heartbeat carried
    worker_beat: bool = False  # the worker beat through the SDK
    saves: int = 0  # checkpoints the worker said it saved
    finished: bool = False  # the worker exited 0
    shards_done: int = 0

    @property
    def reported(self) -> bool:
        return (
            self.step is not None
            or self.worker_beat
            or self.saves > 0
            or self.finished
            or self.shards_done > 0
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reported": self.reported}


def reported_work(
    events: Iterable[StreamEvent],
    beats: Iterable[Beat] = (),
    shards_done_by_worker: Mapping[str, int] | None = None,
) -> dict[str, ReportedWork]:
    """Per instance id, what its agent reported (the module's rules 1-4); an instance that
    reported nothing is absent. ``shards_done_by_worker``: done shards by the worker id they
    were claimed under (rule 4), matched to instances through their heartbeats' worker ids."""
    out: dict[str, ReportedWork] = {}
    done = shards_done_by_worker or {}
    for beat in beats:
        out[beat.instance_id] = ReportedWork(
            beat.instance_id,
            step=beat.worker_step,
            worker_beat=beat.worker_heartbeat_unix_s is not None,
            shards_done=done.get(beat.worker_id, 0) if beat.worker_id else 0,
        )
    for e in events:
        if not e.instance_id or e.kind not in WORK_KINDS:
            continue
        seen = out.get(e.instance_id, ReportedWork(e.instance_id))
        if e.kind in ("saved", "interruption") and e.saved == SAVED:
            seen = _replace(seen, saves=seen.saves + 1)
        elif e.kind == "worker_exited" and e.data.get("code") == 0:
            seen = _replace(seen, finished=True)
        out[e.instance_id] = seen
    return {i: w for i, w in out.items() if w.reported}


def _replace(work: ReportedWork, **changes: Any) -> ReportedWork:
    return ReportedWork(**{**asdict(work), **changes})


def read_beats(store: JobStore, instance_ids: Collection[str]) -> list[Beat]:
    """The latest heartbeat of each of ``instance_ids`` that has one (``agent_heartbeats``)."""
    from sqlalchemy import select

    from spothop.state.agent_tables import agent_heartbeats as t

    if not instance_ids:
        return []
    query = select(
        t.c.instance_id, t.c.worker_id, t.c.worker_step, t.c.worker_heartbeat_unix_s
    ).where(t.c.instance_id.in_(sorted(instance_ids)))
    with store.engine.connect() as conn:
        return [
            Beat(str(i), str(w or ""), None if s is None else int(s), b)
            for i, w, s, b in conn.execute(query)
        ]
