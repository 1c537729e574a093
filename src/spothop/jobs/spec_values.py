"""The job spec's value checks: each takes what a YAML file holds and returns the value or raises
``ValueError``, which pydantic places at the field's path (``resources.accelerators``).

Durations (``6h``, ``1h30m``), SkyPilot's ``4+`` minimums and ``NAME:COUNT`` GPUs,
text a shell and a UTF-8 store can hold, environment names, storage URLs, and
relative paths made absolute against the job file's folder.

And what the spec's sections are built from: :class:`SpecModel` (frozen; an
unknown field is an error) and the field types ``Name`` (a provider's name),
``Place`` (a region or zone), ``Url`` (a storage URL) and ``Command`` (shell text).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from spothop.bounds import INSTANCE_GPU_COUNT, SECONDS_PER_DAY
from spothop.errors import UnknownGpuError
from spothop.resources.gpus import gpu_catalog, normalise_gpu_name

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV_PREFIX = "SPOTHOP_"  # the launcher sets SPOTHOP_JOB_ID, SPOTHOP_NODE_RANK, ...
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*([wdhms]))+\s*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([wdhms])")
_UNIT_S = {"w": 7 * SECONDS_PER_DAY, "d": SECONDS_PER_DAY, "h": 3600, "m": 60, "s": 1}
MAX_SHOWN = 80  # characters of a bad value echoed in an error


def parse_duration_s(value: Any) -> Any:
    """``"6h"``, ``"90m"``, ``"1h30m"``, ``"2d"``, ``"1w"`` or a number of seconds → seconds.

    Anything else is returned unchanged for the field's bound to refuse.
    """
    if isinstance(value, str):
        if not _DURATION.match(value):
            raise ValueError(
                "not a duration; write it like 6h, 90m, 1h30m, 2d or a number of seconds"
            )
        return sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(value))
    return value


def at_least(value: Any) -> Any:
    # SkyPilot writes "4+" for "at least 4"; a spothop minimum means the same.
    if isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*\+?\s*", value):
        return float(value.strip().rstrip("+"))
    return value


def check_gpu_name(name: str) -> str:
    """The catalog's spelling of ``name`` (a model or a family), else ValueError with suggestions."""
    catalog = gpu_catalog()
    model = catalog.lookup(name)
    if model is not None:
        return model.name
    key = normalise_gpu_name(name)
    for family in sorted({m.family for m in catalog}):
        if normalise_gpu_name(family) == key:
            return family
    raise ValueError(str(UnknownGpuError(name, catalog.suggest(name))))


def accelerator_choices(value: Any) -> list[Any] | None:
    """The GPUs an ``accelerators`` value offers as alternatives (SkyPilot's sets), one
    ``NAME:COUNT`` or ``{NAME: COUNT}`` each, or None when it names one GPU (or is no set).

    A list (``[L4:1, A10G:1]``) and a mapping of several (``{L4: 1, A10G: 1}``) are sets;
    YAML reads ``{L4:1, A10G:1}`` (no space after the colon) as keys ``"L4:1"`` without
    values, which mean the same. A set of one is that one GPU.
    """
    if isinstance(value, list | tuple | set | frozenset):
        choices = list(value)
    elif isinstance(value, Mapping):
        choices = [
            name if count is None and isinstance(name, str) and ":" in name else {name: count}
            for name, count in value.items()
        ]
    else:
        return None
    return choices if len(choices) > 1 else None  # one (or none): the field's own check reads it


def parse_accelerators(value: Any) -> Any:
    """``"A10G"``, ``"A10G:2"`` or ``{A10G: 2}`` → ``"A10G:2"`` in the catalog's spelling."""
    if isinstance(value, list | tuple | set | frozenset):
        if not value:
            raise ValueError("an empty list names no GPU; give NAME:COUNT, e.g. A10G:1")
        if len(value) == 1:
            return parse_accelerators(next(iter(value)))
        raise ValueError("a set of GPUs is given as alternatives; each entry NAME:COUNT")
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise ValueError(
                "give one GPU as NAME:COUNT (e.g. A10G:1); for alternatives use resources.any_of"
                if value
                else "an empty mapping names no GPU; give NAME:COUNT, e.g. A10G:1"
            )
        ((name, count),) = value.items()
        if count is None and isinstance(name, str) and ":" in name:
            return parse_accelerators(name)  # YAML's reading of {A10G:1}
    elif isinstance(value, str):
        name, _, count_text = value.partition(":")
        count = _count(count_text) if count_text else 1
    else:
        return value  # the str type check refuses it
    if not isinstance(name, str) or not name.strip():
        raise ValueError("give the GPU as NAME:COUNT, e.g. A10G:1")
    count = INSTANCE_GPU_COUNT.check(count, "the GPU count")
    return f"{check_gpu_name(name.strip())}:{count}"


def _count(text: str) -> Any:
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        raise ValueError(f"the GPU count {text!r:.{MAX_SHOWN}} is not a number") from None


_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,499}")


def container_image(value: str) -> str:
    """A container image reference (``repo/name:tag`` or ``…@sha256:…``): no spaces, no shell text."""
    if not _IMAGE.fullmatch(value):
        raise ValueError(
            "is not a container image reference: write it as docker pulls it, e.g. "
            "nvcr.io/nvidia/pytorch:24.05-py3 (letters, digits and . _ / : @ + -, no spaces)"
        )
    return value


def valid_text(value: str) -> str:
    """Text a shell command, a path or a stored spec can hold: no NUL, nothing UTF-8 cannot encode."""
    if "\x00" in value:
        raise ValueError("contains a NUL character, which no shell command or path can hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid text (a lone surrogate, which UTF-8 cannot hold)") from None
    return value


def not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty; give the command the job runs, e.g. run: python train.py")
    return value


def env_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        raise ValueError(
            "has no value; give one in the file or with spothop launch --env NAME=VALUE "
            "(envs are set on every node)"
        )
    return value


def check_envs(envs: dict[str, str]) -> dict[str, str]:
    for name, value in envs.items():
        if not ENV_NAME.match(name):
            raise ValueError(
                f"{name!r:.{MAX_SHOWN}} is not an environment variable name (letters, digits, _)"
            )
        if name.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(
                f"{name!r}: names starting with {RESERVED_ENV_PREFIX} are spothop's own"
            )
        valid_text(value)
    return envs


def check_url(value: str) -> str:
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme:
        import fsspec

        known = fsspec.available_protocols()
        if scheme not in known:
            close = difflib.get_close_matches(scheme, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}" if close else ""
            raise ValueError(f"unknown storage scheme {scheme!r}{hint} (an fsspec URL or a folder)")
    return valid_text(value)


def resolve_local(value: str, base_dir: Path | None) -> str:
    """``value`` made absolute against ``base_dir`` when it is a plain path or a ``file://`` URL;
    other URLs (``s3://…``) and absolute paths unchanged. Globs stay globs."""
    prefix = ""
    path = value
    if value.startswith("file://"):
        prefix, path = "file://", value.removeprefix("file://")
    elif "://" in value:
        return value
    path = os.path.expanduser(path)
    if not os.path.isabs(path) and base_dir is not None:
        path = os.path.normpath(os.path.join(base_dir, path))
    return prefix + path


def base_dir_of(info: ValidationInfo) -> Path | None:
    context = info.context
    return context.get("base_dir") if isinstance(context, Mapping) else None


# -- field types the spec's models share ----------------------------------------------------

NAME_PATTERN = r"^[a-z][a-z0-9-]*$"  # a provider's name, as world files and the registry spell it
PLACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$"  # a region or zone name

Name = Annotated[str, AfterValidator(valid_text), Field(pattern=NAME_PATTERN, max_length=63)]
Place = Annotated[str, Field(pattern=PLACE_PATTERN)]
Url = Annotated[str, Field(min_length=1), AfterValidator(check_url)]
Command = Annotated[str, AfterValidator(valid_text)]


class SpecModel(BaseModel):
    """A section of a job spec: frozen, and a field it does not know is an error (named, with a guess)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
