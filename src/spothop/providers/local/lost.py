"""A local instance whose host died (or never started): failed, and billed until the cloud marks
it ended, as a real cloud bills a VM whose hypervisor went away.

:func:`reap` is what the provider runs on a live row it reads: a host process that is gone (or
one that never started: its launcher died after recording it, :func:`.boot.host_never_started`)
fails the instance, kills what is left of its processes (:func:`kill_leftovers`: its
watchdog, :mod:`.watchdog`, ends them with the host where it can), and writes the rest of its bill
(:func:`rest_of_bill`: from its host's last written line to the end) in the same transaction as
the end (``CloudStore.end_lost``), once, whoever finds it first.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spothop.providers.base import BillingRule, InstanceState
from spothop.providers.billing import BillingLine, billed_price_steps, billing_lines
from spothop.providers.local import isolation
from spothop.providers.local.boot import host_never_started
from spothop.providers.local.processes import (
    instance_processes,
    kill_group,
    kill_process,
    pid_alive,
)
from spothop.providers.local.store import CloudStore

PriceSteps = Callable[[str, str | None, str, float, float], list[tuple[float, float]]]


def reap(
    store: CloudStore,
    row: dict[str, Any],
    now: Callable[[], float],
    rule: BillingRule,
    price_steps: PriceSteps,
) -> dict[str, Any]:
    """``row`` as it stands, or failed and billed to its end when its host died or never
    started (module docstring)."""
    if not InstanceState(row["state"]).is_alive:
        return row
    if not row["host_pid"] and host_never_started(Path(row["directory"])):
        why = "its host never started (the launching process stopped first)"
    elif row["host_pid"] and not pid_alive(row["host_pid"]):
        why = "instance host died"
    else:
        return row
    fresh = store.instance(row["instance_id"]) or row
    # Read again: the host may have started, or ended the instance, meanwhile.
    if InstanceState(fresh["state"]).is_alive and bool(fresh["host_pid"]) == bool(row["host_pid"]):
        kill_leftovers(fresh)
        ended_at = now()
        lines, billed_s = rest_of_bill(store, fresh, ended_at, rule, price_steps)
        store.end_lost(
            row["instance_id"],
            lines,
            state=InstanceState.FAILED.value,
            end_reason=why,
            ended_at=ended_at,
            billed_seconds=billed_s,
        )
        fresh = store.instance(row["instance_id"]) or fresh
    return fresh


def kill_leftovers(row: dict[str, Any]) -> None:
    """SIGKILL what is left of the processes of an instance whose host died: where its watchdog
    (:mod:`.watchdog`) could not end them (no subreaper here, the watchdog killed too, a host
    of a spothop before it), the agent unit's process group (``worker_pgid``) and every process
    that /proc shows is the instance's (:func:`.processes.instance_processes`)."""
    if row["worker_pgid"]:
        kill_group(row["worker_pgid"], signal.SIGKILL)
    for pid in instance_processes(Path(row["directory"]) / isolation.ROOT_DIR):
        kill_process(pid, signal.SIGKILL)


def rest_of_bill(
    store: CloudStore,
    row: dict[str, Any],
    ended_at: float,
    rule: BillingRule,
    price_steps: PriceSteps,
) -> tuple[list[BillingLine], float]:
    """The bill of a running instance whose host died, from its host's last written line to
    ``ended_at``, and its billed seconds: a cloud bills a VM until it marks it ended, not
    until its hypervisor's last tick (the ledger charges ``running_at … ended_at``)."""
    running_at = row["running_at"]
    if running_at is None or ended_at <= running_at:
        return [], float(row["billed_seconds"] or 0.0)
    written = store.billing_rows(row["instance_id"])
    since = max((float(r["end_s"]) for r in written), default=float(running_at))
    billed_s = rule.billed_seconds(ended_at - running_at)
    if ended_at <= since:
        return [], billed_s
    if row["spot"]:
        steps = billed_price_steps(
            rule,
            float(row["launched_at"]),
            since,
            ended_at,
            lambda a, b: price_steps(row["region"], row["zone"], row["instance_type"], a, b),
        )
    else:
        steps = [(since, float(row["price_usd_per_hour"]))]
    return billing_lines(rule, running_at, ended_at, steps, since=since), billed_s
