"""load_job refuses any content with a JobSpecError, never another exception: arbitrary mappings
built from the spec's own field names, and real job files damaged (tests/hostile_text.py)."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from spothop.errors import JobSpecError
from spothop.jobs import dstack, skypilot
from spothop.jobs.spec import (
    AlternativeSpec,
    BatchJobSpec,
    CheckpointSpec,
    JobSpec,
    ProvidersSpec,
    ReservedSpec,
    ResourcesSpec,
    SpreadSpec,
    load_job,
)
from tests.hostile_text import FAST_PARSER_SETTINGS, JUNK, PROPERTY_SETTINGS, hostile, write_hostile
from tests.jobs.test_spec import ISSUE_EXAMPLE
from tests.jobs.test_spec_dstack import DSTACK_TASK
from tests.jobs.test_spec_skypilot import SKYPILOT_TASK


def _fields(*models: type[BaseModel]) -> list[str]:
    return sorted({f.alias or name for m in models for name, f in m.model_fields.items()})


# The spec's own field names (and SkyPilot's), so that most draws reach the validators behind them.
TOP = [
    *_fields(JobSpec),
    *sorted(skypilot.TOP_KEYS_UNSUPPORTED),
    *sorted(dstack.TOP_KEYS_UNSUPPORTED),
    "type",
    "commands",
    "env",
    "working_dir",
    "spot_policy",
    "retry",
    "backends",
]
NESTED = [
    *_fields(
        ResourcesSpec,
        AlternativeSpec,
        ProvidersSpec,
        SpreadSpec,
        ReservedSpec,
        CheckpointSpec,
        BatchJobSpec,
    ),
    *sorted(skypilot.RESOURCE_KEYS_MAPPED | set(skypilot.RESOURCE_KEYS_UNSUPPORTED)),
    "any_of",
    "memory",
    "gpu",
    "cpu",
    "disk",
    "shm_size",
    "on_events",
    "strategy",
    "max_restarts_on_errors",
    "ordered",
    "instance_type",
    "local_path",
    "path",
    "files",
]
WORDS = [
    "A10G:1",
    "A100",
    "H100:8",
    "a10g:0",
    "batch",
    "task",
    "spot",
    "on-demand",
    "auto",
    "balanced",
    "fail",
    "6h",
    "90m",
    "1h30m",
    "auto",
    "s3://b/x",
    "file://out",
    "data/*.jsonl",
    ".",
    "aws-sim",
    "us-east-1a",
    "nvswitch",
    "4+",
    "python",
    "docker:ubuntu:22.04",
    "docker:bad image",
    "ami-0123",
    "tpu-v4-8",
    "kubernetes",
    "aws/us-east-1/us-east-1a",
    "best",
    "L4:1",
    "24GB",
    "40GB..80GB",
    "A100:80GB:8",
    "A100,H100:1..2",
    "1..9",
    "g5.xlarge",
    "g5 xlarge",
    "projects/p/global/images/x",
    "./data:/data",
    "~/.cache:/root/.cache",
    "/etc/x:../../escape",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS + list(JUNK)),
    st.text(max_size=20),
    st.dates(min_value=dt.date(1, 1, 1)),
)
keys = st.one_of(st.sampled_from(NESTED), st.text(max_size=8), st.integers(-3, 3), st.none())


def _values(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)
        ),
        max_leaves=12,
    )


# The corpus of SkyPilot and dstack files (tests/jobs/dialects/): every key and form of both
# dialects, each a file to damage (the chains, several documents, left out of the mappings).
CORPUS = [
    case["file"]
    for path in sorted((Path(__file__).parent / "dialects").glob("*.yaml"))
    for case in yaml.safe_load(path.read_text())
]
TEXTS = [ISSUE_EXAMPLE, SKYPILOT_TASK, DSTACK_TASK, *CORPUS]
EXAMPLES = [
    d
    for d in (next(iter(yaml.safe_load_all(t))) if "\n---" not in t else None for t in TEXTS)
    if isinstance(d, dict) and d
]


@st.composite
def _damaged_spec(draw: st.DrawFn) -> dict[Any, Any]:
    """A real job, one to three of its fields (or their sub-fields) replaced, dropped or added:
    most draws stay close enough to valid to reach the checks behind the first one."""
    spec = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 3))):
        target = spec
        if not target:  # a small file, every field dropped
            break
        key = draw(st.sampled_from(sorted(target, key=str)))
        if isinstance(target[key], dict) and target[key] and draw(st.booleans()):
            target = target[key]
            key = draw(st.sampled_from(sorted(target, key=str)))
        action = draw(st.sampled_from(("replace", "replace", "drop", "add")))
        if action == "replace":
            target[key] = draw(_values(scalars))
        elif action == "drop":
            del target[key]
        else:
            target[draw(keys)] = draw(_values(scalars))
    return spec


_arbitrary = st.dictionaries(
    st.one_of(st.sampled_from(TOP), keys), _values(scalars), min_size=0, max_size=10
).map(lambda d: {"run": "python x.py", **d} if len(d) % 2 else d)
mappings = st.one_of(_arbitrary, _damaged_spec(), _damaged_spec())


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs")


launch_env = st.dictionaries(
    st.sampled_from(["HF_TOKEN", "MODEL", "A"]), st.text(max_size=6), max_size=2
)

launch_secrets = st.dictionaries(
    st.sampled_from(["HF_TOKEN", "API_KEY", "bad name"]), st.text(max_size=6), max_size=2
)


@FAST_PARSER_SETTINGS
@given(data=mappings, env=launch_env, secrets=launch_secrets)
def test_any_mapping_loads_or_is_a_job_spec_error(
    data: dict[Any, Any], env: dict[str, str], secrets: dict[str, str], base_dir: Path
) -> None:
    try:
        spec = load_job(data, base_dir=base_dir, env=env, secrets=secrets)
    except JobSpecError as exc:
        assert str(exc)
        return
    # what loads can be stored and read back (a secret's value is never stored: names only)
    assert JobSpec.from_json(spec.to_json()).model_dump() == spec.model_dump()
    # ... and sent to the server, which reads the CLI's to_json (the secrets' values with it)
    sent = {**json.loads(spec.to_json()), "secrets": spec.secret_values}
    assert load_job(sent, base_dir=base_dir) == spec


@PROPERTY_SETTINGS
@given(text=hostile(TEXTS))
def test_any_damaged_job_file_loads_or_is_a_job_spec_error(text: str, base_dir: Path) -> None:
    path = write_hostile(base_dir / "job.yaml", text)
    try:
        spec = load_job(path)
    except JobSpecError:
        return
    assert JobSpec.from_json(spec.to_json()) == spec
