"""Jobs: the spec a user writes, its lifecycle, its store and the controller.

Names re-exported here are imported on first use (``from spothop.jobs import
load_job``), so importing one module of the package loads only what it needs::

    JobSpec, load_job, check_reachable      a validated job file (spothop.jobs.spec; docs/jobs.md)
    JobKind, MarketChoice, Tolerance        the spec's choices
    JobState, AttemptState, EndReason       the lifecycle (spothop.jobs.lifecycle; docs/state.md, "Jobs")
    JobStore                                jobs, attempts and events in the store (spothop.jobs.store)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spothop._lazy import lazy_exports

# name → the module of this package it is imported from on first use; one line a name.
_LAZY: dict[str, str] = {
    "AttemptState": "spothop.jobs.lifecycle",
    "EndReason": "spothop.jobs.lifecycle",
    "JobState": "spothop.jobs.lifecycle",
    "JobStore": "spothop.jobs.store",
    "JobKind": "spothop.jobs.spec",
    "JobSpec": "spothop.jobs.spec",
    "MarketChoice": "spothop.jobs.spec",
    "Tolerance": "spothop.jobs.spec",
    "load_job": "spothop.jobs.spec",
    "check_reachable": "spothop.jobs.reachable",
}

if TYPE_CHECKING:
    from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
    from spothop.jobs.reachable import check_reachable
    from spothop.jobs.spec import JobKind, JobSpec, MarketChoice, Tolerance, load_job
    from spothop.jobs.store import JobStore

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "AttemptState",
    "EndReason",
    "JobKind",
    "JobSpec",
    "JobState",
    "JobStore",
    "MarketChoice",
    "Tolerance",
    "check_reachable",
    "load_job",
]
