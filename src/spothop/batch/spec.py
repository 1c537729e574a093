"""The batch job spec: what to split into shards, what runs on each, where outputs go.

::

    name: embed-2024-06
    input:
      records: s3://corpus/docs.jsonl     # or .parquet; or files: [uri, uri, …]
      records_per_shard: 1000
    function: mypkg.embed:process         # or command: [python, embed.py]
    output: s3://corpus/embeddings/
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from spothop.bounds import SECONDS_PER_DAY, Bound
from spothop.errors import NotFoundError
from spothop.queue.errors import BatchSpecError
from spothop.queue.model import DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS, JOB_NAME_PATTERN

DEFAULT_RECORDS_PER_SHARD = 1000
# Numbers of a spec, checked with spothop.bounds (a NaN, an infinity or an absurd value names the field):
RECORDS_PER_SHARD = Bound(1, 10**9, "records", integer=True)
LEASE_S = Bound(
    0, SECONDS_PER_DAY, "s", low_open=True
)  # a lease is heartbeated; a day covers any pause
MAX_ATTEMPTS = Bound(1, 10_000, "attempts", integer=True)
RECORD_SUFFIXES = (".jsonl", ".parquet")


class BatchInput(BaseModel):
    """Exactly one of ``files`` (one shard per file or URI) or ``records`` (a JSONL or Parquet file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: list[str] | None = None
    records: str | None = None
    records_per_shard: Annotated[int, RECORDS_PER_SHARD.annotated("records_per_shard")] = (
        DEFAULT_RECORDS_PER_SHARD
    )

    @model_validator(mode="after")
    def _one_source(self) -> BatchInput:
        if (self.files is None) == (self.records is None):
            raise ValueError(
                "give exactly one of 'files' (a list of files or URIs) or 'records' (a JSONL or Parquet file)"
            )
        if self.files is not None and not self.files:
            raise ValueError("'files' is empty: list at least one file or URI")
        if self.records is not None and not self.records.endswith(RECORD_SUFFIXES):
            raise ValueError(
                f"'records' must end with one of {', '.join(RECORD_SUFFIXES)}, got {self.records!r}"
            )
        return self


class BatchSpec(BaseModel):
    """A batch job. ``function`` (``module:attribute``) or ``command`` runs per shard; neither
    when the function is given in code (``@spothop.batch``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=JOB_NAME_PATTERN.pattern)]
    input: BatchInput
    output: Annotated[str, Field(min_length=1)]
    function: Annotated[str | None, Field(pattern=r"^[\w.]+:[\w.]+$")] = None
    command: Annotated[list[str] | None, Field(min_length=1)] = None
    queue: str | None = None
    lease_s: Annotated[float, LEASE_S.annotated("lease_s")] = DEFAULT_LEASE_S
    max_attempts: Annotated[int, MAX_ATTEMPTS.annotated("max_attempts")] = DEFAULT_MAX_ATTEMPTS

    @model_validator(mode="after")
    def _one_runner(self) -> BatchSpec:
        if self.function is not None and self.command is not None:
            raise ValueError("give 'function' or 'command', not both")
        return self


def load_spec(source: Mapping[str, Any] | Path | str) -> BatchSpec:
    """Validate a spec from a mapping or a YAML file; :class:`BatchSpecError` names each bad field."""
    where = ""
    if isinstance(source, Path | str):
        where = f"{source}: "
        try:
            source = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFoundError(
                f"{where}the batch spec does not exist; give a YAML file (docs/queue.md)"
            ) from None
        except UnicodeDecodeError:
            raise BatchSpecError(
                f"{where}cannot read the batch spec: not a text (UTF-8 YAML) file"
            ) from None
        except (OSError, yaml.YAMLError) as exc:
            raise BatchSpecError(f"{where}cannot read the batch spec: {exc}") from exc
        if not isinstance(source, Mapping):
            raise BatchSpecError(
                f"{where}a batch spec is a mapping of fields, got {type(source).__name__}"
            )
    try:
        return BatchSpec.model_validate(dict(source))
    except ValidationError as exc:
        raise BatchSpecError(where + "; ".join(_describe(e) for e in exc.errors())) from exc


def _describe(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "spec"
    return f"{field}: {error['msg'].removeprefix('Value error, ')}"
