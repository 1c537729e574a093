"""Batch jobs: an input split into shards, a function or command run on each, outputs exactly once.

``spothop.batch`` is both this module and the decorator: ``@spothop.batch``
calls :func:`batch`, while ``spothop.batch.submit`` and friends are the
module's functions.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from spothop.batch.function import BatchFunction, batch, command_process, to_bytes
from spothop.batch.inputs import BatchShard, plan_shards
from spothop.batch.runner import run_worker, submit
from spothop.batch.spec import BatchInput, BatchSpec, load_spec

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


class _CallableModule(types.ModuleType):
    """The module, callable as the :func:`batch` decorator."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return batch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
