"""Which GPU a checkpoint was made on, and whether this GPU may restore it.

The restore-side half of the hardware compatibility matrix
(:mod:`spothop.resources.compat`). Placement keeps a job on GPUs its
checkpoint may move to. This is the last word, on the instance, with the
manifest's own facts.

Contracts:

1. **At save** the manifest's ``made_on`` records ``{"gpu": <canonical name>}`` when this
   process knows its GPU (:func:`this_gpu`): the ``gpu=`` the checkpointer was given,
   else ``$SPOTHOP_GPU`` (the launcher sets it to the GPU of the offering it placed the
   attempt on), else the name CUDA reports when torch is already imported and has a
   device. A checkpoint made where none of these is known records nothing.
2. **At restore**, when the job opted in (``$SPOTHOP_CHECKPOINT_COMPAT`` is set, ``{}`` for the
   matrix's own rules) or the checkpointer was given ``gpu=``, a candidate made on GPU X
   is refused on GPU Y when the matrix refuses
   X → Y under the job's need (``$SPOTHOP_CHECKPOINT_COMPAT``, the spec's
   ``checkpoint.compatibility`` as JSON), with its memory need raised to the state's
   own size (the manifest's leaves, one rank's). It is refused as a validation
   failure whose text is the matrix's reason, so the restore falls back to an older
   checkpoint that this GPU may take. When none qualifies it raises
   :class:`~spothop.checkpoint.errors.NoValidCheckpoint` listing each reason. A
   checkpoint with no ``made_on``, or a process that does not know its own GPU, is
   not checked.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spothop.checkpoint.errors import CheckpointConfigError, ValidationFailed
from spothop.checkpoint.manifest import Manifest
from spothop.checkpoint.restore import Restored, Validator
from spothop.errors import ConfigError
from spothop.resources.compat import CompatNeed, compat_matrix
from spothop.resources.gpus import gpu_catalog

log = logging.getLogger("spothop.checkpoint")

GPU_ENV = "SPOTHOP_GPU"  # the canonical GPU name of the offering the attempt runs on
COMPAT_ENV = "SPOTHOP_CHECKPOINT_COMPAT"  # JSON: the spec's checkpoint.compatibility
GIB = 1024**3


def this_gpu(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """This process's GPU as the catalog names it (contract 1), or None when unknown."""
    env = os.environ if environ is None else environ
    name = explicit or env.get(GPU_ENV) or _cuda_device_name()
    if not name:
        return None
    model = gpu_catalog().lookup(name)
    if model is None:
        try:
            model = gpu_catalog().resolve(name)
        except ConfigError:
            log.warning("GPU %r is not in the catalog: checkpoints are not checked for it", name)
            return None
    return model.name


def _cuda_device_name() -> str | None:
    torch = sys.modules.get("torch")  # never imported here: only asked when the job uses it
    if torch is None:
        return None
    try:
        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception:  # no driver, a broken install: the GPU is simply unknown
        return None
    return None


def need_from_env(environ: Mapping[str, str] | None = None) -> CompatNeed:
    """``$SPOTHOP_CHECKPOINT_COMPAT`` as a :class:`CompatNeed` (nothing asked when unset)."""
    raw = (os.environ if environ is None else environ).get(COMPAT_ENV, "").strip()
    if not raw:
        return CompatNeed()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return CompatNeed(
            data.get("min_architecture"),
            data.get("min_compute_capability"),
            data.get("state_memory_gib"),
        )
    except (ValueError, TypeError, ConfigError) as exc:
        raise CheckpointConfigError(
            f"${COMPAT_ENV} must be a JSON object with min_architecture, "
            f"min_compute_capability and state_memory_gib; got {raw[:200]!r} ({exc})"
        ) from None


def state_gib(manifest: Manifest) -> float:
    """GiB of arrays one rank's checkpoint holds (what its GPU must at least fit)."""
    return sum(leaf.raw_bytes for leaf in manifest.leaves.values()) / GIB


@dataclass(frozen=True)
class HardwareCheck:
    """This process's GPU and the job's need; see the module contract."""

    gpu: str | None = None
    need: CompatNeed = field(default_factory=CompatNeed)
    enforce: bool = True  # False: record made_on, check nothing (the job did not opt in)

    @classmethod
    def from_env(
        cls, gpu: str | None = None, environ: Mapping[str, str] | None = None
    ) -> HardwareCheck:
        env = os.environ if environ is None else environ
        enforce = gpu is not None or COMPAT_ENV in env
        return cls(this_gpu(gpu, env), need_from_env(env), enforce)

    @property
    def made_on(self) -> dict[str, Any]:
        """What a manifest saved here records (empty when the GPU is unknown)."""
        return {"gpu": self.gpu} if self.gpu else {}

    def refusal(self, manifest: Manifest) -> str | None:
        """The matrix's reason this GPU may not restore ``manifest``; None when it may."""
        source = manifest.made_on.get("gpu") if manifest.made_on else None
        if not self.enforce or self.gpu is None or not source:
            return None
        verdict = compat_matrix().compatible(
            str(source), self.gpu, self.need.at_least(state_gib(manifest))
        )
        return None if verdict.ok else verdict.reason

    def validator(self, validate: Validator | None) -> Validator | None:
        """``validate`` with this check first (None when nothing is to be checked)."""
        if not self.enforce or self.gpu is None:
            return validate

        def checked(restored: Restored) -> bool:
            why = self.refusal(restored.manifest)
            if why is not None:
                raise ValidationFailed(why)
            return validate(restored) if validate is not None else True

        return checked
