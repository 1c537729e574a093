"""A SkyPilot task file's ``resources``, mapped onto spothop's: hardware, market, places, recovery.

:func:`map_resources` fills the spothop spec ``out`` from SkyPilot's
``resources`` and reports each key it cannot map to the :class:`~spothop.jobs.spec_messages.KeyProblems` it is
given (the key's path and one line saying what spothop does instead):

- ``accelerators`` (one GPU, or a set: ``{A: n, B: m}``, ``[A:1, B:1]``),
  ``cpus``, ``memory``, ``instance_type``, ``any_of`` and ``ordered`` go to
  spothop's ``resources`` as they are (spothop reads SkyPilot's spellings; a set
  of GPUs is alternatives, ``ordered`` alternatives in preference order:
  :class:`~spothop.jobs.spec_resources.ResourcesSpec`);
- ``use_spot``: ``market`` spot or on-demand; absent, SkyPilot's default,
  on-demand, whatever other keys the file holds; ``any_of`` (``ordered``)
  entries that differ make it ``auto``;
- ``cloud``, ``region``, ``zone``, ``infra``: ``providers.allow``, ``regions``,
  ``zones`` (an ``any_of`` entry's narrow that entry);
- ``job_recovery`` (``spot_recovery``): ``max_restarts_on_errors`` →
  ``max_retries``;
- ``disk_size``, ``disk_tier``: the spec's ``disk_size_gib`` and ``disk_tier``;
  ``image_id: docker:IMAGE``: the job's ``image``; any other ``image_id`` (an AMI,
  a Compute Engine image, one id or ``{region: id}``): ``resources.image_id``,
  the machine image that cloud's adapter boots.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spothop.jobs.spec_messages import KeyProblems
from spothop.jobs.spec_resources import AlternativeSpec
from spothop.jobs.spec_values import container_image
from spothop.providers.base import DiskTier

# Resource keys only SkyPilot has: any of them makes a file a SkyPilot task file.
RESOURCE_KEYS_MAPPED = frozenset(
    {
        "use_spot",
        "cloud",
        "region",
        "zone",
        "infra",
        "job_recovery",
        "spot_recovery",
        "disk_size",
        "disk_tier",
        "image_id",
    }
)
# SkyPilot resource keys spothop does not take, each with what spothop does instead.
RESOURCE_KEYS_UNSUPPORTED: Mapping[str, str] = {
    "ports": "opening ports is for services, which spothop does not run; a job's nodes reach "
    "each other on the rendezvous port (docs/multinode.md)",
    "network_tier": "spothop places nodes on the clouds' standard networks; remove it",
    "labels": "spothop tags its instances itself (spothop-job, spothop-node); remove it",
    "accelerator_args": "TPUs are not run by spothop (GPU instances only); remove it",
    "autostop": "a spothop job's instances end with the job; remove it",
    "priority": "spothop has no job priorities; remove it",
    "volumes": "spothop does not attach volumes; keep data in a bucket (checkpoint.url)",
    "_docker_login_config": "spothop pulls public images only; remove it",
}
_ENTRY_KEYS = frozenset(
    {
        "accelerators",
        "cpus",
        "memory",
        "instance_type",
        "cloud",
        "region",
        "zone",
        "infra",
        "use_spot",
    }
)
_HARDWARE_KEYS = ("accelerators", "cpus", "memory", "instance_type")
# spothop's own fields of an alternative, taken as they are beside SkyPilot's keys (as spothop's
# own fields are in a whole SkyPilot file): a stored spec (to_json) reads back unchanged.
_OWN_ENTRY_FIELDS = frozenset(AlternativeSpec.model_fields) - _ENTRY_KEYS
ALTERNATIVES = ("any_of", "ordered")  # SkyPilot's two lists of alternatives
RECOVERY_STRATEGIES = frozenset({"failover", "eager_next_region"})
DOCKER_PREFIX = "docker:"
TPU_PREFIX = "tpu-"


def is_skypilot_resources(resources: Any) -> bool:
    """True when ``resources`` (or one of its ``any_of`` entries) has a key only SkyPilot has."""
    if not isinstance(resources, Mapping):
        return False
    if _marked(resources):
        return True
    return any(
        isinstance(e, Mapping) and _marked(e)
        for key in ALTERNATIVES
        for e in _entries(resources.get(key))
    )


# spothop's own resources fields SkyPilot spells alike: null in a stored spec, a marker only set.
_SHARED_FIELDS = frozenset({"disk_tier", "image_id"})


def _marked(resources: Mapping[Any, Any]) -> bool:
    only = RESOURCE_KEYS_MAPPED | RESOURCE_KEYS_UNSUPPORTED.keys()
    return any(
        key in only and not (key in _SHARED_FIELDS and value is None)
        for key, value in resources.items()
    )


def map_resources(resources: Mapping[Any, Any], out: dict[Any, Any], problems: KeyProblems) -> None:
    """Fill ``out`` (the spothop spec) from SkyPilot's ``resources`` (see the module docstring)."""
    native: dict[Any, Any] = {}
    top_spot = _use_spot(resources, "resources", problems)
    spot_values: set[bool] = set()
    for key, value in resources.items():
        path = f"resources.{key}"
        if key in RESOURCE_KEYS_UNSUPPORTED:
            problems.refuse(path, f"SkyPilot's {key!r}: {RESOURCE_KEYS_UNSUPPORTED[key]}")
        elif key in ("job_recovery", "spot_recovery"):
            _recovery(value, path, out, problems)
        elif key in ALTERNATIVES:
            native[key] = _any_of(value, str(key), top_spot, spot_values, problems)
        elif key == "image_id":
            _image(value, path, out, native, problems)
        elif key not in ("use_spot", "cloud", "region", "zone", "infra"):
            _hardware(key, value, native, problems)
    if not spot_values:
        spot_values.add(bool(top_spot))
    explicit = top_spot is not None or any(
        isinstance(e, Mapping) and "use_spot" in e
        for key in ALTERNATIVES
        for e in _entries(resources.get(key))
    )
    if explicit:
        _set(out, "market", _market(spot_values), "resources.use_spot", problems)
    else:
        out.setdefault("market", "on-demand")  # SkyPilot's default when use_spot is absent
    for field, value in _places(resources, "resources", problems).items():
        target = "providers" if field == "cloud" else field
        allowed = {"allow": value} if field == "cloud" else value
        _set(out, target, allowed, f"resources.{field}", problems)
    out["resources"] = native
    providers = out.get("providers")
    clouds = providers.get("allow") if isinstance(providers, Mapping) else None
    if "image_id" in native and not (isinstance(clouds, list) and len(clouds) == 1):
        problems.refuse(
            "resources.image_id",
            "a machine image belongs to one cloud: name it (cloud: CLOUD, or infra: "
            "CLOUD/REGION), or run in a container (image_id: docker:IMAGE)",
        )


def _hardware(key: Any, value: Any, native: dict[Any, Any], problems: KeyProblems) -> None:
    """A hardware key into spothop's ``resources``: renamed where spothop spells it otherwise;
    ``cpus``, ``memory`` and spothop's own fields as they are (the spec checks them)."""
    if key == "accelerators":
        _no_tpu(value, f"resources.{key}", problems)
    elif key == "disk_size":
        key = "disk_size_gib"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.refuse(
                "resources.disk_size",
                f"the root volume's size in GiB, a whole number of 1 or more, got {value!r:.80}",
            )
            return
    elif key == "disk_tier" and value is not None:
        tiers = [str(t) for t in DiskTier]
        if not isinstance(value, str) or value.lower() not in tiers:
            problems.refuse("resources.disk_tier", f"one of {', '.join(tiers)}, got {value!r:.80}")
            return
        value = value.lower()
    native[key] = value


def _no_tpu(value: Any, path: str, problems: KeyProblems) -> None:
    names = (
        value
        if isinstance(value, list | tuple)
        else list(value)
        if isinstance(value, Mapping)
        else [value]
    )
    for name in names:
        if isinstance(name, str) and name.strip().lower().startswith(TPU_PREFIX):
            problems.refuse(
                path,
                f"{name.strip()!r:.80} is a TPU: spothop runs GPU instances only; name a GPU "
                "(e.g. A100:8) or run TPU jobs with SkyPilot",
            )
            return


def _image(
    value: Any, path: str, out: dict[Any, Any], native: dict[Any, Any], problems: KeyProblems
) -> None:
    """``docker:IMAGE`` → the job's container ``image``; a cloud's machine image (an AMI, a
    Compute Engine image; one id or ``{region: id}``) → ``resources.image_id``, booted by that
    cloud's adapter instead of its configured image."""
    if value is None:
        return  # none asked (a stored spec's null)
    if isinstance(value, Mapping):
        if any(isinstance(v, str) and v.startswith(DOCKER_PREFIX) for v in value.values()):
            problems.refuse(path, "a docker: image is one for every region; give it alone")
            return
        native["image_id"] = dict(value)
        return
    if not isinstance(value, str):
        problems.refuse(path, f"an image name, got {value!r:.80}")
        return
    if not value.startswith(DOCKER_PREFIX):
        native["image_id"] = value.strip()
        return
    image = value[len(DOCKER_PREFIX) :].strip()
    try:
        container_image(image)
    except ValueError as exc:
        problems.refuse(path, f"{image!r:.80} {exc}")
        return
    _set(out, "image", image, path, problems)


def _entries(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _any_of(
    entries: Any, key: str, top_spot: bool | None, spot: set[bool], problems: KeyProblems
) -> Any:
    """``any_of`` or ``ordered`` (``key``): each entry's hardware and places, its ``use_spot``
    added to ``spot``; a key an entry cannot take refused by its path."""
    if not isinstance(entries, list):
        return entries  # the spec's own check refuses it
    mapped: list[Any] = []
    markets: list[str | None] = []
    for i, entry in enumerate(entries):
        path = f"resources.{key}.{i}"
        if not isinstance(entry, Mapping):
            mapped.append(entry)
            markets.append(None)
            continue
        own = _use_spot(entry, path, problems)
        entry_spot = own if own is not None else bool(top_spot)
        spot.add(entry_spot)
        markets.append("spot" if entry_spot else "on-demand")
        alternative: dict[Any, Any] = {}
        for name, value in entry.items():
            if name in _OWN_ENTRY_FIELDS:  # spothop's own spelling (a stored spec read back)
                alternative[name] = value
            elif name not in _ENTRY_KEYS:
                why = RESOURCE_KEYS_UNSUPPORTED.get(str(name), f"give it beside {key}, for all")
                if name in ALTERNATIVES:
                    why = (
                        f"{name} inside {key} has no meaning; list every choice in one "
                        "any_of (any one) or one ordered (in preference order)"
                    )
                problems.refuse(f"{path}.{name}", f"not taken in an {key} entry: {why}")
            elif name in _HARDWARE_KEYS:
                alternative[name] = value
                if name == "accelerators":
                    _no_tpu(value, f"{path}.{name}", problems)
        for field, value in _places(entry, path, problems).items():
            alternative["providers" if field == "cloud" else field] = value
        mapped.append(alternative)
    _own_markets(mapped, markets)
    return mapped


def _own_markets(mapped: list[Any], markets: list[str | None]) -> None:
    """Entries of both markets (the job's market auto): each keeps to its own, so an ordered spot
    entry before an on-demand one keeps its place (SkyPilot's semantics), and an any_of entry's
    GPU is not bought in the other entry's market. One market for all: the job's says it."""
    if len({m for m in markets if m is not None}) < 2:
        return
    for alternative, market in zip(mapped, markets, strict=True):
        if isinstance(alternative, dict) and market is not None:
            alternative.setdefault("market", market)


def _places(resources: Mapping[Any, Any], path: str, problems: KeyProblems) -> dict[str, list[str]]:
    """``cloud``, ``region``, ``zone`` and ``infra`` (``cloud/region/zone``, ``*`` for any) as lists."""
    found: dict[str, Any] = {k: resources[k] for k in ("cloud", "region", "zone") if k in resources}
    infra = resources.get("infra")
    if infra is not None:
        if not isinstance(infra, str):
            problems.refuse(f"{path}.infra", f"write it as cloud/region/zone, got {infra!r:.80}")
        else:
            for field, part in zip(("cloud", "region", "zone"), infra.split("/"), strict=False):
                if part and part != "*":
                    if field in found and found[field] != part:
                        problems.refuse(
                            f"{path}.infra",
                            f"says {field} {part!r} but {field} says {found[field]!r}",
                        )
                    found[field] = part
    out: dict[str, list[str]] = {}
    for field, value in found.items():
        if value is None:
            continue
        if not isinstance(value, str):
            problems.refuse(f"{path}.{field}", f"a name, got {value!r:.80}")
            continue
        if field == "cloud" and value.lower() in ("kubernetes", "k8s", "ssh"):
            problems.refuse(
                f"{path}.{'infra' if 'infra' in resources else field}",
                f"{value!r}: spothop buys cloud instances and does not run on Kubernetes or "
                "your own machines; name a cloud spothop knows (`spothop offers` lists them) or "
                "leave it out",
            )
            continue
        name = "regions" if field == "region" else "zones" if field == "zone" else "cloud"
        out[name] = [value.lower() if field == "cloud" else value]
    return out


def _use_spot(resources: Mapping[Any, Any], path: str, problems: KeyProblems) -> bool | None:
    value = resources.get("use_spot")
    if value is None or isinstance(value, bool):
        return value
    problems.refuse(f"{path}.use_spot", f"true or false, got {value!r:.80}")
    return None


def _market(spot_values: set[bool]) -> str:
    if spot_values == {True}:
        return "spot"
    if spot_values == {False}:
        return "on-demand"
    return "auto"  # any_of entries ask for both: let the scheduler weigh them


def _recovery(value: Any, path: str, out: dict[Any, Any], problems: KeyProblems) -> None:
    if isinstance(value, str) or value is None:
        value = {"strategy": value}
    if not isinstance(value, Mapping):
        problems.refuse(path, f"a strategy name or a mapping, got {value!r:.80}")
        return
    for key, item in value.items():
        if key == "max_restarts_on_errors":
            _set(out, "max_retries", item, f"{path}.{key}", problems)
        elif key == "strategy":
            if item is not None and str(item).lower() not in RECOVERY_STRATEGIES:
                problems.refuse(
                    f"{path}.strategy",
                    f"unknown strategy {item!r:.80}; SkyPilot's are FAILOVER and EAGER_NEXT_REGION",
                )
        else:
            problems.refuse(
                f"{path}.{key}",
                "not taken by spothop, whose recovery fails over across zones, regions and "
                "clouds by itself; remove it",
            )


def _set(out: dict[Any, Any], field: str, value: Any, source: str, problems: KeyProblems) -> None:
    if field in out and out[field] != value:
        problems.refuse(field, f"says the same as SkyPilot's {source}; keep one of them")
        return
    out[field] = value
