"""How a job spec's validation errors read: ``field.path: what was expected, got value``.

Pydantic's errors are reworded once, here: a missing field says what to give,
an unknown field gets the closest known name ("did you mean 'tolerance'?") or
the list of the fields at that place, and a value is echoed (cut to
:data:`~spothop.jobs.spec_values.MAX_SHOWN` characters) unless the message
already names it.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from spothop.errors import JobSpecError, ValueOutOfRange
from spothop.jobs.spec_values import MAX_SHOWN


def spec_error(exc: ValidationError, where: str, root: type[BaseModel]) -> JobSpecError:
    """One :class:`JobSpecError` for every problem pydantic found, each as ``(path, message)``."""
    problems = [_describe(error, root) for error in exc.errors()]
    return JobSpecError(where + "; ".join(f"{p}: {m}" for p, m in problems), problems)


def _describe(error: Any, root: type[BaseModel]) -> tuple[str, str]:
    loc = tuple(error["loc"])
    path = ".".join(str(part) for part in loc) or "(top level)"
    kind = error["type"]
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "missing":
        return path, "missing; " + _MISSING_HINT.get(str(loc[-1]), "this field is required")
    if kind == "extra_forbidden":
        return path, _unknown_field(loc, root)
    bounded = isinstance(error.get("ctx", {}).get("error"), ValueOutOfRange)
    value = error.get("input")
    if bounded or isinstance(value, Mapping | list) or "got" in message:
        return path, message  # the message names the value, or the value is a whole section
    return path, f"{message}, got {value!r:.{MAX_SHOWN}}"


_MISSING_HINT = {
    "name": "give the job a name (letters, digits, . _ : = -)",
    "run": "give the command the job runs, e.g. run: python train.py",
    "url": "give a folder or an fsspec URL such as s3://bucket/prefix",
    "output": "give a folder or an fsspec URL for the shards' outputs",
    "inputs": "give a list of files or globs, e.g. [data/*.jsonl]",
}


def _unknown_field(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    model = _model_at(loc[:-1], root)
    key = loc[-1]
    if model is None:
        return "unknown field"
    known = sorted(f.alias or name for name, f in model.model_fields.items())
    close = difflib.get_close_matches(str(key), known, n=1) if isinstance(key, str) else []
    if close:
        return f"unknown field; did you mean {close[0]!r}?"
    return f"unknown field; the fields here are {', '.join(known)}"


def _model_at(loc: tuple[Any, ...], root: type[BaseModel]) -> type[BaseModel] | None:
    """The model that the fields at ``loc`` (a pydantic error's location) belong to."""
    model: type[BaseModel] | None = root
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # an item of a list: the same model as the list's
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        model = _model_in(field.annotation) if field is not None else None
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType, Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


class KeyProblems:
    """Every key of one file a dialect's reader (SkyPilot's, dstack's) cannot map, collected so
    the user fixes them in one pass; :meth:`raise_if_any` raises one :class:`JobSpecError`
    naming each (``<where><dialect>: path: message; …``) with the list as its details."""

    def __init__(self, where: str, dialect: str) -> None:
        self.where = where
        self.dialect = dialect
        self.problems: list[tuple[str, str]] = []

    def refuse(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def raise_if_any(self) -> None:
        if self.problems:
            text = "; ".join(f"{p}: {m}" for p, m in self.problems)
            raise JobSpecError(f"{self.where}{self.dialect}: {text}", self.problems)
