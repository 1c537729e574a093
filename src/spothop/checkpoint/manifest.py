"""The manifest: what a checkpoint holds, and the commit that makes it exist.

Contract: a checkpoint's data files are written first and its manifest last,
in one atomic write. **The manifest being written is the commit; a checkpoint
without a manifest does not exist.** A reader trusts nothing the manifest does
not vouch for: every file it lists carries a sha256 and a size, and the
manifest carries a sha256 of its own body, so a flipped bit anywhere is caught.

File digests (format 2): a pack file is a sequence of stored chunk payloads
(its ``segments``, whose lengths the manifest lists and which tile the file
exactly). Its ``sha256`` is a Merkle-style root, ``sha256(FILE_DIGEST_DOMAIN
|| sha256(segment_0) || sha256(segment_1) || ...)``. For a raw chunk the
segment hash *is* the chunk's content hash, so a save hashes each byte once
instead of twice, and both sides can hash segments in parallel; a collision
in the root needs a sha256 collision at one of the two levels, so it detects
a flipped bit exactly as strongly as a whole-file sha256 does. Format 1 files
(no ``segments``) carry a plain sha256 of the whole file and are still read.

Format 3 is format 2 with BLAKE3 in place of sha256, for the segment hashes,
the chunks' content hashes and the root (``blake3(FILE_DIGEST_DOMAIN_V3 ||
blake3(segment_0) || ...)``): sha256 runs at ~0.6 GB/s per core on a CPU
without SHA instructions, slower than the disk it guards.

Format 4 is format 2 with XXH3-128 (``xxh3_128(FILE_DIGEST_DOMAIN_V4 ||
xxh3_128(segment_0) || ...)``, 16-byte digests). What these digests guard
against is damage (a torn or truncated write, a flipped bit on a disk or in
transit, a wrong file in place), not an adversary: whoever can rewrite a pack
file in the store can rewrite its manifest too, so no hash in the manifest
keeps them out. For damage, a 128-bit non-cryptographic hash misses a random
change with odds of 2^-128, as a cryptographic one does, and XXH3 runs at
10-20 GB/s on one core where BLAKE3 runs at 1.5-7: a restore reads every
byte and hashes it, and with BLAKE3 the hash cost more CPU than the read
(256 MiB from the page cache: 0.024 s to read, 0.034 s more to hash), so a
warm restore could not come near a plain read's speed. Storage systems draw
the same line (ZFS's default fletcher4, Btrfs's crc32c, S3's CRC checksums).
The content hashes that deltas compare are XXH3-128 too: two different
chunks of one training state sharing a 128-bit hash by chance is as unlikely
as a flipped bit slipping past.

Each :class:`FileEntry` knows its own hash (:class:`Digest`, from the format of
the manifest that lists it), so a delta over a base of an older format
verifies both. Where the ``xxhash`` package cannot be imported a save writes
format 3, and where ``blake3`` cannot either, format 2; a file whose hash
this Python cannot compute is reported as unreadable (naming the package to
install), never trusted.
The digest fields keep the name ``sha256`` (the manifest's JSON rows are
positional; the name is format 1's) whatever hash fills them.

Tensors are stored as chunks: each array leaf of the state is cut into
fixed-size pieces of at most ``chunk_bytes``, each piece hashed (sha256 of the
raw bytes) and stored raw or zstd-compressed inside a pack file. A delta's
chunk references may point into its ancestors' pack files; that is how a delta
stores only what changed and how restore follows the chain.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from spothop.checkpoint.errors import CheckpointConfigError, CheckpointCorrupt, FormatVersionError

_blake3: Any
try:
    import blake3 as _blake3
except ImportError:  # pragma: no cover - a core dependency; saves fall back to format 2 without it
    _blake3 = None
_xxhash: Any
try:
    import xxhash as _xxhash
except ImportError:  # pragma: no cover - a core dependency; saves fall back to format 3 without it
    _xxhash = None

# 4: XXH3-128 digests; 3: BLAKE3; 2: sha256 Merkle roots over segment hashes; 1: whole-file sha256
# (all read).
FORMAT_VERSION = 4
BLAKE3_FORMAT_VERSION = 3  # what a save writes where xxhash cannot be imported
SHA256_FORMAT_VERSION = 2  # where blake3 cannot either
FILE_DIGEST_DOMAIN = (
    b"spothop-pack-file-v2\0"  # keeps a root from equalling any plain sha256 of the same bytes
)
FILE_DIGEST_DOMAIN_V3 = b"spothop-pack-file-v3\0"
FILE_DIGEST_DOMAIN_V4 = b"spothop-pack-file-v4\0"
MANIFEST_NAME = "MANIFEST.json"


class Tier(StrEnum):
    """Where a checkpoint lives and what it is for."""

    LOCAL = "local"  # full snapshot on instance disk: survives a process restart, not the instance
    DURABLE = "durable"  # full checkpoint in the object store: the root of a delta chain
    EMERGENCY = "emergency"  # delta since the last durable checkpoint, written when time is short


class Codec(StrEnum):
    RAW = "raw"
    ZSTD = "zstd"


class Digest(StrEnum):
    """The hash behind a file's digest and its chunks' content hashes (fixed by the format)."""

    SHA256 = "sha256"  # formats 1 and 2
    BLAKE3 = "blake3"  # format 3
    XXH3 = "xxh3-128"  # format 4

    @classmethod
    def of_format(cls, version: int) -> Digest:
        if version >= FORMAT_VERSION:
            return cls.XXH3
        return cls.BLAKE3 if version == BLAKE3_FORMAT_VERSION else cls.SHA256

    @property
    def format_version(self) -> int:
        """The manifest format a save hashing with this digest writes."""
        return {
            Digest.XXH3: FORMAT_VERSION,
            Digest.BLAKE3: BLAKE3_FORMAT_VERSION,
            Digest.SHA256: SHA256_FORMAT_VERSION,
        }[self]

    @property
    def package(self) -> str:
        """The Python package that computes this hash (named in the error where it is missing)."""
        return {Digest.XXH3: "xxhash", Digest.BLAKE3: "blake3", Digest.SHA256: "hashlib"}[self]

    @property
    def available(self) -> bool:
        return _module(self) is not None


def _module(digest: Digest) -> Any:
    """The module that computes ``digest``, or None where it cannot be imported."""
    if digest is Digest.XXH3:
        return _xxhash
    return _blake3 if digest is Digest.BLAKE3 else hashlib


def default_digest() -> Digest:
    """What a save hashes with: XXH3-128 (format 4); BLAKE3 (format 3) where xxhash is missing;
    sha256 (format 2) where blake3 is missing too."""
    return next(d for d in (Digest.XXH3, Digest.BLAKE3, Digest.SHA256) if d.available)


@dataclass(frozen=True)
class FileEntry:
    """One data file of a checkpoint; ``path`` is relative to the store root."""

    path: str
    # Format 1: sha256 of the whole file; formats 2 and 3: :func:`file_root` of its segments.
    sha256: str
    size_bytes: int
    segments: tuple[int, ...] | None = None  # stored lengths, in file order; None: a format-1 file
    digest: Digest = Digest.XXH3  # the hash of ``sha256`` (not written: the format says it)


@dataclass(frozen=True)
class ChunkRef:
    """One stored chunk: where it lies (file, offset, stored size) and what it decodes to."""

    file: str
    offset: int
    stored_bytes: int
    raw_bytes: int
    sha256: str  # of the raw bytes (BLAKE3 in format 3): the content hash that deltas compare
    codec: Codec


@dataclass(frozen=True)
class LeafEntry:
    """One array leaf of the state: a NumPy array or a torch tensor, as chunks in order."""

    kind: str  # "numpy" or "torch"
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[ChunkRef, ...]

    @property
    def raw_bytes(self) -> int:
        return sum(c.raw_bytes for c in self.chunks)


class ShardRule(StrEnum):
    """How a sharded leaf's rows are split among the ranks (:mod:`spothop.checkpoint.reshard`)."""

    EVEN = "even"  # every rank the same number of rows: the length must divide by the world size
    BALANCED = (
        "balanced"  # like torch.tensor_split: the first ``length % world`` ranks get one more
    )
    PADDED = "padded"  # ceil(length / world) rows each, the last rank(s) padded with zeros


@dataclass(frozen=True)
class Shard:
    """A leaf that each rank holds one slice of, along ``dim``, in rank order.

    ``length`` is the leaf's true length along ``dim`` over the whole world (without padding);
    it is needed for :attr:`ShardRule.PADDED` and otherwise is the sum of the ranks' slices.
    """

    dim: int = 0
    rule: ShardRule = ShardRule.EVEN
    length: int | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "rule", ShardRule(self.rule))
        except ValueError:
            raise CheckpointConfigError(
                f"shard rule {self.rule!r} is not one of {', '.join(r.value for r in ShardRule)}"
            ) from None
        if self.dim < 0 or (self.length is not None and self.length < 0):
            raise CheckpointConfigError(
                f"Shard(dim={self.dim}, length={self.length}): both must be ≥ 0"
            )

    def to_json(self) -> dict[str, Any]:
        return {"dim": self.dim, "rule": self.rule.value, "length": self.length}


@dataclass(frozen=True)
class WorldLayout:
    """The distributed layout the checkpoint was written under (one manifest per rank)."""

    world_size: int = 1
    rank: int = 0
    local_world_size: int = 1


def world_from_environment() -> WorldLayout:
    """This process's layout from the launcher's environment (:func:`spothop.worker.world`)."""
    from spothop.worker.world import world

    shape = world()
    if shape.world_size == 1:
        return WorldLayout()
    if shape.rank is None:  # several processes on this node, and nothing says which one this is
        raise CheckpointConfigError(
            f"this node runs {shape.nproc_per_node} processes of a world of {shape.world_size} "
            "and the environment does not say which one this is (no RANK or LOCAL_RANK); pass "
            "Checkpointer(world=WorldLayout(world_size, rank, local_world_size)), e.g. from "
            "spothop.worker.world().for_local_rank(local_rank)"
        )
    return WorldLayout(shape.world_size, shape.rank, shape.nproc_per_node)


@dataclass(frozen=True)
class Manifest:
    """Everything needed to find, verify and rebuild one checkpoint."""

    checkpoint_id: str
    step: int
    wall_time_unix_s: float
    tier: Tier
    parent: str | None  # the checkpoint a delta builds on; None for a full checkpoint
    files: tuple[FileEntry, ...]
    leaves: Mapping[str, LeafEntry]
    tree: Any  # the state's structure as tagged JSON, with leaves as references
    rng: Mapping[str, Any] = field(default_factory=dict)
    data_position: Mapping[str, Any] = field(default_factory=dict)
    world: WorldLayout = WorldLayout()
    user_metadata: Mapping[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    sharding: Mapping[str, Shard] = field(default_factory=dict)  # leaf path -> how it is sharded
    made_on: Mapping[str, Any] = field(
        default_factory=dict
    )  # {"gpu": name} (checkpoint/hardware.py)

    @property
    def size_bytes(self) -> int:
        """Bytes this checkpoint itself wrote (its own files, not its ancestors')."""
        return sum(f.size_bytes for f in self.files)

    def to_json(self) -> str:
        body = _body(self)
        return json.dumps({"sha256": _digest(body), "manifest": body}, indent=1)


def sha256_digest(data: Any) -> bytes:
    """The raw sha256 digest of a bytes-like object, hashed with the GIL released.

    ``hashlib.sha256(data)`` holds the GIL for the whole buffer on CPython 3.11 (only
    ``update`` releases it), which serialised the hashing pool: two threads hashed 1 GiB in
    0.70 s, no faster than one; through ``update`` they take 0.43 s. Same digest either way.
    """
    hasher = hashlib.sha256()
    hasher.update(data)
    return hasher.digest()


def segment_digest(digest: Digest, data: Any) -> bytes:
    """The raw digest of one segment (or chunk) under ``digest``; every kind releases the GIL."""
    if digest is Digest.SHA256:
        return sha256_digest(data)
    hasher = segment_hasher(digest)
    hasher.update(data)
    return bytes(hasher.digest())


def segment_hasher(digest: Digest) -> Any:
    """An incremental hasher (``update``, ``digest``) whose digest equals :func:`segment_digest`'s
    of the bytes it was given; every kind releases the GIL in ``update``."""
    if digest is Digest.SHA256:
        return hashlib.sha256()
    module = _module(digest)
    if module is None:
        raise ImportError(
            f"format-{digest.format_version} checkpoints are hashed with {digest}: "
            f"pip install {digest.package}"
        )
    return module.xxh3_128() if digest is Digest.XXH3 else module.blake3()


_DOMAINS = {
    Digest.SHA256: FILE_DIGEST_DOMAIN,
    Digest.BLAKE3: FILE_DIGEST_DOMAIN_V3,
    Digest.XXH3: FILE_DIGEST_DOMAIN_V4,
}


def file_root(segment_digests: Iterable[bytes], digest: Digest) -> str:
    """A format-2, -3 or -4 file digest from its segments' raw digests, in order: the hash of the
    format's domain followed by every segment's digest."""
    root = segment_hasher(digest)
    root.update(_DOMAINS[digest])
    for part in segment_digests:
        root.update(part)
    return str(root.hexdigest())


def manifest_from_json(text: str | bytes, checkpoint_id: str) -> Manifest:
    """Parse and check a manifest; raises :class:`CheckpointCorrupt` or :class:`FormatVersionError`."""
    try:
        outer = json.loads(text)
        body = outer["manifest"]
        version = int(body["format_version"])
    except _MALFORMED as exc:
        raise CheckpointCorrupt(checkpoint_id, f"manifest is not readable ({exc!r})") from None
    if version > FORMAT_VERSION:
        raise FormatVersionError(checkpoint_id, version, FORMAT_VERSION)
    if outer.get("sha256") != _digest(body):
        raise CheckpointCorrupt(checkpoint_id, "manifest checksum does not match its body")
    try:
        return _from_body(body)
    except _MALFORMED as exc:
        raise CheckpointCorrupt(
            checkpoint_id, f"manifest has a malformed field ({exc!r})"
        ) from None


# What a damaged manifest can raise while it is read: bad JSON (ValueError), a missing key, a
# wrong type (a list where a mapping belongs: AttributeError), an index past the file table,
# Infinity where an integer belongs (OverflowError), nesting deeper than the parser's stack.
_MALFORMED = (
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
)


def _count(value: Any) -> int:
    """A whole number ≥ 0 (a step, a size, an offset, a dimension); ValueError otherwise."""
    whole = isinstance(value, int | str) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:  # a float must be whole: not 1.5, not Infinity or NaN
        raise ValueError(f"expected a whole number, got {value!r}")
    number = int(value)
    if number < 0:
        raise ValueError(f"expected a whole number >= 0, got {number}")
    return number


def _digest(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _body(m: Manifest) -> dict[str, Any]:
    # Chunk refs are written as compact rows against a table of file paths:
    # a 100 GB model has tens of thousands of chunks.
    chunk_files = sorted({c.file for leaf in m.leaves.values() for c in leaf.chunks})
    index = {path: i for i, path in enumerate(chunk_files)}
    leaves = {
        key: {
            "kind": leaf.kind,
            "dtype": leaf.dtype,
            "shape": list(leaf.shape),
            "chunks": [
                [index[c.file], c.offset, c.stored_bytes, c.raw_bytes, c.sha256, c.codec.value]
                for c in leaf.chunks
            ],
        }
        for key, leaf in m.leaves.items()
    }
    return {
        "format_version": m.format_version,
        "checkpoint_id": m.checkpoint_id,
        "step": m.step,
        "wall_time_unix_s": m.wall_time_unix_s,
        "tier": m.tier.value,
        "parent": m.parent,
        "files": [
            [f.path, f.sha256, f.size_bytes] + ([] if f.segments is None else [list(f.segments)])
            for f in m.files
        ],
        "chunk_files": chunk_files,
        "leaves": leaves,
        "tree": m.tree,
        "rng": dict(m.rng),
        "data_position": dict(m.data_position),
        "world": {
            "world_size": m.world.world_size,
            "rank": m.world.rank,
            "local_world_size": m.world.local_world_size,
        },
        "user_metadata": dict(m.user_metadata),
        "sharding": {key: shard.to_json() for key, shard in m.sharding.items()},
        **({"made_on": dict(m.made_on)} if m.made_on else {}),
    }


def _from_body(body: Mapping[str, Any]) -> Manifest:
    version = int(body["format_version"])
    chunk_files: list[str] = [str(name) for name in body["chunk_files"]]
    leaves = {
        str(key): LeafEntry(
            kind=str(raw["kind"]),
            dtype=str(raw["dtype"]),
            shape=tuple(_count(s) for s in raw["shape"]),
            chunks=tuple(
                ChunkRef(chunk_files[_count(f)], _count(o), _count(s), _count(r), str(h), Codec(c))
                for f, o, s, r, h, c in raw["chunks"]
            ),
        )
        for key, raw in body["leaves"].items()
    }
    world = body["world"]
    wall_time = float(body["wall_time_unix_s"])
    if not math.isfinite(wall_time):
        raise ValueError(f"wall_time_unix_s must be finite, got {wall_time}")
    return Manifest(
        checkpoint_id=str(body["checkpoint_id"]),
        step=_count(body["step"]),
        wall_time_unix_s=wall_time,
        tier=Tier(body["tier"]),
        parent=None if body["parent"] is None else str(body["parent"]),
        files=tuple(_file_entry(row, version) for row in body["files"]),
        leaves=leaves,
        tree=body["tree"],
        rng=dict(body["rng"]),
        data_position=dict(body["data_position"]),
        world=_world(world),
        user_metadata=dict(body["user_metadata"]),
        format_version=version,
        sharding={str(k): _shard(v) for k, v in body.get("sharding", {}).items()},
        made_on=dict(body.get("made_on", {})),
    )


def _shard(raw: Mapping[str, Any]) -> Shard:
    length = raw.get("length")
    return Shard(
        _count(raw["dim"]), ShardRule(raw["rule"]), None if length is None else _count(length)
    )


def _world(raw: Mapping[str, Any]) -> WorldLayout:
    layout = WorldLayout(
        _count(raw["world_size"]), _count(raw["rank"]), _count(raw["local_world_size"])
    )
    if not 0 <= layout.rank < layout.world_size:
        raise ValueError(f"rank {layout.rank} is not in a world of {layout.world_size}")
    return layout


def _file_entry(row: list[Any], version: int) -> FileEntry:
    path, digest, size, *rest = row
    if len(rest) > 1:
        raise ValueError(f"file row for {path!r} has {len(row)} fields")
    segments = tuple(_count(n) for n in rest[0]) if rest else None
    if segments is not None and (sum(segments) != _count(size) or any(n <= 0 for n in segments)):
        raise ValueError(f"segments of {path!r} do not tile its {size} bytes")
    # A row without segments is a whole-file sha256 (format 1's kind), whatever the format.
    kind = Digest.SHA256 if segments is None else Digest.of_format(version)
    return FileEntry(str(path), str(digest), _count(size), segments, kind)
