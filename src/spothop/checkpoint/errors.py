"""The checkpoint layer's errors.

They sit in spothop's one tree (see :mod:`spothop.errors`)::

    SpothopError
    ├── ConfigError
    │   └── CheckpointConfigError       a bad setting, URL or state value the checkpointer cannot store
    └── CheckpointError                 a checkpoint could not be written, read or trusted
        ├── CheckpointWriteError        the location is unwritable or full, or an upload failed
        ├── CheckpointCorrupt           a checksum mismatch, a truncated file, an unreadable manifest
        │   └── ParentMissing           a delta whose parent checkpoint is gone or does not verify
        ├── FormatVersionError          a manifest written by a newer spothop
        ├── NoValidCheckpoint           checkpoints exist but none verifies; ``reasons`` says why each
        ├── ReshardError                a checkpoint of another world size cannot be re-sharded to this one
        └── ValidationFailed            the user's validation hook rejected a restored checkpoint

A failed write never touches earlier checkpoints: the manifest is written last,
so a save that fails leaves at most manifest-less files, which do not count.
"""

from __future__ import annotations

from collections.abc import Sequence

from spothop.errors import ConfigError, SpothopError


class CheckpointConfigError(ConfigError):
    """A checkpointer setting or a state value is wrong; the message names it and the fix."""


class CheckpointError(SpothopError):
    """A checkpoint could not be written, read or trusted."""


class CheckpointWriteError(CheckpointError):
    """Writing failed (unwritable location, full disk, upload error); earlier checkpoints are untouched."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint's files do not match its manifest, or the manifest itself is damaged."""

    def __init__(self, checkpoint_id: str, reason: str) -> None:
        self.checkpoint_id = checkpoint_id
        self.reason = reason
        super().__init__(f"checkpoint {checkpoint_id}: {reason}")


class ParentMissing(CheckpointCorrupt):
    """A delta names a parent that is missing or does not verify, so it cannot be rebuilt."""


class FormatVersionError(CheckpointError):
    """The manifest was written by a newer format version than this spothop reads."""

    def __init__(self, checkpoint_id: str, found: int, supported: int) -> None:
        self.checkpoint_id = checkpoint_id
        self.found = found
        self.supported = supported
        super().__init__(
            f"checkpoint {checkpoint_id}: manifest format version {found} is newer than the "
            f"{supported} this spothop reads; upgrade spothop to load it"
        )


class NoValidCheckpoint(CheckpointError):
    """Checkpoints exist but none can be restored; ``reasons`` maps each id to why it was skipped."""

    def __init__(self, url: str, reasons: Sequence[tuple[str, str]]) -> None:
        self.url = url
        self.reasons = list(reasons)
        detail = "; ".join(f"{cid}: {why}" for cid, why in self.reasons)
        super().__init__(f"no checkpoint under {url} can be restored ({detail})")


class ReshardError(CheckpointError):
    """A checkpoint written by another world size cannot be re-sharded into this one (a sharded
    leaf that does not split, a leaf that differs per rank but is not marked sharded); the message
    names the leaf, its sizes and the fix. Every rank raises it alike."""


class ValidationFailed(CheckpointError):
    """The validation hook rejected a restored checkpoint; the next older one is tried."""
