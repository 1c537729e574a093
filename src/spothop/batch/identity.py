"""A batch job's identity is its name *and* its sharding: a resubmission must plan the same shards.

Shard ids are positions (``shard-000003`` is the fourth slice of the input)
and the queue deduplicates by id. If a job named ``embed`` was split into
shards of 1000 records and is submitted again with 500, the ids overlap but
mean other records: the old ``shard-000001`` (records 1000–1999) is kept,
the new ``shard-000002`` (records 1000–1499) is added, and records are done
twice while others are never done. So :func:`check_resubmission` compares the
plan with what the job holds and refuses any difference, naming it:

- a shard id the job has with another payload (another ``records_per_shard``,
  another input file, a file list in another order): refused;
- a shard the job has that the plan lacks (the input shrank): refused;
- shards the plan adds after the stored ones, each stored one unchanged (an
  interrupted submit, or files appended to the list): added.

Refusing, rather than folding the sharding into the job's name, keeps one
name per job in ``spothop queue stats``, ``dead`` and the outputs folder; a
user who means new work gives it a new name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spothop.queue.errors import BatchSpecError
from spothop.queue.model import Shard, ShardRecord

_SHOWN = 3  # ids named in a message; the rest are counted


def check_resubmission(job: str, planned: Sequence[Shard], stored: Sequence[ShardRecord]) -> None:
    """Nothing if every stored shard is planned with the same payload; else :class:`BatchSpecError`."""
    if not stored:
        return
    plan = {s.id: s.payload for s in planned}
    changed = [r for r in stored if r.id in plan and plan[r.id] != r.payload]
    if changed:
        first = changed[0]
        raise BatchSpecError(
            f"job {job!r} was submitted with other sharding: {_difference(first.payload, plan[first.id])} "
            f"({len(changed)} of its {len(stored)} shard(s) differ, first {first.id}: it holds "
            f"{_describe(first.payload)}, this spec plans {_describe(plan[first.id])}); resubmitting would "
            "mix old and new shards and do some records twice. Keep the spec's input as it was, "
            "or submit it under a new name"
        )
    dropped = [r.id for r in stored if r.id not in plan]
    if dropped:
        more = f" and {len(dropped) - _SHOWN} more" if len(dropped) > _SHOWN else ""
        raise BatchSpecError(
            f"job {job!r} was submitted with more shards than this spec plans ({len(stored)} then, "
            f"{len(planned)} now): {', '.join(dropped[:_SHOWN])}{more} would be left from the old input. "
            "Keep the spec's input as it was, or submit it under a new name"
        )


def _difference(old: Any, new: Any) -> str:
    """The setting that differs, in the spec's own words, where it can be told from the payloads."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.get("uri") != new.get("uri"):
            return f"input {old.get('uri')!r} then, {new.get('uri')!r} now"
        if "count" in old and old.get("count") != new.get("count"):
            return f"records_per_shard {old.get('count')} then, {new.get('count')} now"
        if "first" in old and old.get("first") != new.get("first"):
            return f"records_per_shard changed (the shard starts at record {old.get('first')} then, {new.get('first')} now)"
    return "the input changed"


def _describe(payload: Any) -> str:
    if isinstance(payload, dict) and "uri" in payload:
        if "count" in payload:
            first = int(payload.get("first", 0))
            return f"records {first}–{first + int(payload['count']) - 1} of {payload['uri']}"
        return f"file {payload['uri']}"
    return repr(payload)
