"""SkyPilot task files, mapped onto spothop's job spec so they launch as their authors meant them.

A mapping is a SkyPilot task file when it uses a key only SkyPilot has: a
resource key of :data:`~spothop.jobs.skypilot_resources.RESOURCE_KEYS_MAPPED`
or ``RESOURCE_KEYS_UNSUPPORTED`` (``use_spot``, ``cloud``, ``infra``,
``job_recovery``, ``disk_size``, ``image_id`` …), or a top-level key of
:data:`TOP_KEYS_UNSUPPORTED` (``service``, ``config`` …).
Keys both spell alike (``name``, ``num_nodes``, ``setup``, ``run``, ``envs``, ``secrets``,
``workdir``, ``file_mounts``, ``resources.accelerators`` in every SkyPilot form, ``cpus``,
``memory``, ``any_of``) mean the same in both and never switch the dialect.

What maps (docs/jobs.md's table lists every key):

- ``name``, ``num_nodes``, ``setup``, ``run``: the same fields (``setup`` and
  ``run`` run each in ``bash``, as SkyPilot runs them: :mod:`spothop.jobs.launcher`);
- ``workdir``: a relative folder is the current directory's, as in SkyPilot
  (``~`` expanded), not the file's;
- ``file_mounts``: the same field (:mod:`spothop.jobs.spec_mounts`): a local
  source (relative: the current directory's, as SkyPilot reads it) is packed
  and uploaded at launch, a bucket URL copied onto the node at boot. A storage
  object ``{source: …, mode: …}`` is read as its ``source`` (every ``mode`` is a
  copy made before ``setup``: what the job writes there is not synced back);
  one without a ``source`` (a bucket SkyPilot would create) is refused;
- ``envs``: the same, after ``spothop launch --env NAME=VALUE`` overrides
  (:func:`apply_env_overrides`); a null or empty value is one SkyPilot requires
  the user to give, an error naming it while it is not given;
- ``secrets``: the same (read by ``load_job`` before any dialect:
  :mod:`spothop.jobs.spec_secrets`), filled by ``spothop launch --secret NAME=VALUE``;
  a null value is an error naming it while no ``--secret`` gave it;
- ``resources``: :func:`~spothop.jobs.skypilot_resources.map_resources`.

Every other SkyPilot key is refused by its path with one line saying what spothop
does instead (never silently dropped); every problem of a file is listed at once.
spothop's own fields (``tolerance``, ``checkpoint`` …) may be added to a SkyPilot
file; one that says the same as a SkyPilot key (``market`` beside ``use_spot``)
is an error unless both agree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from spothop.jobs.skypilot_resources import (
    RESOURCE_KEYS_MAPPED,
    RESOURCE_KEYS_UNSUPPORTED,
    is_skypilot_resources,
    map_resources,
)
from spothop.jobs.spec_messages import KeyProblems

__all__ = [
    "RESOURCE_KEYS_MAPPED",
    "RESOURCE_KEYS_UNSUPPORTED",
    "TOP_KEYS_UNSUPPORTED",
    "apply_env_overrides",
    "from_skypilot",
    "is_skypilot",
]

# SkyPilot's top-level keys spothop does not take, each with what spothop does instead.
TOP_KEYS_UNSUPPORTED: Mapping[str, str] = {
    "config": "SkyPilot's own settings have no meaning to spothop; set spothop's options in "
    "the job file (docs/jobs.md)",
    "service": "a SkyServe service is out of scope: spothop runs batch and training jobs to "
    "their end; serve with SkyPilot or your serving stack",
    "volumes": "spothop does not attach volumes; keep data in a bucket (checkpoint.url)",
    "inputs": "SkyPilot's optimizer hints are not used: spothop ranks by the cost of useful "
    "work, egress included",
    "outputs": "SkyPilot's optimizer hints are not used: spothop ranks by the cost of useful "
    "work, egress included",
    "event_callback": "spothop has no callbacks; follow a job with spothop status or events",
    "experimental": "SkyPilot's experimental settings have no meaning to spothop; remove it",
    "pool": "SkyPilot's worker pools: spothop launches each job's own instances; remove it",
}
_ENV_HINT = (
    "give it with --env {name}=VALUE (spothop launch or plan; --env {name} passes your shell's)"
)


def is_skypilot(data: Mapping[Any, Any]) -> bool:
    """True when ``data`` uses a key only a SkyPilot task file has."""
    if any(key in TOP_KEYS_UNSUPPORTED for key in data):
        return True
    return is_skypilot_resources(data.get("resources"))


def apply_env_overrides(data: dict[Any, Any], env: Mapping[str, str]) -> dict[Any, Any]:
    """``data`` with ``env`` (``--env NAME=VALUE``) over its ``envs``, as SkyPilot's ``--env``
    takes precedence over the file; ``data`` itself is left as it was."""
    if not env:
        return data
    envs = data.get("envs")
    base = dict(envs) if isinstance(envs, Mapping) else {}
    return {**data, "envs": {**base, **env}} if isinstance(envs, Mapping | None) else data


def from_skypilot(data: Mapping[Any, Any], where: str = "") -> dict[Any, Any]:
    """The spothop job spec ``data`` (a SkyPilot task file) means; :class:`JobSpecError` naming
    each unsupported or conflicting key. The result is validated by ``load_job`` as any spec."""
    mapper = KeyProblems(where, "SkyPilot task file")
    out: dict[Any, Any] = {}
    for key, value in data.items():
        if key in TOP_KEYS_UNSUPPORTED:
            mapper.refuse(str(key), f"SkyPilot's {key!r}: {TOP_KEYS_UNSUPPORTED[key]}")
        elif key == "workdir" and isinstance(value, str) and "://" not in value:
            out[key] = os.path.abspath(os.path.expanduser(value))  # SkyPilot: the current folder's
        elif key == "workdir" and isinstance(value, Mapping):
            mapper.refuse(
                "workdir",
                "a git workdir (url, ref) is not cloned by spothop; clone it in setup, or give "
                "a local folder (uploaded to each node)",
            )
        elif key == "file_mounts" and isinstance(value, Mapping):
            out[key] = _file_mounts(value, mapper)
        elif key == "envs" and isinstance(value, Mapping):
            out[key] = _required_envs(value, mapper)
        elif key != "resources":
            out[key] = value
    resources = data.get("resources", {})
    if resources is None:
        resources = {}
    if not isinstance(resources, Mapping):
        mapper.refuse("resources", f"a mapping of fields, got {type(resources).__name__}")
        mapper.raise_if_any()
    map_resources(resources, out, mapper)
    mapper.raise_if_any()
    return out


_MOUNT_MODES = ("MOUNT", "COPY", "MOUNT_CACHED")
_STORAGE_KEYS = frozenset({"name", "source", "store", "mode", "persistent", "config"})


def _file_mounts(mounts: Mapping[Any, Any], mapper: KeyProblems) -> dict[Any, Any]:
    """SkyPilot's ``file_mounts`` as spothop's: each local source absolute against the current
    folder (SkyPilot's reading), a storage object read as its ``source``; a form spothop cannot
    give refused by its key path (``file_mounts./data.mode``)."""
    out: dict[Any, Any] = {}
    for dest, source in mounts.items():
        where = f"file_mounts.{dest}"
        if isinstance(source, Mapping):
            source = _storage_source(where, source, mapper)
            if source is None:
                continue
        if isinstance(source, str) and source.strip() and "://" not in source:
            source = os.path.abspath(os.path.expanduser(source.strip()))
            if not os.path.exists(source):
                mapper.refuse(
                    where,
                    f"the source {source} does not exist (SkyPilot reads a "
                    "relative source against the current folder)",
                )
                continue
        out[dest] = source
    return out


def _storage_source(where: str, storage: Mapping[Any, Any], mapper: KeyProblems) -> Any:
    """A SkyPilot storage object's ``source``, or None (refused, named) when spothop cannot
    give what it asks."""
    unknown = sorted(str(k) for k in storage if k not in _STORAGE_KEYS)
    if unknown:
        mapper.refuse(f"{where}.{unknown[0]}", "not a key of a SkyPilot storage object")
        return None
    mode = str(storage.get("mode", "MOUNT")).upper()
    if mode not in _MOUNT_MODES:
        mapper.refuse(f"{where}.mode", f"{storage.get('mode')!r}: one of {', '.join(_MOUNT_MODES)}")
        return None
    source = storage.get("source")
    if source is None:
        mapper.refuse(
            f"{where}.source",
            "a bucket SkyPilot would create and mount read-write is not built; give the source "
            "to copy in (a bucket URL or local path), and write results to a bucket in run",
        )
        return None
    if isinstance(source, list):
        mapper.refuse(f"{where}.source", "several sources in one mount: give one mount each")
        return None
    return source


def _required_envs(envs: Mapping[Any, Any], mapper: KeyProblems) -> dict[Any, Any]:
    """``envs`` as they are; each null or empty value, which SkyPilot reads as "the user must
    give it", refused naming it while no ``--env`` gave it."""
    for name, value in envs.items():
        if value is None or value == "":
            mapper.refuse(
                f"envs.{name}",
                "SkyPilot marks it required (no value in the file); " + _ENV_HINT.format(name=name),
            )
    return dict(envs)
