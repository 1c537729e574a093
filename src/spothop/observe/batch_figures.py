"""What a batch job's report reads of its event stream: the shards it ran and the outputs
published (:func:`spothop.observe.report.build_report`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spothop.observe.events import StreamEvent

SHARDS_ENQUEUED = "shards_enqueued"
OUTPUTS_PUBLISHED = "outputs_published"


def outputs_of(events: Sequence[StreamEvent], published: int | None) -> dict[str, Any]:
    """What publishing the outputs did: the last pass's figures, its counts summed over every
    pass, and ``published`` the outputs in the output location when it was read. A worker
    publishes each shard's output as it completes it; the controller's pass publishes only
    what a worker left (often nothing: ``published: 0`` after every shard was published)."""
    passes = [e.data for e in events if e.kind == OUTPUTS_PUBLISHED]
    out: dict[str, Any] = dict(passes[-1]) if passes else {}
    for key, value in out.items():
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = sum(int(p.get(key) or 0) for p in passes)
    if published is not None and passes:
        out["published"] = published
    return out


def shards_run_of(events: Sequence[StreamEvent], released: int) -> int | None:
    """Shards run: every shard enqueued plus those released back to the queue (run again);
    None before any was enqueued."""
    added = sum(int(e.data.get("added") or 0) for e in events if e.kind == SHARDS_ENQUEUED)
    return added + released if added else None
