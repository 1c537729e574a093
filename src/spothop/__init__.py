"""spothop: GPU batch work on the cheapest reliable spot capacity, across clouds.

The public surface, re-exported here and imported on first use, so that
``import spothop`` loads only the standard library (the on-instance agent and
the worker SDK import it; pydantic, SQLAlchemy, numpy and torch come only with
the first name that needs them)::

    spothop.Checkpointer, spothop.TorchState            tiered checkpoints (spothop.checkpoint)
    spothop.open_queue                                  the shard queue (spothop.queue)
    @spothop.batch                                      a function as a batch job's per-shard work
    spothop.stop_requested(), on_stop(), seconds_left(),
      heartbeat(), checkpoint_requested(), saved()      the worker SDK (spothop.worker)
    spothop.world()                                     a multi-node group's shape (spothop.worker.world)
    spothop.get_provider(name)                          a cloud by name (spothop.providers.registry)
    spothop.load_catalog()                              every offering (spothop.resources.catalog)
    spothop.SpothopError and every error under it       the error tree (spothop.errors draws it)

``spothop.batch`` is the decorator; the batch package's functions are imported
from it by name (``from spothop.batch import submit, run_worker, load_spec``).
Everything else is in the subpackages, which are implementation unless their
own docstring says otherwise.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from spothop._lazy import lazy_exports
from spothop.errors import (
    AuthFailed,
    CapacityUnavailable,
    CatalogError,
    CatalogRowError,
    ConfigError,
    CurrencyError,
    InstanceNotFound,
    InvalidRequest,
    JobSpecError,
    NotFoundError,
    PriceTooLow,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    ServerAuthError,
    ServerConflict,
    ServerError,
    ServerForbidden,
    ServerNotFound,
    ServerRefused,
    ServerUnavailable,
    SpothopError,
    StorageUnreachable,
    StoreTooNew,
    StoreUnwritable,
    TopologyParseError,
    UnknownGpuError,
    ValueOutOfRange,
)

__version__ = "0.1.0"

# Loaded now, before anything can import one of its modules: importing
# ``spothop.batch.<module>`` later finds the package loaded and leaves the name
# ``spothop.batch`` alone, so it stays the decorator defined below. The package
# itself is light (its names are imported on first use).
importlib.import_module("spothop.batch")

# name → the module it is imported from on first use.
_LAZY: dict[str, str] = {
    "Checkpointer": "spothop.checkpoint",
    "TorchState": "spothop.checkpoint.pytorch",
    "open_queue": "spothop.queue",
    "get_provider": "spothop.providers.registry",
    "load_catalog": "spothop.resources.catalog",
    **dict.fromkeys(
        ("stop_requested", "on_stop", "seconds_left", "heartbeat", "checkpoint_requested", "saved"),
        "spothop.worker.sdk",
    ),
    **dict.fromkeys(("world", "World", "WorldConfigError"), "spothop.worker.world"),
    # The errors that live beside their package (the rest are imported above from spothop.errors).
    **dict.fromkeys(
        (
            "AgentError",
            "AgentConfigError",
            "EventFormatError",
            "ControlPlaneError",
            "ControlPlaneAuthError",
            "StoreRefused",
            "LogOffsetGap",
        ),
        "spothop.wire.errors",
    ),
    "AgentApiStartFailed": "spothop.server.agent_process",
    "CodeArchiveDamaged": "spothop.state.code_archives",
    "NoticeEndpointError": "spothop.agent.errors",
    **dict.fromkeys(
        (
            "CheckpointError",
            "CheckpointConfigError",
            "CheckpointWriteError",
            "CheckpointCorrupt",
            "ParentMissing",
            "FormatVersionError",
            "NoValidCheckpoint",
            "ReshardError",
            "ValidationFailed",
        ),
        "spothop.checkpoint.errors",
    ),
    **dict.fromkeys(
        (
            "IllegalTransition",
            "JobNotFound",
            "AttemptNotFound",
            "JobChanged",
            "JobLeaseLost",
            "JobFinished",
        ),
        "spothop.jobs.errors",
    ),
    **dict.fromkeys(
        ("ControllerRunning", "ControllerStartFailed"), "spothop.jobs.controller.daemon"
    ),
    **dict.fromkeys(("TraceError", "TraceNotFound"), "spothop.market.errors"),
    **dict.fromkeys(("NoCandidates", "NoCapacityNow"), "spothop.scheduler.errors"),
    "SimulationError": "spothop.scheduler.simulate.model",
    "UnknownJob": "spothop.observe.job_report",
    **dict.fromkeys(
        (
            "QueueError",
            "UnknownJobError",
            "MalformedShardError",
            "BatchSpecError",
            "UnknownLeaseError",
            "LeaseLost",
            "AlreadyCompletedError",
            "QueueUnavailableError",
        ),
        "spothop.queue.errors",
    ),
}

if TYPE_CHECKING:  # what type checkers and editors see; at run time each comes from _LAZY
    from spothop.agent.errors import NoticeEndpointError
    from spothop.checkpoint import Checkpointer
    from spothop.checkpoint.errors import (
        CheckpointConfigError,
        CheckpointCorrupt,
        CheckpointError,
        CheckpointWriteError,
        FormatVersionError,
        NoValidCheckpoint,
        ParentMissing,
        ReshardError,
        ValidationFailed,
    )
    from spothop.checkpoint.pytorch import TorchState
    from spothop.jobs.controller.daemon import ControllerRunning, ControllerStartFailed
    from spothop.jobs.errors import (
        AttemptNotFound,
        IllegalTransition,
        JobChanged,
        JobFinished,
        JobLeaseLost,
        JobNotFound,
    )
    from spothop.market.errors import TraceError, TraceNotFound
    from spothop.observe.job_report import UnknownJob
    from spothop.providers.registry import get_provider
    from spothop.queue import open_queue
    from spothop.queue.errors import (
        AlreadyCompletedError,
        BatchSpecError,
        LeaseLost,
        MalformedShardError,
        QueueError,
        QueueUnavailableError,
        UnknownJobError,
        UnknownLeaseError,
    )
    from spothop.resources.catalog import load_catalog
    from spothop.scheduler.errors import NoCandidates, NoCapacityNow
    from spothop.scheduler.simulate.model import SimulationError
    from spothop.server.agent_process import AgentApiStartFailed
    from spothop.state.code_archives import CodeArchiveDamaged
    from spothop.wire.errors import (
        AgentConfigError,
        AgentError,
        ControlPlaneAuthError,
        ControlPlaneError,
        EventFormatError,
        LogOffsetGap,
        StoreRefused,
    )
    from spothop.worker.sdk import (
        checkpoint_requested,
        heartbeat,
        on_stop,
        saved,
        seconds_left,
        stop_requested,
    )
    from spothop.worker.world import World, WorldConfigError, world


def batch(fn: Any) -> Any:
    """``@spothop.batch``: mark ``process(shard) -> output`` as a batch job's per-shard work.

    Returns a :class:`spothop.batch.BatchFunction` (still callable as the plain
    function) that :func:`spothop.batch.run_worker` and ``spothop queue work`` run.
    """
    from spothop.batch.function import batch as make

    return make(fn)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "AgentApiStartFailed",
    "AgentConfigError",
    "AgentError",
    "AlreadyCompletedError",
    "AttemptNotFound",
    "AuthFailed",
    "BatchSpecError",
    "CapacityUnavailable",
    "CatalogError",
    "CatalogRowError",
    "CheckpointConfigError",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointWriteError",
    "Checkpointer",
    "CodeArchiveDamaged",
    "ConfigError",
    "ControlPlaneAuthError",
    "ControlPlaneError",
    "ControllerRunning",
    "ControllerStartFailed",
    "CurrencyError",
    "EventFormatError",
    "FormatVersionError",
    "IllegalTransition",
    "InstanceNotFound",
    "InvalidRequest",
    "JobChanged",
    "JobFinished",
    "JobLeaseLost",
    "JobNotFound",
    "JobSpecError",
    "LeaseLost",
    "LogOffsetGap",
    "MalformedShardError",
    "NoCandidates",
    "NoCapacityNow",
    "NoValidCheckpoint",
    "NotFoundError",
    "NoticeEndpointError",
    "ParentMissing",
    "PriceTooLow",
    "ProviderError",
    "QueueError",
    "QueueUnavailableError",
    "QuotaExceeded",
    "RateLimited",
    "ReshardError",
    "ServerAuthError",
    "ServerConflict",
    "ServerError",
    "ServerForbidden",
    "ServerNotFound",
    "ServerRefused",
    "ServerUnavailable",
    "SimulationError",
    "SpothopError",
    "StorageUnreachable",
    "StoreRefused",
    "StoreTooNew",
    "StoreUnwritable",
    "TopologyParseError",
    "TorchState",
    "TraceError",
    "TraceNotFound",
    "UnknownGpuError",
    "UnknownJob",
    "UnknownJobError",
    "UnknownLeaseError",
    "ValidationFailed",
    "ValueOutOfRange",
    "World",
    "WorldConfigError",
    "__version__",
    "batch",
    "checkpoint_requested",
    "get_provider",
    "heartbeat",
    "load_catalog",
    "on_stop",
    "open_queue",
    "saved",
    "seconds_left",
    "stop_requested",
    "world",
]
