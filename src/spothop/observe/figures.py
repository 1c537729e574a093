"""A job's figures as every surface shows them, each computed here once.

``spothop jobs``, ``spothop status``, ``launch``'s live view, ``spothop report`` (text and
JSON), the dashboard and the server's API all read a job's interruptions and its nodes' states
from these functions, so no two of them can disagree:

- **Interruptions** (:func:`interruption_count`): the job's attempts the cloud took, or gave a
  notice it would take (:func:`spothop.observe.events.interrupted`), one per attempt, so one
  per node an interruption hit. The job row's ``interruptions`` column is not read: nothing
  counts into it (a batch job's stayed 0 however often its workers were preempted).
- **Node states** (:func:`node_states`): derived from the attempts and the job's state, not the
  stored node rows, which the controller does not keep up to date (a succeeded job's nodes
  read ``pending``): a node is ``done`` once the job succeeded or one of its attempts did,
  ``running`` while one of its attempts runs, ``failed`` once the job failed, else the stored
  state.

:func:`with_figures` is the job record with both put in, what the fronts list and show.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, NodeState
from spothop.jobs.records import AttemptRecord, JobRecord, NodeRecord
from spothop.observe.events import interrupted

RUNNING_STATES = frozenset({AttemptState.RUNNING, AttemptState.NOTICED})


def interruption_count(attempts: Iterable[AttemptRecord]) -> int:
    """How many of ``attempts`` (one job's) the cloud interrupted (module contract)."""
    return sum(1 for a in attempts if interrupted(a))


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
