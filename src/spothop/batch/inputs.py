"""Splitting a batch input into shards, and reading one shard back.

A shard's payload points at its data (a URI, a byte range, a row range); it
never carries the data, so the queue stays small however big the input.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fsspec

from spothop.queue.errors import BatchSpecError, MalformedShardError
from spothop.queue.model import Shard

if TYPE_CHECKING:  # only an annotation: a worker reading its shards never loads pydantic
    from spothop.batch.spec import BatchInput

SHARD_ID_DIGITS = 6


def shard_id(index: int) -> str:
    return f"shard-{index:0{SHARD_ID_DIGITS}d}"


def plan_shards(spec: BatchInput) -> list[Shard]:
    """The input as shards: one per file, or ``records_per_shard`` records each."""
    if spec.files is not None:
        return [Shard(shard_id(i), {"uri": uri}) for i, uri in enumerate(spec.files)]
    assert spec.records is not None  # the spec validator guarantees one of the two
    try:
        if spec.records.endswith(".parquet"):
            return _plan_parquet(spec.records, spec.records_per_shard)
        return _plan_jsonl(spec.records, spec.records_per_shard)
    except (
        OSError,
        ValueError,
    ) as exc:  # missing file, no access, not Parquet (pyarrow raises ValueError kinds)
        raise BatchSpecError(f"input.records: cannot read {spec.records!r}: {exc}") from exc


def _plan_jsonl(uri: str, per_shard: int) -> list[Shard]:
    """Byte ranges of ``per_shard`` lines each, so a worker reads only its own part."""
    shards: list[Shard] = []
    start = offset = count = first = 0
    with fsspec.open(uri, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            check_text_line(line, uri, number)
            offset += len(line)
            if line.strip():
                count += 1
            if count == per_shard:
                shards.append(_jsonl_shard(len(shards), uri, start, offset, first, count))
                start, first, count = offset, first + count, 0
    if count:
        shards.append(_jsonl_shard(len(shards), uri, start, offset, first, count))
    return shards


def check_text_line(line: bytes, uri: str, number: int) -> None:
    """:class:`BatchSpecError` unless ``line`` (line ``number`` of ``uri``) is UTF-8 text with no
    NUL: a binary file named ``.jsonl`` is no JSON Lines, and its shards could never be read."""
    try:
        if b"\x00" in line:
            raise UnicodeDecodeError("utf-8", line, line.index(b"\x00"), len(line), "a NUL byte")
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BatchSpecError(
            f"{uri}: line {number} is not UTF-8 text ({exc.reason}): a .jsonl input holds one "
            "JSON record per line; give the file its own suffix (each file one shard) or convert it"
        ) from None


def check_jsonl_head(uri: str, head_bytes: int = 1 << 16) -> None:
    """:func:`check_text_line`'s rule over the first ``head_bytes`` of a JSON Lines file, at
    launch: cheap, and it catches a binary file before anything is paid for. A character the
    head cuts in two is left to the enqueue, which reads the whole file."""
    with fsspec.open(uri, "rb") as handle:
        head = handle.read(head_bytes)
    found = [head.find(b"\x00")]
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as exc:
        found.append(exc.start)
    bad = min((at for at in found if at >= 0), default=-1)
    if bad >= 0:
        line_start = head.rfind(b"\n", 0, bad) + 1
        line_end = head.find(b"\n", bad)
        check_text_line(
            head[line_start : line_end if line_end >= 0 else bad + 1],
            uri,
            head.count(b"\n", 0, bad) + 1,
        )


def _jsonl_shard(index: int, uri: str, start: int, end: int, first: int, count: int) -> Shard:
    return Shard(
        shard_id(index),
        {"uri": uri, "offset": start, "length": end - start, "first": first, "count": count},
    )


def _plan_parquet(uri: str, per_shard: int) -> list[Shard]:
    import pyarrow.parquet as pq

    with fsspec.open(uri, "rb") as handle:
        rows = pq.ParquetFile(handle).metadata.num_rows
    return [
        Shard(shard_id(i), {"uri": uri, "first": first, "count": min(per_shard, rows - first)})
        for i, first in enumerate(range(0, rows, per_shard))
    ]


@dataclass(frozen=True)
class BatchShard:
    """What ``process(shard)`` receives: the shard's id and payload, and readers for its data."""

    id: str
    payload: Any

    @property
    def uri(self) -> str:
        return str(self.payload["uri"])

    def read_bytes(self) -> bytes:
        """The whole file of a file shard, or the shard's byte range of a JSONL file."""
        with fsspec.open(self.uri, "rb") as handle:
            if "offset" in self.payload:
                handle.seek(self.payload["offset"])
                return bytes(handle.read(self.payload["length"]))
            return bytes(handle.read())

    def records(self) -> list[dict[str, Any]]:
        """The shard's records (JSONL lines or Parquet rows), in input order."""
        if self.uri.endswith(".parquet"):
            return self._parquet_rows()
        rows = []
        for number, line in enumerate(self.read_bytes().splitlines()):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise MalformedShardError(
                        f"{self.uri}: record {self.payload.get('first', 0) + number} is not JSON: {exc}"
                    ) from exc
        return rows

    def _parquet_rows(self) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        first, count = int(self.payload["first"]), int(self.payload["count"])
        out: list[dict[str, Any]] = []
        with fsspec.open(self.uri, "rb") as handle:
            parquet = pq.ParquetFile(handle)
            row = 0
            for group in range(parquet.num_row_groups):
                size = parquet.metadata.row_group(group).num_rows
                if row + size > first and row < first + count:
                    table = parquet.read_row_group(group)
                    lo = max(first - row, 0)
                    out.extend(table.slice(lo, first + count - row - lo).to_pylist())
                row += size
        return out
