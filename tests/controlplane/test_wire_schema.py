"""The server's agent API takes exactly the bodies the wire dataclasses declare.

The OpenAPI document of a real app is read field by field and compared with a
description built here from the dataclasses alone (their annotations and
:class:`~spothop.wire.fields.Limits`, by the standard library): the same field
names, JSON types, required fields, defaults and bounds. A field added to a
wire dataclass, a bound changed, a default dropped: each shows up here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import pytest

from spothop.controlplane.bodies import body_model
from spothop.wire.contract import EVENTS_BATCH, Heartbeat, LeaseRelease, Registration
from spothop.wire.events import AgentEvent
from spothop.wire.fields import REQUIRED, EventKind, Limits, WireField, wire_fields

AGENT = "/v1/agents"
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _expected(annotation: Any) -> dict[str, Any]:
    """What a JSON schema of ``annotation`` must say: its type, bounds, items, and whether null."""
    if typing.get_origin(annotation) is Annotated:
        out = _expected(annotation.__origin__)
        for mark in annotation.__metadata__:
            if isinstance(mark, Limits):
                array = out["type"] == "array"
                for key, value in (
                    ("minItems" if array else "minLength", mark.min_len),
                    ("maxItems" if array else "maxLength", mark.max_len),
                    ("minimum", mark.ge),
                    ("maximum", mark.le),
                ):
                    if value is not None:
                        out[key] = value
        return out
    if typing.get_origin(annotation) is tuple:
        item, _ = typing.get_args(annotation)
        return {"type": "array", "items": _expected(item)}
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        assert len(args) == 1, annotation
        return {**_expected(args[0]), "nullable": True}
    return {"type": _JSON_TYPES[annotation]}


def _described(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema property in the terms of :func:`_expected`."""
    if "anyOf" in schema:
        kinds = [s for s in schema["anyOf"] if s.get("type") != "null"]
        assert len(kinds) == 1 and len(schema["anyOf"]) == 2, schema
        return {**_described(kinds[0]), "nullable": True}
    keep = ("type", "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems")
    out = {k: schema[k] for k in keep if k in schema}
    if "items" in schema:
        out["items"] = _described(schema["items"])
    return out


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def mismatches(schema: dict[str, Any], fields: tuple[WireField, ...]) -> list[str]:
    """How the JSON schema ``schema`` of a body differs from the wire ``fields`` (empty: it does not)."""
    wanted = {f.name: f for f in fields}
    properties = schema.get("properties", {})
    out = [
        f"{name}: in the wire dataclass, not in the schema"
        for name in wanted.keys() - properties.keys()
    ]
    out += [
        f"{name}: in the schema, not in the wire dataclass"
        for name in properties.keys() - wanted.keys()
    ]
    required = set(schema.get("required", []))
    for name in sorted(wanted.keys() & properties.keys()):
        field, prop = wanted[name], properties[name]
        if (name in required) != field.required:
            out.append(
                f"{name}: required {name in required} in the schema, {field.required} on the wire"
            )
        if not field.required and prop.get("default") != _plain(field.default):
            out.append(f"{name}: default {prop.get('default')!r}, the wire's {field.default!r}")
        if _described(prop) != _expected(field.annotation):
            out.append(
                f"{name}: {_described(prop)} in the schema, {_expected(field.annotation)} on the wire"
            )
    return sorted(out)


EVENT_FIELDS = (WireField("kind", EventKind), *wire_fields(AgentEvent))


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    folder: Path = tmp_path_factory.mktemp("openapi")
    openapi: dict[str, Any] = create_app(
        Settings(db_url=f"sqlite:///{folder}/s.db", controller=False)
    ).openapi()
    return openapi


def _body(document: dict[str, Any], path: str) -> dict[str, Any]:
    content = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    return _resolve(document, content["schema"])


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    resolved: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return resolved


@pytest.mark.parametrize(
    ("path", "cls"),
    [
        (f"{AGENT}/register", Registration),
        (f"{AGENT}/{{instance_id}}/heartbeat", Heartbeat),
        (f"{AGENT}/{{instance_id}}/leases/release", LeaseRelease),
    ],
)
def test_the_agent_bodies_are_the_wire_dataclasses(
    document: dict[str, Any], path: str, cls: type[Any]
) -> None:
    assert mismatches(_body(document, path), wire_fields(cls)) == []


def test_an_event_is_checked_by_the_fields_every_event_has_and_keeps_its_own(
    document: dict[str, Any],
) -> None:
    batch = _body(document, f"{AGENT}/{{instance_id}}/events")
    assert batch["required"] == ["events"]
    events = batch["properties"]["events"]
    assert events["type"] == "array" and events["maxItems"] == EVENTS_BATCH
    event = _resolve(document, events["items"])
    assert mismatches(event, EVENT_FIELDS) == []
    assert event.get("additionalProperties") is True  # an event's own fields pass through


def test_the_comparison_sees_a_field_the_server_does_not_know(document: dict[str, Any]) -> None:
    """A field added to a wire dataclass is missing from the server's schema until it derives it."""

    @dataclasses.dataclass(frozen=True)
    class NewerHeartbeat(Heartbeat):
        gpu_util_pct: Annotated[int, Limits(ge=0, le=100)] = 0

    served = _body(document, f"{AGENT}/{{instance_id}}/heartbeat")
    assert mismatches(served, wire_fields(NewerHeartbeat)) == [
        "gpu_util_pct: in the wire dataclass, not in the schema"
    ]
    derived = body_model("NewerHeartbeatBody", wire_fields(NewerHeartbeat)).model_json_schema()
    assert mismatches(derived, wire_fields(NewerHeartbeat)) == []
    assert derived["properties"]["gpu_util_pct"] == {
        "default": 0,
        "maximum": 100,
        "minimum": 0,
        "title": "Gpu Util Pct",
        "type": "integer",
    }


def test_the_comparison_sees_a_bound_or_a_required_field_that_differs(
    document: dict[str, Any],
) -> None:
    served = _body(document, f"{AGENT}/register")
    changed = tuple(
        dataclasses.replace(f, annotation=Annotated[str, Limits(min_len=1, max_len=64)])
        if f.name == "instance_id"
        else dataclasses.replace(f, default=REQUIRED)
        if f.name == "zone"
        else f
        for f in wire_fields(Registration)
    )
    assert mismatches(served, changed) == [
        "instance_id: {'type': 'string', 'minLength': 1, 'maxLength': 128} in the schema,"
        " {'type': 'string', 'minLength': 1, 'maxLength': 64} on the wire",
        "zone: required False in the schema, True on the wire",
    ]
