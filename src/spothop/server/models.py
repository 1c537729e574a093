"""The user API's request bodies: pydantic models with a bound on every field.

Strings and lists are bounded by what a caller can need, numbers are finite
and within range; unknown fields are refused. The agent API's bodies are
derived from the wire dataclasses (:mod:`spothop.controlplane.bodies`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

MAX_SPEC_CHARS = 256 * 1024  # a job spec is a page of YAML; the body bound (1 MiB) is the hard one


class _User(BaseModel):
    model_config = ConfigDict(extra="forbid")


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
MountDest = Annotated[str, Field(min_length=1, max_length=4096)]


class MountCode(_User):
    """One ``file_mounts`` source uploaded by the client: its archive, and whether it is a file."""

    sha256: Sha256
    file: bool = False


class CodeBody(_User):
    """The archives a launch names (uploaded first: ``PUT /v1/code/{sha256}``)."""

    workdir: Sha256 | None = None
    file_mounts: Annotated[dict[MountDest, MountCode], Field(max_length=1000)] = {}


class JobBody(_User):
    spec: Annotated[str, Field(min_length=1, max_length=MAX_SPEC_CHARS)]
    filename: Annotated[str, Field(min_length=1, max_length=200)] = "job.yaml"
    code: CodeBody | None = None


class PlanBody(_User):
    spec: Annotated[str, Field(min_length=1, max_length=MAX_SPEC_CHARS)]
    filename: Annotated[str, Field(min_length=1, max_length=200)] = "job.yaml"
    providers: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=32)]], Field(max_length=20)
    ] = []
    limit: Annotated[int, Field(ge=1, le=1000)] = 10
    data_gib: Annotated[FiniteFloat, Field(ge=0, le=1e7)] = 0.0
    data_at: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    horizon_h: Annotated[FiniteFloat, Field(ge=0.001, le=1e5)] | None = None
