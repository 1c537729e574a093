"""``file_mounts`` on a real (isolated) instance: a folder of this machine uploaded at launch, a
bucket folder and a bucket URL copied in at boot; the job's run reads all three."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobs.e2e.conftest import WORLD, running_harness


def test_a_run_reads_its_uploaded_and_bucket_mounts(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path_factory.mktemp("outside-every-bucket")  # not the world's: uploaded
    (local / "a.txt").write_text("uploaded\n")
    data = tmp_path / "bucket-data"  # the test's folder is the world's bucket: copied
    data.mkdir()
    (data / "b.txt").write_text("from the bucket\n")
    out = tmp_path / "out.txt"
    run = f"cat up/a.txt bucket/b.txt viaurl/b.txt > {out}"
    spec = {
        "name": "mounts",
        "run": run,
        "file_mounts": {"up": str(local), "bucket": str(data), "viaurl": f"local://{data}"},
    }
    with running_harness(tmp_path, monkeypatch, WORLD) as h:
        job_id = h.launch(spec)
        job = h.wait_final(job_id, 120, "the job's end")
        assert str(job.state) == "succeeded", h.status(job_id)
        assert out.read_text() == "uploaded\nfrom the bucket\nfrom the bucket\n"
