"""The examples' job files and the demo world load, and say what the demo promises."""

from __future__ import annotations

from spothop.jobs.spec import JobKind, load_job
from spothop.providers.local.world import load_world
from tests.examples.conftest import EXAMPLES


def test_the_embedding_job_is_a_batch_job_over_the_generated_corpus() -> None:
    spec = load_job(EXAMPLES / "embed" / "job.yaml")
    assert spec.kind is JobKind.BATCH and spec.batch is not None
    assert spec.workdir == str(EXAMPLES / "embed")  # relative paths resolve against the job file
    # The corpus and the outputs live in the demo world's bucket, which every instance sees.
    bucket = EXAMPLES / ".buckets" / "demo"
    assert bucket in load_world(EXAMPLES / "worlds" / "demo.yaml").buckets
    assert spec.batch.inputs == [str(bucket / "embed" / "*.jsonl")]
    assert spec.batch.output == str(bucket / "embed" / "out")
    assert spec.run is not None and "embed.py" in spec.run


def test_the_fine_tune_is_a_checkpointed_task() -> None:
    spec = load_job(EXAMPLES / "finetune" / "job.yaml")
    assert spec.kind is JobKind.TASK
    assert spec.checkpoint is not None and spec.checkpoint.url == str(
        EXAMPLES / ".buckets" / "demo" / "finetune" / "ckpt"
    )


def test_the_demo_world_has_several_clouds_with_their_own_notices_prices_and_storms() -> None:
    world = load_world(EXAMPLES / "worlds" / "demo.yaml")
    assert len(world.cloud_names) >= 3 and world.speed > 1  # an accelerated clock
    leads = {world.cloud(name).notice_lead_time_s for name in world.cloud_names}
    assert len(leads) >= 3
    prices = {
        min(o.spot_price_usd_per_hour or 0 for o in world.offerings[name])
        for name in world.cloud_names
    }
    assert len(prices) == len(world.cloud_names)
    storms = [
        world.cloud(name).market.synthetic.mean_time_between_preemptions_s  # type: ignore[union-attr]
        for name in world.cloud_names
    ]
    assert min(storms) <= 3600  # stormier than any market of the default world (6 h at most 2 h)
