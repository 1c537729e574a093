"""A job's secrets (jobs/spec_secrets.py): the names in the spec, the values apart, filled from
``--secret``, a null never given an error naming it, and the value in no output or stored
spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.errors import EXIT_BAD_INPUT, JobSpecError
from spothop.jobs.spec import JobSpec, load_job
from spothop.jobs.store import JobStore

VALUE = "hf_very-secret-7c1e"
SKY = "resources: {use_spot: true}\nsecrets:\n  HF_TOKEN: null\n  WANDB: wb-in-the-file\n"


def test_the_file_and_the_command_line_give_the_values_and_the_spec_keeps_only_names() -> None:
    spec = load_job(
        {"name": "s", "run": "true", "secrets": {"HF_TOKEN": None, "N": 7}},
        secrets={"HF_TOKEN": VALUE, "EXTRA": "x"},
    )
    assert spec.secrets == ["EXTRA", "HF_TOKEN", "N"]
    assert spec.secret_values == {"HF_TOKEN": VALUE, "N": "7", "EXTRA": "x"}
    assert VALUE not in spec.to_json() and VALUE not in repr(spec)
    stored = JobSpec.from_json(spec.to_json())
    assert stored.secrets == spec.secrets and stored.secret_values == {}


@pytest.mark.parametrize(
    ("secrets", "names"),
    [
        (
            {"HF_TOKEN": None, "B": ""},
            ["secrets.HF_TOKEN: has no value", "secrets.B: has no value"],
        ),
        (["HF_TOKEN"], ["secrets.HF_TOKEN: has no value; give it with --secret HF_TOKEN=VALUE"]),
        ({"bad-name": "x"}, ["secrets.bad-name: not an environment variable name"]),
        ({"SPOTHOP_X": "x"}, ["secrets.SPOTHOP_X: names starting with SPOTHOP_"]),
        ({"T": {"a": 1}}, ["secrets.T: a value is text"]),
        ("HF_TOKEN", ["secrets: a mapping NAME: value"]),
    ],
)
def test_a_malformed_or_unfilled_secret_is_an_error_naming_it(
    secrets: object, names: list[str]
) -> None:
    with pytest.raises(JobSpecError) as caught:
        load_job({"name": "s", "run": "true", "secrets": secrets})
    for name in names:
        assert name in str(caught.value)


def test_a_name_in_both_envs_and_secrets_is_refused() -> None:
    with pytest.raises(JobSpecError, match=r"secrets\.T: also in envs"):
        load_job({"name": "s", "run": "true", "envs": {"T": "a"}, "secrets": {"T": "b"}})


def test_the_stores_file_holds_the_name_and_never_the_value(tmp_path: Path) -> None:
    spec = load_job({"name": "s", "run": "true", "secrets": {"HF_TOKEN": VALUE}})
    db = tmp_path / "store.db"
    with JobStore(f"sqlite:///{db}") as store:
        job_id = store.create_job(spec, secret_values=spec.secret_values)
        assert store.get_job(job_id).spec().secrets == ["HF_TOKEN"]
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("store.db*"))
    assert b"HF_TOKEN" in stored and VALUE.encode() not in stored


def test_plan_fills_a_null_secret_from_the_command_line_or_names_it_and_never_echoes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(SKY + "run: python x.py\n")
    capsys.readouterr()
    assert main(["plan", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "secrets.HF_TOKEN" in err and "--secret HF_TOKEN" in err
    assert main(["plan", str(path), "--json", "--explain", "--secret", f"HF_TOKEN={VALUE}"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["candidates"]
    assert VALUE not in out.out + out.err and "wb-in-the-file" not in out.out + out.err
    monkeypatch.setenv("HF_TOKEN", VALUE)  # --secret NAME: this shell's value
    assert main(["plan", str(path), "--secret", "HF_TOKEN"]) == 0
    out = capsys.readouterr()
    assert VALUE not in out.out + out.err
    monkeypatch.delenv("HF_TOKEN")
    assert main(["plan", str(path), "--secret", "HF_TOKEN"]) == EXIT_BAD_INPUT
    assert "--secret HF_TOKEN: not set in this shell" in capsys.readouterr().err
    assert main(["plan", str(path), "--secret", f"bad name={VALUE}"]) == EXIT_BAD_INPUT
    assert VALUE not in capsys.readouterr().err  # a malformed option does not echo the value


def test_secrets_count_toward_what_a_worker_start_takes() -> None:
    from spothop.service.launch import ENV_TOTAL_MAX_BYTES, check_spec

    big = "x" * (100 * 1024)
    secrets = {f"S{i}": big for i in range(ENV_TOTAL_MAX_BYTES // len(big) + 1)}
    spec = load_job({"name": "s", "run": "true", "secrets": secrets})
    with pytest.raises(JobSpecError, match="envs and secrets: ") as caught:
        check_spec(spec)
    assert big not in str(caught.value)


def test_a_name_given_by_env_and_by_secret_at_once_is_refused_at_the_first_load() -> None:
    """Found by the hostile-spec property: --env HF_TOKEN=… --secret HF_TOKEN=… was accepted,
    then refused when the server read the spec back."""
    with pytest.raises(JobSpecError, match=r"secrets\.HF_TOKEN: also in envs"):
        load_job({"name": "t", "run": "x"}, env={"HF_TOKEN": "a"}, secrets={"HF_TOKEN": "b"})
