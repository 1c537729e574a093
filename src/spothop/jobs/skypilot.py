"""SkyPilot task files, mapped onto spothop's job spec so they launch unchanged.

A mapping is a SkyPilot task file when it uses a key only SkyPilot has
(``resources.use_spot``, ``resources.cloud``, ``region``, ``zone``, ``infra``,
``memory``, ``job_recovery``, or a top-level ``file_mounts``, ``secrets`` …).
The keys that map:

=====================================  ==============================================
SkyPilot                               spothop
=====================================  ==============================================
``name``, ``workdir``, ``num_nodes``,  the same fields
``setup``, ``run``, ``envs``
``resources.accelerators``             ``resources.accelerators``; a list or a mapping
                                       of several GPUs becomes ``resources.any_of``
``resources.cpus``, ``memory``         ``resources.cpus``, ``memory_gib`` (``4+`` = at least 4)
``resources.use_spot``                 ``market: spot`` (true) or ``on-demand`` (false, and
                                       when absent, as in SkyPilot); ``any_of`` entries that
                                       differ make it ``auto``
``resources.cloud``, ``region``,       ``providers.allow``, ``regions``, ``zones``
``zone``, ``infra`` (cloud/region/zone)
``resources.any_of``                   ``resources.any_of`` (each entry mapped the same way)
``resources.job_recovery``             ``max_restarts_on_errors`` → ``max_retries``; the
                                       ``strategy`` is accepted: spothop's recovery always
                                       fails over across zones, regions and clouds
=====================================  ==============================================

Every other SkyPilot key is refused by name (never silently dropped). spothop's
own fields (``tolerance``, ``checkpoint`` …) may be added to a SkyPilot file;
one that says the same as a SkyPilot key (``market`` beside ``use_spot``) is an
error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spothop.errors import JobSpecError

# Keys only a SkyPilot file has; any of them makes a file a SkyPilot task file.
RESOURCE_KEYS_MAPPED = frozenset(
    {"use_spot", "cloud", "region", "zone", "infra", "memory", "job_recovery", "spot_recovery"}
)
RESOURCE_KEYS_UNSUPPORTED = frozenset(
    {
        "instance_type",
        "disk_size",
        "disk_tier",
        "network_tier",
        "ports",
        "image_id",
        "labels",
        "accelerator_args",
        "ordered",
        "autostop",
        "priority",
        "volumes",
        "_docker_login_config",
    }
)
TOP_KEYS_UNSUPPORTED = frozenset(
    {
        "file_mounts",
        "secrets",
        "config",
        "service",
        "volumes",
        "inputs",
        "outputs",
        "event_callback",
        "experimental",
        "pool",
    }
)
# SkyPilot's recovery strategies; spothop's controller does what both do (and more) by itself.
RECOVERY_STRATEGIES = frozenset({"failover", "eager_next_region"})
_UNSUPPORTED_HINT = "remove it (docs/jobs.md lists the SkyPilot keys spothop maps)"
_ENTRY_KEYS = frozenset({"accelerators", "cpus", "memory", "cloud", "region", "zone", "infra"})


def is_skypilot(data: Mapping[Any, Any]) -> bool:
    """True when ``data`` uses a key only a SkyPilot task file has."""
    if any(key in TOP_KEYS_UNSUPPORTED for key in data):
        return True
    resources = data.get("resources")
    if not isinstance(resources, Mapping):
        return False
    skypilot_only = RESOURCE_KEYS_MAPPED | RESOURCE_KEYS_UNSUPPORTED
    if any(key in skypilot_only for key in resources):
        return True
    entries = resources.get("any_of")
    return isinstance(entries, list) and any(
        isinstance(e, Mapping) and any(k in skypilot_only for k in e) for e in entries
    )


class _Mapper:
    """Collects every problem of one file, so the user fixes them in one pass."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.problems: list[tuple[str, str]] = []

    def refuse(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def raise_if_any(self) -> None:
        if self.problems:
            text = "; ".join(f"{p}: {m}" for p, m in self.problems)
            raise JobSpecError(f"{self.where}SkyPilot task file: {text}", self.problems)


def from_skypilot(data: Mapping[Any, Any], where: str = "") -> dict[Any, Any]:
    """The spothop job spec ``data`` (a SkyPilot task file) means; :class:`JobSpecError` naming
    each unsupported or conflicting key. The result is validated by ``load_job`` as any spec."""
    mapper = _Mapper(where)
    out: dict[Any, Any] = {}
    for key, value in data.items():
        if key in TOP_KEYS_UNSUPPORTED:
            mapper.refuse(
                str(key), f"SkyPilot's {key!r} is not supported by spothop; {_UNSUPPORTED_HINT}"
            )
        elif key != "resources":
            out[key] = value
    resources = data.get("resources", {})
    if resources is None:
        resources = {}
    if not isinstance(resources, Mapping):
        mapper.refuse("resources", f"a mapping of fields, got {type(resources).__name__}")
        mapper.raise_if_any()
    _map_resources(resources, out, mapper)
    mapper.raise_if_any()
    return out


def _map_resources(resources: Mapping[Any, Any], out: dict[Any, Any], mapper: _Mapper) -> None:
    native: dict[Any, Any] = {}
    places = _places(resources, "resources", mapper)
    spot_values: set[bool] = set()
    top_spot = _use_spot(resources, "resources", mapper)
    for key, value in resources.items():
        path = f"resources.{key}"
        if key in RESOURCE_KEYS_UNSUPPORTED:
            mapper.refuse(
                path, f"SkyPilot's {key!r} is not supported by spothop; {_UNSUPPORTED_HINT}"
            )
        elif key in ("job_recovery", "spot_recovery"):
            _recovery(value, path, out, mapper)
        elif key == "memory":
            native["memory_gib"] = value
        elif key == "accelerators":
            native.update(_accelerators(value))
        elif key == "any_of":
            native["any_of"] = _any_of(value, top_spot, spot_values, mapper)
        elif key not in ("use_spot", "cloud", "region", "zone", "infra"):
            native[key] = value
    explicit = top_spot is not None or bool(spot_values - {bool(top_spot)})
    if "any_of" not in native or not spot_values:
        spot_values.add(bool(top_spot))
    if explicit:
        _set(out, "market", _market(spot_values), "resources.use_spot", mapper)
    else:
        out.setdefault("market", "on-demand")  # SkyPilot's default when use_spot is absent
    for field, value in places.items():
        target = "providers" if field == "cloud" else field
        _set(
            out,
            target,
            {"allow": value} if field == "cloud" else value,
            f"resources.{field}",
            mapper,
        )
    out["resources"] = native


def _accelerators(value: Any) -> dict[str, Any]:
    """One GPU stays ``accelerators``; several (a list, or a mapping of many) become ``any_of``."""
    if isinstance(value, list | set | tuple) and len(value) != 1:
        return {"any_of": [{"accelerators": v} for v in value]}
    if isinstance(value, list | set | tuple):
        return {"accelerators": next(iter(value))}
    if isinstance(value, Mapping) and len(value) > 1:
        return {"any_of": [{"accelerators": {k: v}} for k, v in value.items()]}
    return {"accelerators": value}


def _any_of(entries: Any, top_spot: bool | None, spot_values: set[bool], mapper: _Mapper) -> Any:
    if not isinstance(entries, list):
        return entries  # the spec's own check refuses it
    mapped: list[Any] = []
    for i, entry in enumerate(entries):
        path = f"resources.any_of.{i}"
        if not isinstance(entry, Mapping):
            mapped.append(entry)
            continue
        spot = _use_spot(entry, path, mapper)
        spot_values.add(spot if spot is not None else bool(top_spot))
        alternative: dict[Any, Any] = {}
        for key, value in entry.items():
            if key == "use_spot":
                continue
            if key not in _ENTRY_KEYS:
                mapper.refuse(
                    f"{path}.{key}", f"not supported in any_of by spothop; {_UNSUPPORTED_HINT}"
                )
            elif key == "memory":
                alternative["memory_gib"] = value
            elif key == "accelerators":
                alternative["accelerators"] = value
            elif key == "cpus":
                alternative["cpus"] = value
        for field, value in _places(entry, path, mapper).items():
            alternative["providers" if field == "cloud" else field] = value
        mapped.append(alternative)
    return mapped


def _places(resources: Mapping[Any, Any], path: str, mapper: _Mapper) -> dict[str, list[str]]:
    """``cloud``, ``region``, ``zone`` and ``infra`` (``cloud/region/zone``, ``*`` for any) as lists."""
    found: dict[str, Any] = {k: resources[k] for k in ("cloud", "region", "zone") if k in resources}
    infra = resources.get("infra")
    if infra is not None:
        if not isinstance(infra, str):
            mapper.refuse(f"{path}.infra", f"write it as cloud/region/zone, got {infra!r:.80}")
        else:
            for field, part in zip(("cloud", "region", "zone"), infra.split("/"), strict=False):
                if part and part != "*":
                    if field in found and found[field] != part:
                        mapper.refuse(
                            f"{path}.infra",
                            f"says {field} {part!r} but {field} says {found[field]!r}",
                        )
                    found[field] = part
    out: dict[str, list[str]] = {}
    for field, value in found.items():
        if value is None:
            continue
        if not isinstance(value, str):
            mapper.refuse(f"{path}.{field}", f"a name, got {value!r:.80}")
            continue
        name = "regions" if field == "region" else "zones" if field == "zone" else "cloud"
        out[name] = [value.lower() if field == "cloud" else value]
    return out


def _use_spot(resources: Mapping[Any, Any], path: str, mapper: _Mapper) -> bool | None:
    value = resources.get("use_spot")
    if value is None or isinstance(value, bool):
        return value
    mapper.refuse(f"{path}.use_spot", f"true or false, got {value!r:.80}")
    return None


def _market(spot_values: set[bool]) -> str:
    if spot_values == {True}:
        return "spot"
    if spot_values == {False}:
        return "on-demand"
    return "auto"  # any_of entries ask for both: let the scheduler weigh them


def _recovery(value: Any, path: str, out: dict[Any, Any], mapper: _Mapper) -> None:
    if isinstance(value, str) or value is None:
        value = {"strategy": value}
    if not isinstance(value, Mapping):
        mapper.refuse(path, f"a strategy name or a mapping, got {value!r:.80}")
        return
    for key, item in value.items():
        if key == "max_restarts_on_errors":
            _set(out, "max_retries", item, f"{path}.{key}", mapper)
        elif key == "strategy":
            if item is not None and str(item).lower() not in RECOVERY_STRATEGIES:
                mapper.refuse(
                    f"{path}.strategy",
                    f"unknown strategy {item!r:.80}; SkyPilot's are FAILOVER and EAGER_NEXT_REGION",
                )
        else:
            mapper.refuse(f"{path}.{key}", f"not supported by spothop; {_UNSUPPORTED_HINT}")


def _set(out: dict[Any, Any], field: str, value: Any, source: str, mapper: _Mapper) -> None:
    if field in out and out[field] != value:
        mapper.refuse(field, f"says the same as SkyPilot's {source}; keep one of them")
        return
    out[field] = value
