"""The job spec: a job file validates into a frozen JobSpec, or the error names the field, value and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spothop.errors import ConfigError, JobSpecError, NotFoundError
from spothop.jobs.spec import JobKind, JobSpec, MarketChoice, Tolerance, load_job

ISSUE_EXAMPLE = """\
name: embed-reviews
kind: batch
resources:
  accelerators: A10G:1
  min_gpu_memory_gib: 16
num_nodes: 1
workers: 4
market: spot
tolerance: balanced
max_interruptions: 20
deadline: 6h
providers: {allow: [aws-sim, gcp-sim], deny: []}
spread: {min_zones: 2, min_instance_types: 2}
reserved: [{provider: aws-sim, instance_type: g5.xlarge, zone: us-east-1a, count: 1}]
setup: pip install -r requirements.txt
run: python embed.py
envs: {BATCH_SIZE: "64"}
workdir: .
checkpoint: {url: s3://my-bucket/ckpt/embed, interval: auto}
batch: {inputs: [data/*.jsonl], records_per_shard: 500, output: s3://my-bucket/out/embed}
"""


def _job(**fields: Any) -> dict[str, Any]:
    return {"name": "j", "run": "python train.py", **fields}


def _error(data: dict[str, Any], tmp_path: Path | None = None) -> JobSpecError:
    with pytest.raises(JobSpecError) as caught:
        load_job(data, base_dir=tmp_path)
    return caught.value


def test_the_issue_example_loads_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "embed.yaml"
    path.write_text(ISSUE_EXAMPLE)
    spec = load_job(path)
    assert spec.kind is JobKind.BATCH and spec.workers == 4 and spec.node_count == 4
    assert spec.resources.gpu_name == "A10G" and spec.resources.gpu_count == 1
    assert spec.market is MarketChoice.SPOT and spec.tolerance is Tolerance.BALANCED
    assert spec.deadline_s == 6 * 3600
    assert spec.providers.allow == ["aws-sim", "gcp-sim"]
    assert spec.reserved[0].zone == "us-east-1a" and spec.reserved[0].count == 1
    assert spec.envs == {"BATCH_SIZE": "64"}
    assert spec.checkpoint is not None and spec.checkpoint.interval_s is None  # auto
    assert spec.batch is not None and spec.batch.records_per_shard == 500


def test_relative_paths_resolve_against_the_job_files_folder(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: j\nkind: batch\nrun: python e.py\nworkdir: code\n"
        "checkpoint: {url: ckpt}\n"
        "batch: {inputs: [data/*.jsonl, s3://b/x.jsonl], output: file://out}\n"
    )
    spec = load_job(path)
    assert spec.workdir == str(tmp_path / "code")
    assert spec.checkpoint is not None and spec.checkpoint.url == str(tmp_path / "ckpt")
    assert spec.batch is not None
    assert spec.batch.inputs == [str(tmp_path / "data" / "*.jsonl"), "s3://b/x.jsonl"]
    assert spec.batch.output == f"file://{tmp_path / 'out'}"


def test_a_job_without_a_name_takes_its_files_name(tmp_path: Path) -> None:
    path = tmp_path / "my job.yaml"
    path.write_text("run: echo hi\n")
    assert load_job(path).name == "my-job"


def test_to_json_and_from_json_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "embed.yaml"
    path.write_text(ISSUE_EXAMPLE)
    spec = load_job(path)
    again = JobSpec.from_json(spec.to_json())
    assert again == spec
    assert JobSpec.from_json(again.to_json()) == spec


def test_a_stored_spec_that_no_longer_validates_is_a_spec_error() -> None:
    with pytest.raises(JobSpecError, match="stored job spec"):
        JobSpec.from_json('{"name": "j"}')


def test_spread_defaults_to_two_zones_and_types_from_three_batch_workers(tmp_path: Path) -> None:
    batch = {"kind": "batch", "batch": {"inputs": ["a.jsonl"], "output": "out"}}
    many = load_job(_job(workers=3, **batch), base_dir=tmp_path)
    few = load_job(_job(workers=2, **batch), base_dir=tmp_path)
    task = load_job(_job(num_nodes=4), base_dir=tmp_path)
    assert (many.spread.min_zones, many.spread.min_instance_types) == (2, 2)
    assert (few.spread.min_zones, few.spread.min_instance_types) == (1, 1)
    assert (task.spread.min_zones, task.spread.min_instance_types) == (1, 1)


@pytest.mark.parametrize(
    ("value", "seconds"), [("6h", 21600), ("90m", 5400), ("1h30m", 5400), ("2d", 172800), (45, 45)]
)
def test_a_deadline_is_a_duration(value: Any, seconds: float) -> None:
    assert load_job(_job(deadline=value)).deadline_s == seconds


def test_accelerators_take_skypilots_spellings_and_the_catalogs_names() -> None:
    assert load_job(_job(resources={"accelerators": "a10g"})).resources.accelerators == "A10G:1"
    assert load_job(_job(resources={"accelerators": {"A100": 8}})).resources.gpu_count == 8
    family = load_job(_job(resources={"gpu": "a100", "gpus_per_node": 2})).resources
    assert (family.gpu_name, family.gpu_count) == ("A100", 2)


def test_an_unknown_gpu_gets_did_you_mean() -> None:
    error = _error(_job(resources={"accelerators": "A10X:1"}))
    assert "resources.accelerators" in str(error)
    assert "did you mean" in str(error) and "'A10G'" in str(error)
    assert error.problems[0][0] == "resources.accelerators"
    assert isinstance(error, ConfigError) and error.exit_code == 2


def test_an_unknown_field_names_the_path_and_the_closest_field() -> None:
    error = _error(_job(tolerence="balanced", resources={"min_gpu_mem": 16}))
    text = str(error)
    assert "tolerence: unknown field; did you mean 'tolerance'?" in text
    assert "resources.min_gpu_mem: unknown field; did you mean 'min_gpu_memory_gib'?" in text


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"market": "spott"}, "market", "'spot', 'on-demand' or 'auto', got 'spott'"),
        ({"deadline": "6 hours"}, "deadline", "not a duration"),
        ({"deadline": 0}, "deadline", "greater than 0"),
        ({"max_retries": float("nan")}, "max_retries", "nan"),
        ({"budget_usd": float("inf")}, "budget_usd", "inf"),
        ({"num_nodes": 0}, "num_nodes", "between 1 and 1024 nodes, got 0"),
        ({"resources": {"accelerators": "A10G:0"}}, "resources.accelerators", "GPU count"),
        ({"resources": {"accelerators": "A10G:1", "gpu": "A10G"}}, "resources", "not both"),
        ({"resources": {"cpus": -1}}, "resources.cpus", "vCPUs"),
        ({"providers": {"allow": ["a"], "deny": ["a"]}}, "providers", "allowed and denied"),
        ({"envs": {"SPOTHOP_JOB_ID": "x"}}, "envs", "spothop's own"),
        ({"envs": {"A": None}}, "envs.A", "has no value"),
        ({"checkpoint": {"url": "s4://b/x"}}, "checkpoint.url", "did you mean 's3'"),
        ({"checkpoint": {"url": "b", "interval": "often"}}, "checkpoint.interval", "duration"),
        ({"workers": 4}, "(top level)", "workers is for batch jobs"),
        ({"kind": "batch"}, "(top level)", "needs a 'batch' section"),
        ({"run": " "}, "run", "is empty; give the command"),
        ({"num_nodes": 2, "spread": {"min_zones": 3}}, "(top level)", "only 2 nodes"),
    ],
)
def test_a_bad_field_is_named_with_its_value_and_what_was_expected(
    fields: dict[str, Any], path: str, words: str
) -> None:
    error = _error(_job(**fields))
    assert any(p == path and words in m for p, m in error.problems), error.problems


def test_a_missing_run_says_what_to_give() -> None:
    error = _error({"name": "j"})
    assert "run: missing; give the command the job runs" in str(error)


def test_a_workdir_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    error = _error(_job(workdir="nowhere"), tmp_path)
    assert "workdir" in str(error) and "does not exist" in str(error)
    (tmp_path / "code.py").write_text("print()")
    error = _error(_job(workdir="code.py"), tmp_path)
    assert "workdir" in str(error) and "is a file, not a folder" in str(error)


def test_a_file_that_is_not_a_job_is_refused_with_its_name(tmp_path: Path) -> None:
    for text, words in (("[1, 2]", "a mapping of fields, got list"), ("a: [", "not valid YAML")):
        path = tmp_path / "job.yaml"
        path.write_text(text)
        with pytest.raises(JobSpecError, match=words) as caught:
            load_job(path)
        assert str(path) in str(caught.value)
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(JobSpecError, match="not a text"):
        load_job(tmp_path / "bin.yaml")
    with pytest.raises(NotFoundError, match="does not exist"):
        load_job(tmp_path / "missing.yaml")


def test_the_spec_is_frozen() -> None:
    spec = load_job(_job())
    with pytest.raises(ValueError, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


def test_requirements_carry_the_resources_and_places() -> None:
    spec = load_job(
        _job(
            resources={"accelerators": "A10G:1", "min_tflops": 20, "cpus": "4+", "memory_gib": 16},
            providers={"allow": ["aws-sim"], "deny": ["gcp-sim"]},
            regions=["us-east-1"],
            zones=["us-east-1a"],
        )
    )
    req = spec.requirements()
    assert (req.gpu, req.gpus_per_node, req.min_tflops_per_gpu) == ("A10G", 1, 20)
    assert (req.min_cpus, req.min_memory_gib) == (4, 16)
    assert (req.providers_allow, req.providers_deny) == (("aws-sim",), ("gcp-sim",))
    assert (req.regions, req.zones, req.alternatives) == (("us-east-1",), ("us-east-1a",), ())


def test_a_gpu_named_without_a_count_means_one_and_no_gpu_means_any() -> None:
    assert load_job(_job(resources={"gpu": "L4"})).requirements().gpus_per_node == 1
    anything = load_job(_job()).requirements()
    assert (anything.gpu, anything.gpus_per_node) == (None, None)


def test_any_of_alternatives_inherit_what_they_leave_out() -> None:
    spec = load_job(
        _job(
            resources={
                "gpu": "A100",
                "gpus_per_node": 8,
                "cpus": 32,
                "any_of": [
                    {"accelerators": "H100:4", "providers": ["a"]},
                    {"gpus_per_node": 4, "cpus": 16},
                ],
            },
            providers={"allow": ["a", "b"]},
        )
    )
    req = spec.requirements()
    assert req.providers_allow == ("a", "b") and req.gpu is None  # the shared, outer filters
    first, second = req.alternatives
    assert (first.gpu, first.gpus_per_node, first.min_cpus, first.providers_allow) == (
        "H100",
        4,
        32,
        ("a",),
    )
    assert (second.gpu, second.gpus_per_node, second.min_cpus) == ("A100", 4, 16)


def test_requirements_select_the_catalogs_offerings_of_the_asked_gpu() -> None:
    from spothop.resources.catalog import builtin_offerings

    req = load_job(_job(resources={"accelerators": "A10G:1"})).requirements()
    chosen = [o for o in builtin_offerings() if req.qualifies(o)]
    assert chosen and {(o.gpu, o.gpu_count) for o in chosen} == {("A10G", 1)}


def test_an_unknown_field_with_no_close_name_lists_the_fields_there() -> None:
    error = _error(_job(checkpoint={"url": "c", "zzz": 1}))
    assert (
        "checkpoint.zzz: unknown field; the fields here are compatibility, interval, replicas, save_cost_s, url"
        in str(error)
    )
