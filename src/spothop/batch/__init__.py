"""Batch jobs: an input split into shards, a function or command run on each, outputs exactly once.

The decorator is ``@spothop.batch`` (defined in the package root, which loads
this package first, so the name stays the decorator whatever is imported
later). This package's names are imported from it on first use::

    from spothop.batch import load_spec, run_worker, submit

so ``import spothop`` stays light (the on-instance agent imports it and must
not pull in pydantic or pyarrow).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spothop._lazy import lazy_exports

# name → the module of this package it is imported from on first use.
_LAZY: dict[str, str] = {
    "BatchFunction": "spothop.batch.function",
    "batch": "spothop.batch.function",
    "command_process": "spothop.batch.function",
    "to_bytes": "spothop.batch.function",
    "BatchShard": "spothop.batch.inputs",
    "plan_shards": "spothop.batch.inputs",
    "run_worker": "spothop.batch.runner",
    "submit": "spothop.batch.runner",
    "BatchInput": "spothop.batch.spec",
    "BatchSpec": "spothop.batch.spec",
    "load_spec": "spothop.batch.spec",
}

if TYPE_CHECKING:
    from spothop.batch.function import BatchFunction, batch, command_process, to_bytes
    from spothop.batch.inputs import BatchShard, plan_shards
    from spothop.batch.runner import run_worker, submit
    from spothop.batch.spec import BatchInput, BatchSpec, load_spec


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "BatchFunction",
    "BatchInput",
    "BatchShard",
    "BatchSpec",
    "batch",
    "command_process",
    "load_spec",
    "plan_shards",
    "run_worker",
    "submit",
    "to_bytes",
]
