"""dstack task configurations (``.dstack.yml``, ``type: task``), mapped onto spothop's job spec.

A mapping is a dstack configuration when it has a top-level ``type`` (spothop
says ``kind``). ``type: task`` maps key by key; any other type (``service``,
``dev-environment``, ``fleet`` …) is refused naming it. What maps (docs/jobs.md
lists every key):

- ``name``; ``commands`` (a list, run in order by one ``bash``) → ``run``;
  ``setup`` (dstack's older list) → ``setup``; ``working_dir`` → a ``cd`` before
  the commands; ``image`` → ``image``; ``nodes`` → ``num_nodes``;
- ``env`` (``[NAME=VALUE, NAME]`` or a mapping) → ``envs``; a bare or null
  name is one the user must give (``launch --env NAME=VALUE``);
- ``resources.gpu`` in dstack's forms (:func:`gpu_alternatives`: ``24GB``,
  ``A100:2``, ``A100,H100:80GB:8``, ``nvidia:A10G``, ``{name, memory, count}``,
  count ranges ``1..2``) → ``resources`` (several names or counts:
  ``any_of``); ``cpu`` and ``memory`` (``4..``, ``32GB..``) → lower bounds;
  ``disk`` → ``disk_size_gib``; ``shm_size`` is accepted (spothop's
  containers share the host's IPC, so ``/dev/shm`` is the host's);
- ``spot_policy`` (``spot``, ``on-demand``, ``auto``; dstack's default
  on-demand) → ``market``; ``backends`` → ``providers.allow``; ``regions``;
- ``instance_types`` → ``resources.instance_type`` (several: one ``any_of`` entry each);
- ``files`` (``LOCAL:PATH``, ``LOCAL``, ``{local_path, path}``) → ``file_mounts``
  (:func:`files_as_mounts`): each local file or folder uploaded to its path on the node;
- ``retry``: spothop always recovers interruptions; retrying on ``error``
  needs spothop's ``max_retries`` beside it (a count; dstack gives a duration).

spothop's own fields may be added to a dstack file; everything else is refused
by its path with one line saying what spothop does instead.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from spothop.jobs.spec_messages import KeyProblems
from spothop.jobs.spec_mounts import check_dest

DSTACK_TYPES = frozenset({"task", "service", "dev-environment", "fleet", "gateway", "volume"})
TOP_KEYS_UNSUPPORTED: Mapping[str, str] = {
    "repos": "spothop does not clone repositories; clone it in setup",
    "python": "spothop runs on the cloud's image: install the Python you need in setup (or "
    "give image)",
    "nvcc": "spothop runs on the cloud's image: install CUDA's compiler in setup (or give image)",
    "ports": "opening ports is for services, which spothop does not run",
    "max_price": "spothop has no hourly price cap; give budget_usd (the whole job's)",
    "max_duration": "spothop does not stop a job after a time; give deadline to have it done "
    "by then",
    "volumes": "spothop does not attach volumes; keep data in a bucket (checkpoint.url)",
    "privileged": "spothop's containers are not privileged; remove it",
    "fleets": "spothop launches each job's own instances; remove it",
    "reservation": "name pools you already pay for with spothop's reserved",
    "idle_duration": "a spothop job's instances end with the job; remove it",
    "creation_policy": "a spothop job's instances are its own; remove it",
    "utilization_policy": "spothop does not watch GPU use; remove it",
    "schedule": "spothop launches when you run spothop launch; use your scheduler (cron)",
    "priority": "spothop has no job priorities; remove it",
    "single_branch": "spothop does not clone repositories; remove it",
    "user": "commands run as the instance's user; remove it",
    "entrypoint": "spothop runs commands in bash; remove it",
    "registry_auth": "spothop pulls public images only; remove it",
    "startup_order": "a spothop group's nodes start together (docs/multinode.md); remove it",
    "stop_criteria": "a spothop task is done when every node is; remove it",
}
_GIB = re.compile(r"^(\d+(?:\.\d+)?)\s*(GB|GiB|TB|MB)?$", re.IGNORECASE)
_UNIT_GIB = {"gb": 1.0, "gib": 1.0, "tb": 1024.0, "mb": 1 / 1024}
MAX_COUNT_CHOICES = 8  # a count range gives one alternative per count: at most this many
VENDORS = frozenset({"nvidia", "amd"})


def is_dstack(data: Mapping[Any, Any]) -> bool:
    """True when ``data`` is a dstack configuration (a top-level ``type``)."""
    return "type" in data


def from_dstack(
    data: Mapping[Any, Any], where: str = "", env: Mapping[str, str] | None = None
) -> dict[Any, Any]:
    """The spothop job spec ``data`` (a dstack ``type: task``) means, ``env`` (``--env``) over
    its ``env``; :class:`JobSpecError` naming each key spothop does not take. ``load_job``
    validates the result as any spec."""
    problems = KeyProblems(where, "dstack task")
    kind = data.get("type")
    if kind != "task":
        shown = kind if isinstance(kind, str) else repr(kind)[:80]
        what = "a dstack" if isinstance(kind, str) and kind in DSTACK_TYPES else "an unknown"
        problems.refuse(
            "type",
            f"{shown} is {what} configuration type: spothop runs dstack tasks (type: task) only",
        )
        problems.raise_if_any()
    out: dict[Any, Any] = {"market": "on-demand"}  # dstack's default spot policy
    commands = _commands(data, problems)
    for key, value in data.items():
        _top(str(key), value, out, problems)
    if _retries_errors(data.get("retry")) and "max_retries" not in data:
        problems.refuse(
            "retry",
            "retrying on error needs a count in spothop: add max_retries: N beside it "
            "(interruptions and missing capacity are always recovered)",
        )
    if "instance_types" in data:
        _instance_types(data["instance_types"], out, problems)
    if env:
        envs = out.get("envs")
        out["envs"] = {**(envs if isinstance(envs, Mapping) else {}), **env}
    _required(out.get("envs"), problems)
    if commands is not None:
        out["run"] = commands
    problems.raise_if_any()
    return out


def _top(key: str, value: Any, out: dict[Any, Any], problems: KeyProblems) -> None:
    if key in TOP_KEYS_UNSUPPORTED:
        problems.refuse(key, f"dstack's {key!r}: {TOP_KEYS_UNSUPPORTED[key]}")
    elif key in ("type", "commands", "working_dir", "instance_types"):
        return  # read as a whole: the commands (_commands), the types after resources
    elif key == "setup":
        out["setup"] = "\n".join(map(str, value)) if isinstance(value, list) else value
    elif key == "nodes":
        out["num_nodes"] = value
    elif key == "env":
        out["envs"] = _env(value, problems)
    elif key == "spot_policy":
        if value not in ("spot", "on-demand", "auto"):
            problems.refuse(key, f"spot, on-demand or auto, got {value!r:.80}")
        out["market"] = value
    elif key == "backends":
        out["providers"] = (
            {"allow": [str(b).lower() for b in value]} if isinstance(value, list) else value
        )
    elif key == "retry":
        _retry(value, problems)
    elif key == "files":
        out["file_mounts"] = files_as_mounts(value, problems)
    elif key == "resources":
        out["resources"] = _resources(value, problems)
    else:
        out[key] = value  # name, image, regions, and spothop's own fields: the spec checks them


def _commands(data: Mapping[Any, Any], problems: KeyProblems) -> str | None:
    commands = data.get("commands")
    if commands is None:
        return None
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
        problems.refuse("commands", "a list of shell commands, run in order")
        return None
    text = "\n".join(commands)
    workdir = data.get("working_dir")
    if workdir is not None:
        if not isinstance(workdir, str) or not workdir.strip():
            problems.refuse("working_dir", f"a folder, got {workdir!r:.80}")
        else:
            text = f"cd {shlex.quote(workdir)} || exit\n{text}"
    return text


def _env(value: Any, problems: KeyProblems) -> Any:
    if isinstance(value, list):
        pairs: dict[str, Any] = {}
        for i, item in enumerate(value):
            if not isinstance(item, str):
                problems.refuse(f"env.{i}", f"NAME=VALUE or NAME, got {item!r:.80}")
                continue
            name, equals, text = item.partition("=")
            pairs[name] = text if equals else None
        value = pairs
    return dict(value) if isinstance(value, Mapping) else value


def _required(envs: Any, problems: KeyProblems) -> None:
    """Each name ``env`` lists without a value (dstack asks the user) and no ``--env`` gave."""
    if not isinstance(envs, Mapping):
        return
    for name, text in envs.items():
        if text is None:
            problems.refuse(
                f"env.{name}",
                f"dstack asks the user for it; give it with --env {name}=VALUE (spothop "
                f"launch or plan; --env {name} passes your shell's)",
            )


def _instance_types(value: Any, out: dict[Any, Any], problems: KeyProblems) -> None:
    """dstack's ``instance_types``: one → ``resources.instance_type``; several → one ``any_of``
    entry each (each keeps the GPU ``resources`` names, which every entry inherits)."""
    types = [value] if isinstance(value, str) else value
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        problems.refuse("instance_types", f"a list of instance type names, got {value!r:.80}")
        return
    resources = out.setdefault("resources", {})
    if not isinstance(resources, dict):
        return  # the spec's own check refuses it
    if len(types) == 1:
        resources["instance_type"] = types[0]
    elif resources.get("any_of"):
        problems.refuse(
            "instance_types",
            "several instance types beside several GPUs: give one of them (the types name "
            "their GPUs)",
        )
    else:
        resources["any_of"] = [{"instance_type": t} for t in types]


def files_as_mounts(value: Any, problems: KeyProblems) -> dict[str, str]:
    """dstack's ``files`` as spothop's ``file_mounts`` ``{DEST: SOURCE}``.

    Each entry is ``LOCAL:PATH``, ``LOCAL`` alone (the same path on the node: a relative one
    in the working folder), or ``{local_path, path}``. ``LOCAL`` is a file or folder of this
    machine (relative: the configuration file's folder, as dstack reads it), packed and
    uploaded at launch; ``PATH`` where the node gets it (relative: the job's workdir there).
    A bad entry is refused by its path (``files.0``)."""
    if not isinstance(value, list):
        problems.refuse("files", f"a list of LOCAL:PATH or {{local_path, path}}, got {value!r:.80}")
        return {}
    out: dict[str, str] = {}
    for i, item in enumerate(value):
        where = f"files.{i}"
        local, dest = _file_entry(item, where, problems)
        if local is None:
            continue
        dest = dest if dest else local
        try:
            check_dest(dest)
        except ValueError as exc:
            problems.refuse(where, f"{dest!r:.80}: {exc}")
            continue
        if dest in out:
            problems.refuse(where, f"{dest!r:.80} is already the path of another entry; keep one")
            continue
        out[dest] = local
    return out


def _file_entry(item: Any, where: str, problems: KeyProblems) -> tuple[str | None, str | None]:
    """``(local, path)`` of one ``files`` entry (path None: the same as local), or ``(None,
    None)`` when it is refused."""
    if isinstance(item, Mapping):
        unknown = sorted(str(k) for k in item if k not in ("local_path", "path"))
        if unknown:
            problems.refuse(f"{where}.{unknown[0]}", "not a field of a dstack files entry")
            return None, None
        local, dest = item.get("local_path"), item.get("path")
        if not isinstance(local, str) or not local.strip():
            problems.refuse(f"{where}.local_path", f"a local file or folder, got {local!r:.80}")
            return None, None
        if dest is not None and (not isinstance(dest, str) or not dest.strip()):
            problems.refuse(f"{where}.path", f"a path on the node, got {dest!r:.80}")
            return None, None
        return local.strip(), dest.strip() if isinstance(dest, str) else None
    if not isinstance(item, str) or not item.strip():
        problems.refuse(where, f"LOCAL:PATH or {{local_path, path}}, got {item!r:.80}")
        return None, None
    local, colon, dest = item.strip().rpartition(":")
    if not colon:
        return dest, None  # LOCAL alone
    if not local or not dest:
        problems.refuse(where, f"{item!r:.80}: write LOCAL:PATH, both parts given")
        return None, None
    return local, dest


_ALL_EVENTS = ["no-capacity", "interruption", "error"]


def _retry(value: Any, problems: KeyProblems) -> None:
    """dstack's ``retry`` is checked; spothop always recovers interruptions and missing
    capacity, and a retry on ``error`` needs ``max_retries`` (:func:`_retries_errors`)."""
    if value is None or isinstance(value, bool):
        return
    if not isinstance(value, Mapping) or not isinstance(value.get("on_events", []), list):
        problems.refuse("retry", f"true, false or {{on_events, duration}}, got {value!r:.80}")
        return
    for key in sorted(set(value) - {"on_events", "duration"}, key=str):
        problems.refuse(f"retry.{key}", "not a dstack retry field spothop reads")


def _retries_errors(value: Any) -> bool:
    if value is True:
        return True
    if isinstance(value, Mapping):
        events = value.get("on_events", _ALL_EVENTS)
        return isinstance(events, list) and "error" in events
    return False


def _gib(value: Any, path: str, problems: KeyProblems) -> float | None:
    """``"32GB"``, ``"32GB.."``, ``32`` → 32 (a lower bound); an upper bound is refused."""
    if isinstance(value, bool):
        problems.refuse(path, f"a size like 32GB or 32GB.., got {value!r}")
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        value = f"{value.get('min', '')}..{value.get('max', '')}"
    text = str(value).strip()
    low, dots, high = text.partition("..")
    if dots and high.strip():
        problems.refuse(path, f"{text!r:.80}: spothop takes a least size only; write {low}..")
        return None
    match = _GIB.match(low.strip())
    if not match:
        problems.refuse(path, f"a size like 32GB or 32GB.., got {text!r:.80}")
        return None
    return float(match.group(1)) * _UNIT_GIB[(match.group(2) or "gb").lower()]


def _resources(value: Any, problems: KeyProblems) -> Any:
    if not isinstance(value, Mapping):
        return value  # the spec's own check refuses it
    out: dict[str, Any] = {}
    for key, item in value.items():
        path = f"resources.{key}"
        if key == "gpu":
            choices = gpu_alternatives(item, path, problems)
            if len(choices) == 1:
                out.update(choices[0])
            elif choices:
                out["any_of"] = choices
        elif key in ("cpu", "memory"):
            low = _cpus(item, path, problems) if key == "cpu" else _gib(item, path, problems)
            if low is not None:
                out["cpus" if key == "cpu" else "memory_gib"] = low
        elif key == "disk":
            size = item.get("size") if isinstance(item, Mapping) else item
            low = _gib(size, path, problems)
            if low is not None:
                out["disk_size_gib"] = max(1, round(low))
        elif key != "shm_size":
            problems.refuse(path, f"dstack's {key!r} is not taken by spothop; remove it")
    return out


def _cpus(value: Any, path: str, problems: KeyProblems) -> float | None:
    if isinstance(value, Mapping):
        value = value.get("count", f"{value.get('min', '')}..{value.get('max', '')}")
    text = str(value).strip()
    if ":" in text:  # dstack's arch:count (x86:4..)
        text = text.rpartition(":")[2]
    low, dots, high = text.partition("..")
    if dots and high.strip():
        problems.refuse(path, f"{text!r:.80}: spothop takes a least count only; write {low}..")
        return None
    try:
        return float(low)
    except ValueError:
        problems.refuse(path, f"a count like 4 or 4.., got {value!r:.80}")
        return None


def gpu_alternatives(value: Any, path: str, problems: Any) -> list[dict[str, Any]]:
    """dstack's ``resources.gpu`` as spothop hardware, one entry per alternative.

    ``24GB`` (any GPU of at least 24 GB, one), ``A100``, ``A100:2``, ``A100:40GB:2``,
    ``A100,H100:8`` (either), ``nvidia:A10G:1`` (the vendor is read from the name),
    ``2`` or ``1..2`` (counts; a range is one entry per count), and the mapping form
    ``{name: [..], memory: 40GB.., count: 2}``. Problems are reported at ``path``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, Mapping):
        names = value.get("name") or []
        names = names if isinstance(names, list) else [names]
        tokens = [",".join(map(str, names))] if names else []
        for key in ("memory", "count"):
            if key in value:
                tokens.append(str(value[key]))
        unknown = sorted(set(value) - {"name", "memory", "count", "vendor"}, key=str)
        for key in unknown:
            problems.refuse(f"{path}.{key}", f"dstack's gpu {key!r} is not taken by spothop")
    elif isinstance(value, str):
        tokens = [t.strip() for t in value.split(":") if t.strip()]
    else:
        problems.refuse(
            path, f"a GPU like A100:2, 24GB or {{name, memory, count}}, got {value!r:.80}"
        )
        return []
    return _from_tokens(tokens, path, problems)


def _from_tokens(tokens: list[str], path: str, problems: Any) -> list[dict[str, Any]]:
    names: list[str] = []
    memory: float | None = None
    counts: list[int] = [1]
    for token in tokens:
        if token.lower() in VENDORS:
            continue
        if token.lower() == "tpu" or token.lower().startswith(("tpu-", "v5", "v4")):
            problems.refuse(path, "TPUs are not run by spothop (GPU instances only)")
            return []
        if re.fullmatch(r"\d+(\.\.\d*)?|\.\.\d+", token):
            counts = _counts(token, path, problems)
        elif re.search(r"\d\s*(GB|GiB|TB|MB)", token, re.IGNORECASE):
            memory = _gib(token, path, problems)
        else:
            names = [n.strip() for n in token.split(",") if n.strip()]
    base: dict[str, Any] = {} if memory is None else {"min_gpu_memory_gib": memory}
    out = []
    choices: list[str | None] = list(names) if names else [None]
    for name in choices:
        for count in counts:
            entry = dict(base)
            if name is not None:
                entry["accelerators"] = f"{name}:{count}"
            else:
                entry["gpus_per_node"] = count
            out.append(entry)
    return out


def _counts(token: str, path: str, problems: Any) -> list[int]:
    low_text, dots, high_text = token.partition("..")
    if not dots:
        return [int(token)]
    if not low_text or not high_text:
        problems.refuse(path, f"{token!r}: give a bounded count range, e.g. 1..2")
        return [1]
    low, high = int(low_text), int(high_text)
    if high < low or high - low + 1 > MAX_COUNT_CHOICES:
        problems.refuse(
            path, f"{token!r}: a count range of 1 to {MAX_COUNT_CHOICES} counts, low first"
        )
        return [1]
    return list(range(low, high + 1))
