"""A job's figures as every surface shows them, each computed here once.

``spothop jobs``, ``spothop status``, ``launch``'s live view, ``spothop report`` (text and
JSON), the dashboard and the server's API all read a job's interruptions and its nodes' states
from these functions, so no two of them can disagree:

- **Interruptions** (:func:`interruption_count`): the job's attempts the cloud took, or gave a
  final notice it would take, whatever ended them after (an advance notice alone does not
  count): :func:`spothop.jobs.lifecycle.interrupted`, the rule the controller's
  ``max_interruptions`` reads too, one per attempt, so one
  per node an interruption hit. The job row's ``interruptions`` column is not read: nothing
  counts into it (a batch job's stayed 0 however often its workers were preempted).
- **Node states** (:func:`node_states`): derived from the attempts and the job's state, not the
  stored node rows, which the controller does not keep up to date (a succeeded job's nodes
  read ``pending``): a node is ``done`` once the job succeeded or one of its attempts did,
  ``running`` while one of its attempts runs, ``failed`` once the job failed, else the stored
  state.
- **Spend so far** (:func:`spend_usd`): each attempt's price from running until it ended, or
  until now on its provider's clock (a local cloud's simulated one): ``status``' and the
  dashboard's ``cost_usd``. The report's cost is the ledger's (billing minimums, the cloud's
  own bill): another figure, under another name.

:func:`with_figures` is the job record with both put in, what the fronts list and show.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, NodeState
from spothop.jobs.records import AttemptRecord, JobRecord, NodeRecord

RUNNING_STATES = frozenset({AttemptState.RUNNING, AttemptState.NOTICED})


def interruption_count(attempts: Iterable[AttemptRecord]) -> int:
    """How many of ``attempts`` (one job's) the cloud interrupted (module contract)."""
    return sum(1 for a in attempts if a.interrupted)


def node_states(job: JobRecord, attempts: Sequence[AttemptRecord]) -> tuple[NodeRecord, ...]:
    """``job``'s nodes with the states its ``attempts`` show (module contract)."""
    return tuple(replace(n, state=_node_state(job, n, attempts)) for n in job.nodes)


def _node_state(job: JobRecord, node: NodeRecord, attempts: Sequence[AttemptRecord]) -> NodeState:
    own = [a for a in attempts if a.node == node.node]
    if job.state is JobState.SUCCEEDED or any(a.end_reason is EndReason.SUCCEEDED for a in own):
        return NodeState.DONE
    if job.state is JobState.FAILED:
        return NodeState.FAILED
    if not job.state.final and any(a.state in RUNNING_STATES for a in own):
        return NodeState.RUNNING
    return node.state


def with_figures(job: JobRecord, attempts: Sequence[AttemptRecord]) -> JobRecord:
    """``job`` with its interruptions and node states as :func:`interruption_count` and
    :func:`node_states` give them from its ``attempts``."""
    return replace(
        job, interruptions=interruption_count(attempts), nodes=node_states(job, attempts)
    )


def spend_usd(attempts: Iterable[AttemptRecord]) -> float:
    """What ``attempts`` cost so far at their prices, each from running until it ended (or now)."""
    clocks: dict[str, float] = {}
    spend = 0.0
    for a in attempts:
        if a.running_unix_s is not None:
            # Attempt times are on the provider's clock (jobs/controller/clock.py): so is "now".
            until = a.ended_unix_s if a.ended_unix_s is not None else _now_on(a.provider, clocks)
            spend += a.price_usd_per_hour * max(0.0, until - a.running_unix_s) / 3600
    return spend


def _now_on(provider: str, cache: dict[str, float]) -> float:
    """Now on ``provider``'s clock: a local cloud's simulated one, the wall for every real cloud
    (making a real cloud's adapter would look for credentials; its clock is the wall anyway)."""
    if provider not in cache:
        from spothop.jobs.controller.clock import provider_now

        try:
            made = _local_provider(
                provider, os.environ.get("SPOTHOP_HOME"), os.environ.get("SPOTHOP_WORLD")
            )
        except Exception:  # no world here: the wall
            made = None
        cache[provider] = provider_now(made)
    return cache[provider]


@functools.lru_cache(maxsize=16)
def _local_provider(name: str, _home: str | None, _world: str | None) -> Any:
    """The local cloud's provider called ``name`` (None: not one of the world's clouds), made
    once per process for a home and a world file.

    Naming the world's clouds and making a provider load the world (its YAML, catalogs and
    replayed traces: about 0.1 s of CPU each for the demo world), and ``spothop launch``
    follows a job with a status every 0.5 s: done afresh each time, that was 95 CPU seconds
    of a 10-minute ``make run`` on 2 cores. The provider's clock reads the stored anchor on
    every call, so a kept one tells the time a new one would.
    """
    from spothop.providers.registry import LOCAL_FAMILY, get_provider, members

    return get_provider(name) if name in members(LOCAL_FAMILY) else None
