"""Tiered checkpoints: save in seconds, resume exactly, never load a bad one.

The public surface::

    from spothop.checkpoint import Checkpointer, Tier

    ckpt = Checkpointer("s3://bucket/run-42")          # or a folder; default under $SPOTHOP_HOME
    restored = ckpt.restore()                          # newest checkpoint that verifies, or None
    ...
    if ckpt.should_save():
        ckpt.save(state, step)                         # blocks only for the host copy
    ...
    ckpt.save(state, step, tier=Tier.EMERGENCY).wait() # on a preemption notice

PyTorch helpers are in :mod:`spothop.checkpoint.pytorch` (``TorchState``: save
with ``overlap``, ``prepare``, ``checkpoint_step`` under the agent, restore that
ranks agree on) and the Hugging Face callback in :mod:`spothop.checkpoint.hf`;
this package itself imports without torch. A checkpoint written by another world
size is restored re-sharded (:mod:`spothop.checkpoint.reshard`; mark sharded leaves
with ``save(sharded={pattern: Shard(...)})``). :class:`Preempted` is what a step
raises after its emergency checkpoint on the agent's final notice (exit 75).
"""

from spothop.checkpoint.admin import (
    CheckpointDetail,
    CheckpointInfo,
    LeafInfo,
    VerifyResult,
    WorldStep,
    describe_checkpoint,
    existing_store,
    list_checkpoints,
    list_worlds,
    verify_checkpoints,
)
from spothop.checkpoint.checkpointer import Checkpointer
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
from spothop.checkpoint.gc import GcPlan, collect
from spothop.checkpoint.interval import (
    FixedInterval,
    IntervalPolicy,
    YoungDalyInterval,
    daly_interval_s,
    young_interval_s,
)
from spothop.checkpoint.manifest import (
    FORMAT_VERSION,
    FileEntry,
    Manifest,
    Shard,
    ShardRule,
    Tier,
    WorldLayout,
)
from spothop.checkpoint.preemption import EXIT_PREEMPTED, Preempted
from spothop.checkpoint.restore import Restored, Validator
from spothop.checkpoint.rng import capture_rng, restore_rng
from spothop.checkpoint.saving import SaveHandle, SaveStats
from spothop.checkpoint.store import Store

__all__ = [
    "EXIT_PREEMPTED",
    "FORMAT_VERSION",
    "CheckpointConfigError",
    "CheckpointCorrupt",
    "CheckpointDetail",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointWriteError",
    "Checkpointer",
    "FileEntry",
    "FixedInterval",
    "FormatVersionError",
    "GcPlan",
    "IntervalPolicy",
    "LeafInfo",
    "Manifest",
    "NoValidCheckpoint",
    "ParentMissing",
    "Preempted",
    "ReshardError",
    "Restored",
    "SaveHandle",
    "SaveStats",
    "Shard",
    "ShardRule",
    "Store",
    "Tier",
    "ValidationFailed",
    "Validator",
    "VerifyResult",
    "WorldLayout",
    "WorldStep",
    "YoungDalyInterval",
    "capture_rng",
    "collect",
    "daly_interval_s",
    "describe_checkpoint",
    "existing_store",
    "list_checkpoints",
    "list_worlds",
    "restore_rng",
    "verify_checkpoints",
    "young_interval_s",
]
