"""Chaos and soak (issue 16 item 4): the two example jobs together through every failure at once.

The embedding job (``examples/embed``, the real model) and the LoRA fine-tune
(``examples/finetune``) run side by side under the real controller on the
local cloud (the e2e harness: two clouds, two zones each). The test then
preempts workers of both jobs on both clouds, takes a whole zone out, and
SIGKILLs the controller twice (preempting while it is dead), restarting it each
time. Done when both jobs succeed and:

* zero lost shards and zero duplicate outputs: every shard done, none dead, no
  stray temporaries, every passage exactly one embedding, equal to an
  uninterrupted run (``verify.py``);
* the training state is exact: the adapter is bit-identical to an uninterrupted run;
* the ledger equals the cloud's billing to the micro-dollar (``Ledger.reconcile``:
  nothing unmatched, nothing differing), controller deaths included: the
  ledger prices each attempt from the cloud's own price history;
* ``examples/embed/report.py`` reports what the cloud billed and the queue saw.

Preemptions are injected (the harness's markets are calm), so every one is the
test's: rounds of them, a round per failure, at least five times as many per
simulated hour of running as the demo world's stormy markets bring.

The reduced size runs in ``make test`` (a small corpus, a short fine-tune; the
verifying model loaded once, in-process, shared with tests/examples); the full
size is ``-m slow``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("pyarrow")
pytest.importorskip("peft")

from examples.embed import report as embed_report
from examples.embed import verify
from examples.embed.corpus import write_corpus
from examples.finetune import finetune

from spothop.observe.ledger import Ledger
from spothop.providers.base import Instance
from spothop.queue import OutputStore, open_queue
from tests.examples.conftest import EXAMPLES, embed_model  # noqa: F401  (the shared model)
from tests.jobs.e2e.conftest import Harness, harness  # noqa: F401  (the e2e harness)
from tests.waiting import wait_for

RECORDS_PER_SHARD = 25
BATCH_SIZE = 8
LEAD_S = 10.0  # simulated seconds from a notice to the reclaim: 2 s of wall time at speed 5
END_STATES = {"succeeded", "failed", "cancelled"}


@dataclass(frozen=True)
class Size:
    passages: int
    steps: int
    step_sleep_s: float
    end_timeout_s: float


REDUCED = Size(passages=400, steps=120, step_sleep_s=0.05, end_timeout_s=240)
FULL = Size(passages=4000, steps=600, step_sleep_s=0.05, end_timeout_s=900)


def embed_spec(tmp: Path, size: Size) -> dict[str, Any]:
    data = tmp / "embed-data"
    write_corpus(data / "passages.jsonl", size.passages)
    return {
        "name": "embed-chaos",
        "kind": "batch",
        "workers": 2,
        "market": "spot",
        "tolerance": "aggressive",
        # No --output: the worker reads $SPOTHOP_OUTPUT_URL, the launcher's batch.output.
        "run": f"{sys.executable} {EXAMPLES / 'embed' / 'embed.py'}",
        "envs": {"BATCH_SIZE": str(BATCH_SIZE), "EMBED_THREADS": "1", "EMBED_DEVICE": "cpu"},
        "batch": {
            "inputs": [str(data / "*.jsonl")],
            "records_per_shard": RECORDS_PER_SHARD,
            "output": str(tmp / "embed-out"),
        },
    }


def finetune_spec(tmp: Path, size: Size) -> dict[str, Any]:
    script = EXAMPLES / "finetune" / "finetune.py"
    return {
        "name": "finetune-chaos",
        "market": "spot",
        "tolerance": "aggressive",
        "checkpoint": {"url": str(tmp / "ckpt")},
        "run": f"{sys.executable} {script} --steps {size.steps} "
        f"--step-sleep {size.step_sleep_s} --out {tmp / 'adapter.safetensors'}",
    }


def live(h: Harness, job_id: str) -> bool:
    return h.status(job_id)["state"] not in END_STATES


def preempt_one(h: Harness, job_id: str, avoid: str | None = None) -> Instance | None:
    """Preempt a running worker of ``job_id`` (on a cloud other than ``avoid`` when one runs there)."""

    def victim() -> Instance | bool | None:
        if not live(h, job_id):
            return True  # the job ended first: nothing left to preempt
        running = h.running(job_id)
        preferred = [i for i in running if i.provider != avoid] or running
        return preferred[0] if preferred else None

    found = wait_for(victim, 90, what=f"a running worker of {job_id}", interval_s=0.1)
    if not isinstance(found, Instance):
        return None
    h.preempt(found, lead_time_s=LEAD_S)
    return found


def run_chaos(h: Harness, model: Any, size: Size, monkeypatch: pytest.MonkeyPatch) -> None:
    embed_id = h.launch(embed_spec(h.tmp, size), "embed.yaml")
    tune_id = h.launch(finetune_spec(h.tmp, size), "finetune.yaml")
    output = OutputStore(str(h.tmp / "embed-out"))
    preempted: list[Instance] = []

    def round_of_preemptions() -> None:
        for job_id in (embed_id, tune_id):
            last = preempted[-1].provider if preempted else None
            instance = preempt_one(h, job_id, avoid=last)
            if instance is not None:
                preempted.append(instance)

    # 1. Mid-work on both: the embedder has published a shard, the trainer is training.
    wait_for(lambda: output.published(), 180, what="the first embedded shard")
    round_of_preemptions()
    # 2. The controller SIGKILLed; workers preempted while nobody watches; restarted.
    for _ in range(2):
        for job_id in (embed_id, tune_id):
            if live(h, job_id):
                wait_for(lambda j=job_id: h.running(j) or not live(h, j), 90, what=f"{job_id}")
        h.kill_controller()
        round_of_preemptions()
        h.start_controller()
    # 3. A zone outage: every instance alive in the trainer's zone at once.
    instance = wait_for(
        lambda: (h.running(tune_id) or [None])[0] if live(h, tune_id) else True,
        90,
        what="the trainer running",
        interval_s=0.1,
    )
    if isinstance(instance, Instance):
        for lost in [i for i in h.alive() if i.zone == instance.zone]:
            h.preempt(lost, lead_time_s=LEAD_S)
            preempted.append(lost)

    finals = {
        job_id: h.wait_state(job_id, END_STATES, size.end_timeout_s, what=f"{job_id} to end")
        for job_id in (embed_id, tune_id)
    }
    for final in finals.values():
        assert final["state"] == "succeeded", final["reason"]
    assert finals[tune_id]["interruptions"] >= 3
    assert finals[embed_id]["interruptions"] >= 1
    assert len({i.provider for i in preempted}) == 2  # across providers

    # Zero lost shards, zero duplicate outputs, every embedding as an uninterrupted run's.
    shards = -(-size.passages // RECORDS_PER_SHARD)
    with open_queue(h.queue_url, embed_id) as queue:
        stats = queue.stats()
    assert (stats.done, stats.pending, stats.leased, stats.dead) == (shards, 0, 0, 0)
    assert len(output.published()) == shards and output.temporaries() == []
    job_file = h.tmp / "embed.yaml"
    checked = verify.verify(verify.read_job(job_file), model=model, reference_shards=2)
    assert checked.ok, checked.to_dict()
    assert (checked.inputs, checked.outputs) == (size.passages, size.passages)
    assert checked.max_abs_diff == 0.0

    # The training state exact: the adapter bit-identical to an uninterrupted run.
    reference, _ = finetune.train(None, size.steps)
    assert (h.tmp / "adapter.safetensors").read_bytes() == reference

    # The books: every instance ended, the ledger's charges are the cloud's.
    wait_for(lambda: not h.alive(), 60, what="every instance to end")
    with h.store() as store:
        ledger = Ledger(store, h.providers)
        for job_id in (embed_id, tune_id):
            records = ledger.update(job_id)
            assert records and all(r.closed and not r.price_missing for r in records)
            books = ledger.reconcile(job_id)
            assert books.unmatched == (), books.to_dict()
            # Priced from the cloud's price history as the cloud bills: equal to the micro-dollar.
            assert books.differing == () and books.difference_microusd == 0, books.to_dict()
            assert all(line.provider_microusd for line in books.lines), books.to_dict()

    # report.py over the same home: what the cloud billed, what the queue saw.
    monkeypatch.setenv("SPOTHOP_DATABASE_URL", h.store_url)
    monkeypatch.setenv("SPOTHOP_QUEUE_URL", h.queue_url)
    report = embed_report.build_report(embed_id)
    assert report["state"] == "succeeded" and report["interruptions"] >= 1
    billed = sum(
        h.providers[i.provider].describe(i.instance_id).cost_microusd
        for i in h.instances()
        if i.tags.get("spothop-job") == embed_id
    )
    assert report["cost_microusd"] == billed > 0
    assert 0 < report["cost_microusd"] < report["on_demand_cost_microusd"]
    queue_part = report["queue"]
    assert (queue_part["shards"], queue_part["done"], queue_part["dead"]) == (shards, shards, 0)
    assert queue_part["shard_attempts"] >= shards and 0 < queue_part["shard_goodput"] <= 1
    assert report["outputs"] == str(h.tmp / "embed-out")
    json.dumps(report)  # JSON-ready
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert embed_report.main([embed_id]) == 0
    assert f"shards: {shards}/{shards} done, 0 dead, 0 not done" in printed.getvalue()


def test_both_jobs_survive_preemptions_an_outage_and_two_controller_kills(
    harness: Harness,  # noqa: F811
    embed_model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_chaos(harness, embed_model, REDUCED, monkeypatch)


@pytest.mark.slow
def test_chaos_soak_full_size(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "slow" not in str(request.config.getoption("-m")):
        pytest.skip("the full-size chaos soak takes many minutes: select it with -m slow")
    h = request.getfixturevalue("harness")
    run_chaos(h, request.getfixturevalue("embed_model"), FULL, monkeypatch)
