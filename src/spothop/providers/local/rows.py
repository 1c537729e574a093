"""The local cloud's stored instance records, read: what one reads as, and whether it may be preempted.

A record is a row of :class:`~.store.CloudStore` (a dict), written by the
provider and by the instance's host.

- :func:`instance_of` is the :class:`~spothop.providers.base.Instance` a row
  reads as, field for field (money as the row's integer micro-dollars).
- :func:`preempt_lead_s` checks an injected interruption
  (:meth:`~spothop.providers.local.provider.LocalProvider.preempt`) before
  anything is written, and returns its lead time: only a live spot instance
  outside any reserved pool can be preempted, as on the real clouds (their
  interruption notices exist for spot instances only: an on-demand instance
  would die without a notice its agent could read); the lead is the cloud's
  unless given, and not negative; ``advance_s`` needs a cloud that gives an
  advance notice, and is positive. Each refusal is a
  :class:`~spothop.errors.ConfigError` saying what to do instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spothop.errors import ConfigError
from spothop.providers.base import Instance, InstanceState
from spothop.providers.local.world_spec import CloudSpec


def instance_of(cloud: str, row: Mapping[str, Any]) -> Instance:
    """The instance a stored row of ``cloud`` reads as."""
    return Instance(
        instance_id=row["instance_id"],
        provider=cloud,
        region=row["region"],
        zone=row["zone"],
        instance_type=row["instance_type"],
        spot=row["spot"],
        state=InstanceState(row["state"]),
        launched_at=row["launched_at"],
        price_usd_per_hour=row["price_usd_per_hour"],
        ended_at=row["ended_at"],
        running_at=row["running_at"],
        billed_seconds=row["billed_seconds"],
        cost_microusd=int(row["cost_micro_usd"]),
        notice_time=row["notice_time"],
        termination_time=row["termination_time"],
        metadata_url=row["metadata_url"],
        name=row["name"],
        tags=row["tags"],
        reservation=row.get("reservation"),
        state_reason=None if InstanceState(row["state"]).is_alive else row.get("end_reason"),
    )


def preempt_lead_s(
    instance_id: str,
    row: Mapping[str, Any],
    cloud: CloudSpec,
    lead_time_s: float | None,
    advance_s: float | None,
) -> float:
    """The lead time of a preemption of ``row`` (see the module docstring); ConfigError if refused."""
    if not InstanceState(row["state"]).is_alive:
        raise ConfigError(
            f"instance {instance_id} is {row['state']}; only a live instance can be preempted"
        )
    if row.get("reservation"):
        raise ConfigError(
            f"instance {instance_id} runs in the reserved pool {row['reservation']!r}: reserved "
            "capacity is never preempted; end it with `spothop cloud terminate`"
        )
    if not row["spot"]:
        # The imitated clouds reclaim spot capacity only, and their interruption notices
        # (AWS instance-action, GCP preempted, Azure Preempt, ...) exist for spot instances
        # only: a "preempted" on-demand instance would die without any notice its agent
        # could read. So it is refused, as no real cloud would do it.
        raise ConfigError(
            f"instance {instance_id} is on-demand: clouds reclaim only spot capacity, and only a spot "
            "instance's metadata carries an interruption notice; launch it as spot to test preemption, "
            "schedule a maintenance event with notice (`spothop cloud maintenance`), "
            "or end it with `spothop cloud terminate`"
        )
    lead = cloud.notice_lead_time_s if lead_time_s is None else lead_time_s
    if lead < 0:
        raise ConfigError(f"--lead-time must be ≥ 0 seconds, got {lead}")
    if advance_s is not None:
        if cloud.advance_notice_s is None:
            raise ConfigError(
                f"{cloud.name} gives no advance notice (its world entry has no 'advance_notice_s'); drop --advance"
            )
        if advance_s <= 0:
            raise ConfigError(f"--advance must be > 0 seconds, got {advance_s}")
    return lead
