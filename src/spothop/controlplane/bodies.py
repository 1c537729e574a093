"""The agent API's request bodies: pydantic models derived from the wire dataclasses, not written again.

Each body is the fields of its :mod:`spothop.wire` dataclass, with the bounds
declared there (:mod:`spothop.wire.fields`) turned into pydantic's: strings by
the columns they go to, numbers finite and within what the database stores,
lists by what a caller can need; a field is required as
:func:`~spothop.wire.fields.wire_fields` says. Unknown fields are ignored, so
an older server takes a newer agent's additions (its events keep theirs
whole: they are stored as sent). ``tests/controlplane/test_wire_schema.py``
compares the server's OpenAPI document with the dataclasses.

The server imports this module (pydantic); the agent never does.
"""

from __future__ import annotations

import math
import types
import typing
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, create_model, model_validator

from spothop.wire.contract import EVENTS_BATCH, Heartbeat, LeaseRelease, Registration
from spothop.wire.events import AgentEvent
from spothop.wire.fields import EventKind, Limits, WireField, wire_fields


class _Agent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    if TYPE_CHECKING:  # a derived body's fields are the wire dataclass's: typed there, Any here

        def __getattr__(self, name: str) -> Any: ...


def pydantic_type(annotation: Any) -> Any:
    """``annotation`` of a wire field as pydantic checks it: :class:`Limits` as ``Field`` bounds,
    ``tuple[X, ...]`` as a list, ``float`` finite; other markers (``WireDefault``) dropped."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        inner = pydantic_type(annotation.__origin__)
        bounds = [_field(mark) for mark in annotation.__metadata__ if isinstance(mark, Limits)]
        return Annotated[(inner, *bounds)] if bounds else inner
    if origin is tuple:
        item, more = typing.get_args(annotation)
        assert more is Ellipsis, f"a wire tuple is homogeneous: {annotation}"
        return list[pydantic_type(item)]  # type: ignore[misc]
    if origin in (Union, types.UnionType):
        return Union[tuple(pydantic_type(arg) for arg in typing.get_args(annotation))]  # noqa: UP007
    if annotation is float:
        return FiniteFloat
    return annotation


def _field(limits: Limits) -> Any:
    bounds: dict[str, Any] = {
        "min_length": limits.min_len,
        "max_length": limits.max_len,
        "ge": limits.ge,
        "le": limits.le,
    }
    return Field(**{k: v for k, v in bounds.items() if v is not None})


def body_model(
    name: str,
    fields: typing.Iterable[WireField],
    base: type[BaseModel] = _Agent,
    doc: str | None = None,
) -> type[BaseModel]:
    """The pydantic model ``name`` with ``fields`` in their order (required ones with ``...``)."""
    definitions: dict[str, Any] = {
        f.name: (pydantic_type(f.annotation), ... if f.required else _default(f.default))
        for f in fields
    }
    model: type[BaseModel] = create_model(
        name, __base__=base, __module__=__name__, __doc__=doc, **definitions
    )
    return model


def _default(value: Any) -> Any:
    """A wire default as its pydantic field holds it: a tuple is a list there (see pydantic_type)."""
    return list(value) if isinstance(value, tuple) else value


class _Event(_Agent):
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _finite(self) -> _Event:
        """An event's own fields pass through as sent, but as JSON: no NaN or infinity in them
        (PostgreSQL's JSON refuses them, and no reader expects one)."""
        for name, value in (self.model_extra or {}).items():
            if not _all_finite(value):
                raise ValueError(f"{name} holds NaN or an infinity; send finite numbers only")
        return self


def _all_finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    return True


if TYPE_CHECKING:  # what type checkers see: the classes, their fields Any (see _Agent)

    class RegistrationBody(_Agent): ...

    class HeartbeatBody(_Agent): ...

    class EventBody(_Event): ...

    class ReleaseBody(_Agent): ...

else:
    RegistrationBody = body_model("RegistrationBody", wire_fields(Registration))
    HeartbeatBody = body_model("HeartbeatBody", wire_fields(Heartbeat))
    EventBody = body_model(
        "EventBody",
        (WireField("kind", EventKind), *wire_fields(AgentEvent)),  # kind: a ClassVar of the events
        base=_Event,
        doc="The fields every event has, checked; the event's own fields pass through to the event model.",
    )
    ReleaseBody = body_model("ReleaseBody", wire_fields(LeaseRelease))


class EventsBody(_Agent):
    events: Annotated[list[EventBody], Field(max_length=EVENTS_BATCH)]


class AckBody(_Agent):
    pass


def event_dict(body: EventBody) -> dict[str, Any]:
    """The event as sent (an :data:`EventBody`), for :func:`spothop.wire.events.event_from_dict`."""
    return body.model_dump()
