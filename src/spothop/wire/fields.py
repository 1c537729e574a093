"""The bounds of the wire's fields, declared beside the fields as ``Annotated[type, Limits(...)]``.

The contract's dataclasses (:mod:`spothop.wire.contract`, :mod:`spothop.wire.events`)
annotate each field a body carries with one of the aliases below; the
server's request-body models are derived from them
(:mod:`spothop.controlplane.bodies`), so a bound is written once. The rules:

- strings are bounded by the columns they go to (ids 128, providers 32, an
  event id 64, a kind or a state 32), lists by what a caller can need;
- numbers are within what the database stores (``INT32_MAX`` for integer
  columns), unix times within 0..1e11; every ``float`` on the wire is finite;
- a field is required on the wire when its dataclass gives it no default, or
  only a ``default_factory`` (a time or an id the sender stamps when it builds
  the object); a plain default is the wire's default too; a field annotated
  with :class:`WireDefault` may be left out of a body although the dataclass
  demands it (the receiver fills it in: an older agent did not send it).

Standard library only: the agent imports it while it watches.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Annotated, Any

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Limits:
    """What the receiving side checks of a value: a string's or a list's length, a number's range."""

    min_len: int | None = None
    max_len: int | None = None
    ge: float | None = None
    le: float | None = None


@dataclass(frozen=True)
class WireDefault:
    """What the receiver fills in for a field a body may omit, where the dataclass demands the field."""

    value: Any


Id = Annotated[str, Limits(min_len=1, max_len=128)]
OptionalId = Annotated[str, Limits(max_len=128)]
Place = Annotated[str, Limits(max_len=128)]  # region, zone, instance type
Provider = Annotated[str, Limits(max_len=32)]
ProtocolName = Annotated[str, Limits(max_len=64)]  # a notice protocol: aws, gcp, azure, …
State = Annotated[str, Limits(min_len=1, max_len=32)]
Reason = Annotated[str, Limits(max_len=1000)]
Reasons = Annotated[tuple[Reason, ...], Limits(max_len=50)]
UnixTime = Annotated[float, Limits(ge=0, le=1e11)]
Count = Annotated[int, Limits(ge=0, le=INT32_MAX)]
EventId = Annotated[str, Limits(min_len=1, max_len=64)]
EventKind = Annotated[str, Limits(min_len=1, max_len=32)]
SchemaVersionNumber = Annotated[int, Limits(ge=1, le=1000)]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # a WireField's default when the wire requires the field


@dataclass(frozen=True)
class WireField:
    """One field of a wire dataclass as a body carries it: its annotation (``Annotated`` with its
    :class:`Limits`, resolved) and its default on the wire (:data:`REQUIRED` when it must be sent)."""

    name: str
    annotation: Any
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def wire_fields(cls: type[Any]) -> tuple[WireField, ...]:
    """The fields of the dataclass ``cls``, in their order, by the rules of the module docstring."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple(
        WireField(f.name, hints[f.name], _wire_default(hints[f.name], f.default))
        for f in dataclasses.fields(cls)
    )


def _wire_default(annotation: Any, default: Any) -> Any:
    """The field's :class:`WireDefault` if it has one, else its dataclass default (MISSING for
    none or a ``default_factory``: required)."""
    if typing.get_origin(annotation) is Annotated:
        for mark in annotation.__metadata__:
            if isinstance(mark, WireDefault):
                return mark.value
    return REQUIRED if default is dataclasses.MISSING else default
