"""The API's request bodies: pydantic models with a bound on every field.

Strings are bounded by the columns they go to (ids 128, providers 32, an
event id 64), numbers are finite and within what the database stores
(``INT32_MAX`` for integer columns), lists by what a caller can need. Unknown
fields are refused in the user API's bodies; the agent API's bodies ignore
them, so an older server takes a newer agent's additions (its events keep
theirs whole: they are stored as sent).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from spothop.agent.controlplane.http import EVENTS_BATCH

INT32_MAX = 2**31 - 1
Id = Annotated[str, Field(min_length=1, max_length=128)]
OptionalId = Annotated[str, Field(max_length=128)]
Place = Annotated[str, Field(max_length=128)]
Provider = Annotated[str, Field(max_length=32)]
UnixTime = Annotated[FiniteFloat, Field(ge=0, le=1e11)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
MAX_SPEC_CHARS = 256 * 1024  # a job spec is a page of YAML; the body bound (1 MiB) is the hard one


class _Agent(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RegistrationBody(_Agent):
    instance_id: Id
    provider: Provider = ""
    region: Place = ""
    zone: Place = ""
    instance_type: Place = ""
    job_id: OptionalId = ""
    worker_id: OptionalId = ""
    protocol: Annotated[str, Field(max_length=64)] = ""
    notice_blind: bool = False
    reasons: Annotated[list[Annotated[str, Field(max_length=1000)]], Field(max_length=50)] = []
    time_unix_s: UnixTime


class HeartbeatBody(_Agent):
    instance_id: Id
    worker_id: OptionalId = ""
    time_unix_s: UnixTime
    state: Annotated[str, Field(min_length=1, max_length=32)]
    worker_pid: Count | None = None
    worker_restarts: Count = 0
    worker_heartbeat_unix_s: UnixTime | None = None
    notice_blind: bool = False
    job_id: OptionalId = ""
    provider: Provider = ""
    worker_step: Count | None = None


class EventBody(_Agent):
    """The fields every event has, checked; the event's own fields pass through to the event model."""

    model_config = ConfigDict(extra="allow")
    kind: Annotated[str, Field(min_length=1, max_length=32)]
    event_id: Annotated[str, Field(min_length=1, max_length=64)]
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 1
    instance_id: Id
    provider: Provider = ""
    region: Place = ""
    zone: Place = ""
    instance_type: Place = ""
    job_id: OptionalId = ""
    worker_id: OptionalId = ""
    time_unix_s: UnixTime


class EventsBody(_Agent):
    events: Annotated[list[EventBody], Field(max_length=EVENTS_BATCH)]


class ReleaseBody(_Agent):
    worker_id: Id


class AckBody(_Agent):
    pass


class _User(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobBody(_User):
    spec: Annotated[str, Field(min_length=1, max_length=MAX_SPEC_CHARS)]
    filename: Annotated[str, Field(min_length=1, max_length=200)] = "job.yaml"


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


def event_dict(body: EventBody) -> dict[str, Any]:
    return body.model_dump()
