"""Done when: the main job runs with its agents talking to ``spothop server`` over HTTP.

``spothop server run`` (uvicorn, the API and a controller replica in one
process) on a fresh PostgreSQL schema with Redis as the shard queue, over the
e2e harness's fast local world. ``spothop launch`` runs the main job
(``examples/embed``: the real sentence-embedding model, over a small corpus
the example generates) with ``SPOTHOP_SERVER`` set: the CLI asks the server,
the server's replica launches the workers on the local cloud, and each
instance's agent gets the server's URL and a token scoped to its job and
instance (``SPOTHOP_CONTROL_PLANE``, ``SPOTHOP_AGENT_TOKEN``). One worker is
preempted. The job must succeed with every shard done exactly once and every
embedding equal to an uninterrupted run's (``examples/embed/verify.py``), every
instance's agent token must have been issued and then revoked, the agents'
events must be in the server's store (the embedded store of the home has none:
they came over HTTP), and the report read over HTTP must equal the report
computed on the server's store in this process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from spothop.jobs.store import JobStore
from spothop.providers.registry import default_providers
from spothop.queue import OutputStore, open_queue
from spothop.service.report import job_report
from spothop.state.agent_tables import agent_events
from spothop.state.auth_tables import api_tokens
from spothop.state.tokens import TokenStore
from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.jobs.e2e.conftest import SLOW_TERMINATE, SPEED, Harness, running_harness, script_job
from tests.server.live import LiveServer
from tests.waiting import wait_for

pytest.importorskip("sentence_transformers")
pytest.importorskip("pyarrow")

from examples.embed import verify
from examples.embed.corpus import write_corpus

from tests.examples.conftest import EXAMPLES, embed_model  # noqa: F401  (the shared model)

pytestmark = pytest.mark.services

PASSAGES = 240
RECORDS_PER_SHARD = 20
SHARDS = PASSAGES // RECORDS_PER_SHARD
LEASE_S = 3.0  # the replica's job lease: small, so the test does not wait on it
TOKEN_GRACE_S = 1.0  # how long an ended instance's agent token outlives it (default 120 s)
# The preempted worker's notice: 30 s of wall time at the world's speed. GCE's notice carries no
# time, and an agent on gcp-sim takes GCE's documented 30 s as its lead; a reclaim sooner than
# that on the wall clock could kill it before its protocol ends (its worker still loading the
# model when told to stop), which is not what this test is about.
NOTICE_LEAD_S = 30.0 * SPEED


@pytest.fixture
def served(
    pg_schema: str, redis_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Harness, LiveServer, str]]:
    del redis_prefix  # proves Redis answers; the queue's keys are per job id
    separator = "&" if "?" in POSTGRES_URL else "?"
    url = f"{POSTGRES_URL}{separator}options=-csearch_path%3D{pg_schema}"
    with running_harness(tmp_path, monkeypatch, SLOW_TERMINATE) as h:
        h.store_url = url
        monkeypatch.setenv("SPOTHOP_AGENT_TOKEN_GRACE_S", str(TOKEN_GRACE_S))  # the server's env
        JobStore(url).close()  # migrated before the token store and the server use it
        _user, token = TokenStore(url).create_user("alice", "ml")
        server = LiveServer(
            url,
            tmp_path / "server.log",
            queue_url=REDIS_URL,
            extra_args=("--lease-s", str(LEASE_S), "--providers", ",".join(h.providers)),
        )
        with server:
            monkeypatch.setenv("SPOTHOP_SERVER", server.url)
            monkeypatch.setenv("SPOTHOP_TOKEN", token)
            yield h, server, url
            _clean_queue(url)


def _clean_queue(url: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    with JobStore(url) as store:
        for job in store.list_jobs():
            keys = list(client.scan_iter(match=f"*{{{job.job_id}}}*", count=1000))
            if keys:
                client.delete(*keys)
    client.close()


def _status(h: Harness, job_id: str) -> dict[str, Any]:
    code, out = h.cli("status", job_id, "--json")  # over the server: SPOTHOP_SERVER is set
    assert code == 0, out
    return dict(json.loads(out))


def embed_spec(tmp: Path) -> dict[str, Any]:
    """examples/embed/job.yaml over a small corpus: the real model, in this world's instances."""
    write_corpus(tmp / "embed-data" / "passages.jsonl", PASSAGES)
    return {
        "name": "embed-served",
        "kind": "batch",
        "workers": 2,
        "market": "spot",
        "tolerance": "aggressive",
        **script_job(EXAMPLES / "embed" / "embed.py"),
        "envs": {"BATCH_SIZE": "8", "EMBED_THREADS": "1", "EMBED_DEVICE": "cpu"},
        "batch": {
            "inputs": [str(tmp / "embed-data" / "*.jsonl")],
            "records_per_shard": RECORDS_PER_SHARD,
            "output": str(tmp / "embed-out"),
        },
    }


def test_the_main_job_runs_with_its_agents_on_the_server(
    served: tuple[Harness, LiveServer, str],
    embed_model: Any,  # noqa: F811
) -> None:
    h, server, url = served
    spec = embed_spec(h.tmp)
    job_file = h.tmp / "job.yaml"
    job_file.write_text(yaml.safe_dump(spec))
    code, out = h.cli("launch", str(job_file), "--detach", "--json")
    assert code == 0, out
    job_id = str(json.loads(out)["job_id"])

    running = wait_for(
        lambda: h.running(job_id), 90, what="a worker running (the server's replica launched it)"
    )
    h.preempt(running[0], lead_time_s=NOTICE_LEAD_S)
    final = wait_for(
        lambda: (s := _status(h, job_id))["state"] in ("succeeded", "failed", "cancelled") and s,
        150,
        what="the job to end",
        interval_s=0.5,
    )
    assert final["state"] == "succeeded", (final["reason"], server.log()[-3000:])
    assert final["interruptions"] >= 1
    # Every shard done once, every passage one embedding, each as an uninterrupted run's.
    with open_queue(REDIS_URL, job_id) as queue:
        stats = queue.stats()
    assert (stats.done, stats.pending, stats.leased, stats.dead) == (SHARDS, 0, 0, 0)
    output = OutputStore(str(h.tmp / "embed-out"))
    assert len(output.published()) == SHARDS and output.temporaries() == []
    checked = verify.verify(verify.read_job(job_file), model=embed_model, reference_shards=2)
    assert checked.ok, checked.to_dict()
    assert (checked.inputs, checked.outputs, checked.max_abs_diff) == (PASSAGES, PASSAGES, 0.0)
    wait_for(lambda: not h.alive(job_id), 30, what="every worker ended")

    with JobStore(url) as store:
        instances = {a.instance_id for a in store.attempts(job_id) if a.instance_id}
        engine = store.engine
        with engine.connect() as conn:
            tokens = conn.execute(
                select(api_tokens.c.instance_id, api_tokens.c.revoked_unix_s).where(
                    api_tokens.c.kind == "agent", api_tokens.c.job_id == job_id
                )
            ).all()
            kinds = {
                (r.instance_id, r.kind)
                for r in conn.execute(
                    select(agent_events.c.instance_id, agent_events.c.kind).where(
                        agent_events.c.job_id == job_id
                    )
                )
            }
        # Issued at launch, one per instance; revoked when the attempt ended.
        assert instances and {t.instance_id for t in tokens} == instances
        wait_for(lambda: _all_revoked(store, job_id), 30, what="every agent token revoked")
        # The agents' own events reached the server's store: they had no other way there. Every
        # agent that ran to its exit told the server (a replacement ended before its agent had
        # started, when the other worker had done the last shards, may have nothing). Which ran
        # to their exit is the cloud's to say: the instances its bootstrap command (the agent)
        # ended itself. An attempt's recorded exit code is no oracle: the controller closes the
        # attempts of a job it sees done, and one whose agent's exit event was not yet stored
        # keeps none (a CI run had none at all).
        exited = {
            i.instance_id
            for i in h.instances()
            if i.tags.get("spothop-job") == job_id
            and str(
                (h.providers[i.provider].store.instance(i.instance_id) or {}).get("end_reason")
            ).startswith("bootstrap command exited")
        }
        told = {i for i, _ in kinds}
        assert exited <= told, (exited, told)
        # The preempted worker's agent told the server of its notice and of the interruption
        # it handled. (With a 0.4 s wall terminate grace, a job that ended while that agent was
        # still sending had its instance killed mid-send: the world gives 6 s, SLOW_TERMINATE.)
        assert {(running[0].instance_id, k) for k in ("final_notice", "interruption")} <= kinds
        expected = job_report(store, job_id, default_providers(tuple(h.providers))).to_dict()
    assert not _embedded_agent_events(job_id)

    code, out = h.cli("report", job_id, "--json")  # over HTTP
    assert code == 0, out
    assert json.loads(out) == json.loads(json.dumps(expected, default=str))
    assert expected["interruption_count"] >= 1

    # launch without --detach follows the job over the server to its end; its logs come back.
    hello = h.tmp / "hello.yaml"
    hello.write_text(
        yaml.safe_dump({"name": "hello", "run": "echo hello from a worker of the server"})
    )
    code, out = h.cli("launch", str(hello), "--json")
    assert code == 0, out
    done = json.loads(out)
    assert done["state"] == "succeeded" and [i["exit_code"] for i in done["instances"]] == [0]
    code, text = h.cli("logs", done["job_id"], "--follow")  # returns: the job has ended
    assert code == 0 and "hello from a worker of the server" in text


def _all_revoked(store: JobStore, job_id: str) -> bool:
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(api_tokens.c.revoked_unix_s).where(
                api_tokens.c.kind == "agent", api_tokens.c.job_id == job_id
            )
        ).all()
    return bool(rows) and all(r.revoked_unix_s is not None for r in rows)


def _embedded_agent_events(job_id: str) -> int:
    """Agent events of ``job_id`` in the home's embedded store (none: the agents used HTTP)."""
    from spothop.db import make_engine

    home_db = Path(os.environ["SPOTHOP_HOME"]) / "spothop.db"
    if not home_db.exists():
        return 0
    engine = make_engine(f"sqlite:///{home_db}")
    try:
        with engine.connect() as conn:
            return len(
                conn.execute(
                    select(agent_events.c.event_id).where(agent_events.c.job_id == job_id)
                ).all()
            )
    except Exception:  # no agent tables at all: nothing was written there
        return 0
    finally:
        engine.dispose()
