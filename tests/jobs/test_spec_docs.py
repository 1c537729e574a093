"""docs/jobs.md is the spec's reference: every field is in its tables, and every example loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from spothop.jobs.spec import (
    AlternativeSpec,
    BatchJobSpec,
    CheckpointSpec,
    JobSpec,
    ResourcesSpec,
    load_job,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
TEXT = DOCS.read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```yaml\n(.*?)```", TEXT, flags=re.DOTALL)


def _table_fields(text: str) -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE))


@pytest.mark.parametrize(
    "model", [JobSpec, ResourcesSpec, AlternativeSpec, CheckpointSpec, BatchJobSpec]
)
def test_every_field_is_documented(model: type[BaseModel]) -> None:
    documented = _table_fields(TEXT) | {"providers", "regions", "zones"}
    names = {f.alias or name for name, f in model.model_fields.items()}
    assert names <= documented, sorted(names - documented)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.split("\n", 1)[0])
def test_every_example_loads(example: str) -> None:
    data = yaml.safe_load(example)
    if "run" not in data:  # a fragment of one section
        data = {"name": "fragment", "run": "true", **data}
    load_job(data, base_dir=DOCS.parent)
