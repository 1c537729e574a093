"""The job store on SQLite and on real PostgreSQL: ids, one transaction per change and its event,
legal transitions only, attempts before launches, fencing (versions and controller leases),
cooldowns and cursors that persist."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.errors import NotFoundError
from spothop.jobs.lifecycle import AttemptState, EndReason, IllegalTransition, JobState, NodeState
from spothop.jobs.store import (
    AttemptNotFound,
    JobChanged,
    JobLeaseLost,
    JobNotFound,
    JobStore,
    job_rows,
    node_count,
)
from spothop.jobs.store import events as event_rows
from spothop.resources.market_id import MarketId
from tests.conftest import POSTGRES_URL


@dataclass(frozen=True)
class Spec:
    """Stands in for JobSpec: what the store needs of one (name, kind, nodes, to_json)."""

    name: str = "embed-reviews"
    kind: str = "task"
    num_nodes: int = 1
    workers: int = 1

    def to_json(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "kind": self.kind,
                "num_nodes": self.num_nodes,
                "workers": self.workers,
            }
        )


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


Opener = Callable[..., JobStore]


@pytest.fixture(params=["sqlite", "postgresql"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """``open_store(clock=None)``: a JobStore on one database; call again for a second handle on it."""
    opened: list[JobStore] = []
    if request.param == "sqlite":
        url, schema = f"sqlite:///{tmp_path / 'spothop.db'}", None
    else:
        url, schema = POSTGRES_URL, request.getfixturevalue("pg_schema")

    def open_(clock: Clock | None = None) -> JobStore:
        store = JobStore(url, schema=schema, clock=clock)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(open_store: Opener, clock: Clock) -> JobStore:
    return open_store(clock)


def _attempt(store: JobStore, job_id: str, node: int = 0, **overrides: object) -> str:
    values: dict[str, object] = {
        "provider": "local",
        "region": "r1",
        "zone": "r1-a",
        "instance_type": "gpu.small",
        "market_kind": "spot",
        "price_usd_per_hour": 0.42,
        **overrides,
    }
    return store.add_attempt(job_id, node, **values).attempt_id  # type: ignore[arg-type]


# --- jobs and ids -------------------------------------------------------------------


def test_a_new_job_is_pending_with_its_nodes_and_a_created_event(
    store: JobStore, clock: Clock
) -> None:
    job_id = store.create_job(Spec(kind="batch", workers=3))
    assert re.fullmatch(r"j-[0-9a-f]{6}", job_id)
    job = store.get_job(job_id)
    assert job.state is JobState.PENDING
    assert (job.name, job.kind, job.version, job.interruptions) == ("embed-reviews", "batch", 1, 0)
    assert json.loads(job.spec_json)["workers"] == 3
    assert [(n.node, n.state) for n in job.nodes] == [(i, NodeState.PENDING) for i in range(3)]
    assert job.created_unix_s == clock.now
    [event] = store.events(job_id)
    assert (event.kind, event.data) == ("created", {"name": "embed-reviews", "nodes": 3})
    assert store.get_job(job_id).to_dict()["state"] == "pending"


def test_node_count_follows_the_kind() -> None:
    assert node_count(Spec(kind="task", num_nodes=2, workers=9)) == 2
    assert node_count(Spec(kind="batch", num_nodes=1, workers=4)) == 4
    assert node_count(object()) == 1


def test_ids_are_unique_and_a_collision_is_drawn_again(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = {store.create_job(Spec()) for _ in range(50)}
    assert len(ids) == 50
    taken = next(iter(ids))[2:]
    draws = iter([taken, taken, "abcdef"])
    monkeypatch.setattr(job_rows.secrets, "token_hex", lambda _n: next(draws))
    assert store.create_job(Spec()) == "j-abcdef"


def test_an_unknown_job_is_not_found(store: JobStore) -> None:
    with pytest.raises(JobNotFound, match="no job 'j-000000'") as caught:
        store.get_job("j-000000")
    assert isinstance(caught.value, NotFoundError) and caught.value.exit_code == 3
    with pytest.raises(JobNotFound):
        store.transition("j-000000", JobState.PROVISIONING, "placing")
    with pytest.raises(JobNotFound):
        store.record_event("j-000000", "noticed")


def test_list_jobs_oldest_first_and_by_state(store: JobStore, clock: Clock) -> None:
    first = store.create_job(Spec(name="a"))
    clock.now += 1
    second = store.create_job(Spec(name="b", kind="batch", workers=2))
    store.transition(second, JobState.CANCELLED, "cancelled")
    assert [j.job_id for j in store.list_jobs()] == [first, second]
    assert [j.job_id for j in store.list_jobs([JobState.PENDING])] == [first]
    [cancelled] = store.list_jobs([JobState.CANCELLED, JobState.FAILED])
    assert len(cancelled.nodes) == 2


# --- transitions: one transaction with the event ---------------------------------------


def test_a_transition_and_its_event_are_written_together(store: JobStore, clock: Clock) -> None:
    job_id = store.create_job(Spec())
    clock.now += 5
    job = store.transition(job_id, JobState.PROVISIONING, "placing", {"candidates": 3})
    assert (job.state, job.version, job.updated_unix_s) == (JobState.PROVISIONING, 2, clock.now)
    job = store.transition(
        job_id, JobState.RUNNING, "running", reason="node 0 runs", add_interruptions=0
    )
    job = store.transition(
        job_id, JobState.RECOVERING, "preempted", add_interruptions=1, on_demand_forced=True
    )
    assert (job.interruptions, job.on_demand_forced, job.reason) == (1, True, "node 0 runs")
    events = store.events(job_id)
    assert [e.kind for e in events] == ["created", "placing", "running", "preempted"]
    assert events[1].data == {"candidates": 3, "from": "pending", "to": "provisioning"}
    assert events[1].time_unix_s == clock.now
    assert events[2].data["reason"] == "node 0 runs"
    assert store.get_job(job_id) == job


def test_an_illegal_transition_changes_nothing(store: JobStore) -> None:
    job_id = store.create_job(Spec())
    before = store.get_job(job_id)
    with pytest.raises(
        IllegalTransition, match=f"job {job_id}: cannot move from pending to running"
    ):
        store.transition(job_id, JobState.RUNNING, "running")
    assert store.get_job(job_id) == before
    assert [e.kind for e in store.events(job_id)] == ["created"]
    store.transition(job_id, JobState.CANCELLED, "cancelled")
    with pytest.raises(IllegalTransition, match="it is final"):
        store.transition(job_id, JobState.PROVISIONING, "placing")


def test_a_state_change_whose_event_cannot_be_written_is_rolled_back(store: JobStore) -> None:
    job_id = store.create_job(Spec())
    with pytest.raises(TypeError):
        store.transition(job_id, JobState.PROVISIONING, "placing", {"bad": object()})
    assert store.get_job(job_id).state is JobState.PENDING
    assert store.get_job(job_id).version == 1
    assert [e.kind for e in store.events(job_id)] == ["created"]


def test_of_two_writers_racing_one_transition_one_wins(open_store: Opener) -> None:
    """Two store handles (two engines, as two processes would have) move the same job at once."""
    first, second = open_store(), open_store()
    job_id = first.create_job(Spec())
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def move(store: JobStore) -> None:
        barrier.wait()
        try:
            store.transition(job_id, JobState.PROVISIONING, "placing")
            outcomes.append("moved")
        except IllegalTransition:
            outcomes.append("refused")

    threads = [threading.Thread(target=move, args=(s,)) for s in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["moved", "refused"]
    assert [e.kind for e in first.events(job_id)] == ["created", "placing"]
    assert first.get_job(job_id).version == 2


def test_a_write_on_a_stale_version_is_refused(store: JobStore) -> None:
    job_id = store.create_job(Spec())
    seen = store.get_job(job_id).version
    store.update_job(job_id, "retried", add_retries=1, expected_version=seen)
    with pytest.raises(JobChanged, match="since version 1 \\(now 2\\)"):
        store.transition(job_id, JobState.PROVISIONING, "placing", expected_version=seen)
    job = store.get_job(job_id)
    assert (job.state, job.retries_used, job.version) == (JobState.PENDING, 1, 2)


def test_node_states_are_set_with_an_event(store: JobStore) -> None:
    job_id = store.create_job(Spec(kind="batch", workers=2))
    store.set_node_state(job_id, 1, NodeState.DONE, "node_done", {"exit_code": 0})
    assert [n.state for n in store.get_job(job_id).nodes] == [NodeState.PENDING, NodeState.DONE]
    assert store.events(job_id)[-1].data == {"node": 1, "exit_code": 0}
    with pytest.raises(NotFoundError, match="has no node 2 \\(its nodes are 0 to 1\\)"):
        store.set_node_state(job_id, 2, NodeState.DONE, "node_done")


# --- attempts ---------------------------------------------------------------------------


def test_an_attempt_is_stored_launching_before_the_launch(store: JobStore, clock: Clock) -> None:
    job_id = store.create_job(Spec())
    attempt = store.add_attempt(
        job_id,
        0,
        provider="local",
        region="r1",
        zone="r1-a",
        instance_type="gpu.small",
        market_kind="spot",
        price_usd_per_hour=0.42,
        launch_token="tok-1",
    )
    assert re.fullmatch(r"a-[0-9a-f]{8}", attempt.attempt_id)
    assert (attempt.state, attempt.launch_token, attempt.instance_id) == (
        AttemptState.LAUNCHING,
        "tok-1",
        None,
    )
    assert attempt.launched_unix_s == clock.now
    assert attempt.market_id == MarketId("local", "r1", "r1-a", "gpu.small")
    assert store.attempt_by_token("tok-1") == attempt
    assert store.attempt_by_token("nobody's") is None
    event = store.events(job_id)[-1]
    assert event.kind == "attempt_launching"
    assert event.data["attempt_id"] == attempt.attempt_id and event.data["launch_token"] == "tok-1"
    with pytest.raises(NotFoundError, match="has no node 1"):
        _attempt(store, job_id, node=1)


def test_an_attempt_moves_forward_stamping_its_times(store: JobStore, clock: Clock) -> None:
    job_id = store.create_job(Spec())
    attempt_id = _attempt(store, job_id)
    clock.now += 1
    store.update_attempt(attempt_id, state=AttemptState.PENDING, instance_id="i-1")
    clock.now += 2
    store.update_attempt(attempt_id, state=AttemptState.RUNNING)
    clock.now += 3
    store.update_attempt(
        attempt_id, state=AttemptState.NOTICED, event="final_notice", data={"lead_s": 30}
    )
    clock.now += 4
    ended = store.update_attempt(
        attempt_id, state=AttemptState.ENDED, end_reason=EndReason.PREEMPTED, exit_code=75
    )
    start = ended.launched_unix_s
    assert (ended.running_unix_s, ended.noticed_unix_s, ended.ended_unix_s) == (
        start + 3,
        start + 6,
        start + 10,
    )
    assert (ended.instance_id, ended.end_reason, ended.exit_code, ended.live) == (
        "i-1",
        EndReason.PREEMPTED,
        75,
        False,
    )
    kinds = [e.kind for e in store.events(job_id)]
    assert kinds[-4:] == ["attempt_pending", "attempt_running", "final_notice", "attempt_ended"]
    assert store.events(job_id)[-1].data["end_reason"] == "preempted"
    assert store.events(job_id)[-2].data["lead_s"] == 30
    assert store.attempts(job_id) == [ended]
    assert store.attempts(job_id, live_only=True) == []
    assert store.attempt(attempt_id).to_dict()["state"] == "ended"


def test_a_field_change_without_a_state_change_needs_no_event(store: JobStore) -> None:
    job_id = store.create_job(Spec())
    attempt_id = _attempt(store, job_id)
    store.update_attempt(attempt_id, instance_id="i-9")
    assert store.attempt(attempt_id).instance_id == "i-9"
    assert [e.kind for e in store.events(job_id)] == ["created", "attempt_launching"]


def test_an_illegal_attempt_change_is_refused_and_changes_nothing(store: JobStore) -> None:
    job_id = store.create_job(Spec())
    attempt_id = _attempt(store, job_id)
    store.update_attempt(
        attempt_id,
        state="ended",
        end_reason="launch_failed",
        error_code="InsufficientInstanceCapacity",
    )
    before = store.attempt(attempt_id)
    with pytest.raises(IllegalTransition, match="cannot move from ended to running"):
        store.update_attempt(attempt_id, state="running", instance_id="i-2")
    assert store.attempt(attempt_id) == before
    assert before.error_code == "InsufficientInstanceCapacity"
    with pytest.raises(TypeError, match="no settable field \\['provider'\\]"):
        store.update_attempt(attempt_id, provider="elsewhere")
    with pytest.raises(ValueError):
        store.update_attempt(attempt_id, end_reason="bored")
    with pytest.raises(AttemptNotFound):
        store.update_attempt("a-00000000", state="running")


def test_attempts_of_every_job_in_launch_order(store: JobStore, clock: Clock) -> None:
    one, two = store.create_job(Spec()), store.create_job(Spec())
    first = _attempt(store, one)
    clock.now += 1
    second = _attempt(store, two)
    assert [a.attempt_id for a in store.attempts()] == [first, second]
    assert [a.attempt_id for a in store.attempts(two)] == [second]


# --- events, cooldowns, cursors --------------------------------------------------------


def test_events_follow_after_a_seq_across_jobs(store: JobStore) -> None:
    one, two = store.create_job(Spec()), store.create_job(Spec())
    seq = store.record_event(one, "notice_seen", {"market": MarketId("local", "r1", "", "t")})
    store.record_event(two, "launch_error", {"code": "QuotaExceeded"})
    after = store.events(after_seq=seq)
    assert [(e.job_id, e.kind, e.data) for e in after] == [
        (two, "launch_error", {"code": "QuotaExceeded"})
    ]
    mine = store.events(one, after_seq=0)
    assert mine[-1].data == {
        "market": {"provider": "local", "region": "r1", "zone": "", "instance_type": "t"}
    }
    seqs = [e.seq for e in store.events()]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert len(store.events(limit=2)) == 2


@pytest.mark.parametrize("in_query", [True, False])
def test_the_newest_events_of_some_jobs_are_chosen_by_the_query(
    store: JobStore, in_query: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not in_query:  # a filter too long for an IN list: pages of events, filtered
        monkeypatch.setattr(event_rows, "MAX_IN_IDS", 0)
        monkeypatch.setattr(event_rows, "EVENT_PAGE", 2)
    assert store.last_event_seq() == 0
    jobs = [store.create_job(Spec()) for _ in range(3)]
    for n in range(4):
        for job in jobs:
            store.record_event(job, "launch_error", {"n": n})
    every = store.events()
    assert store.last_event_seq() == every[-1].seq
    some = {jobs[0], jobs[2]}
    theirs = [e for e in every if e.job_id in some]
    assert store.events(job_ids=some) == theirs
    assert store.events(job_ids=some, limit=3, newest=True) == theirs[-3:]  # still in order
    assert store.events(job_ids=some, limit=3) == theirs[:3]
    assert store.events(job_ids=some, after_seq=theirs[2].seq, limit=2) == theirs[3:5]
    assert store.events(job_ids=set()) == []
    assert store.events(limit=2, newest=True) == every[-2:]


def test_cooldowns_persist_and_only_extend(open_store: Opener, clock: Clock) -> None:
    store = open_store(clock)
    market = MarketId("local", "r1", "r1-a", "gpu.small")
    other = MarketId("local", "r1", "r1-b", "gpu.small")
    store.add_cooldown(market, clock.now + 1800, "preempted")
    assert store.add_cooldown(market, clock.now + 60, "again").until_unix_s == clock.now + 1800
    store.add_cooldown(market, clock.now + 3600, "preempted twice")
    store.add_cooldown(other, clock.now + 10, "zone outage")
    reopened = open_store(clock)
    cooling = reopened.cooldowns()
    assert cooling[market].until_unix_s == clock.now + 3600
    assert cooling[market].reason == "preempted twice"
    assert set(cooling) == {market, other}
    clock.now += 11
    assert set(reopened.cooldowns()) == {market}
    assert set(reopened.cooldowns(now=clock.now + 4000)) == set()
    # An expired cooldown is replaced by a new one, however short.
    reopened.add_cooldown(other, clock.now + 5, "preempted")
    assert reopened.cooldowns()[other].until_unix_s == clock.now + 5


def test_a_cursor_is_stored_by_name(open_store: Opener) -> None:
    store = open_store()
    assert store.cursor("agent_events") is None
    store.set_cursor("agent_events", "1800000000.5|ev-1")
    store.set_cursor("agent_events", "1800000001.0|ev-2")
    store.set_cursor("other", "x")
    assert open_store().cursor("agent_events") == "1800000001.0|ev-2"


# --- controller leases ------------------------------------------------------------------


def test_a_job_leased_by_one_controller_is_fenced_from_another(
    open_store: Opener, clock: Clock
) -> None:
    first, second = open_store(clock), open_store(clock)
    job_id = first.create_job(Spec())
    done = first.create_job(Spec())
    first.transition(done, JobState.CANCELLED, "cancelled")
    [lease] = first.claim_jobs("controller-1", lease_s=30)
    assert (lease.job_id, lease.token, lease.owner) == (job_id, 1, "controller-1")
    assert second.claim_jobs("controller-2", lease_s=30) == []
    first.transition(job_id, JobState.PROVISIONING, "placing", lease=lease)
    # The first controller stops renewing; its lease expires and the second takes the job.
    clock.now += 31
    [taken] = second.claim_jobs("controller-2", lease_s=30)
    assert taken.token == 2
    with pytest.raises(JobLeaseLost, match=f"job {job_id}: the controller lease \\(token 1\\)"):
        first.transition(job_id, JobState.RUNNING, "running", lease=lease)
    assert first.get_job(job_id).state is JobState.PROVISIONING
    second.transition(job_id, JobState.RUNNING, "running", lease=taken)
    assert first.release_job(lease) is False
    assert second.release_job(taken) is True
    [again] = first.claim_jobs("controller-1", lease_s=30)
    assert again.token == 3
    assert first.get_job(job_id).lease_owner == "controller-1"


def test_a_real_job_spec_is_stored_and_read_back(store: JobStore, tmp_path: Path) -> None:
    from spothop.jobs import load_job

    spec = load_job(
        {
            "name": "embed",
            "kind": "batch",
            "workers": 3,
            "resources": {"accelerators": "A10G:1"},
            "run": "python embed.py",
            "batch": {"inputs": ["data/*.jsonl"], "output": "out"},
        },
        base_dir=tmp_path,
    )
    job_id = store.create_job(spec)
    job = store.get_job(job_id)
    assert (job.name, job.kind, len(job.nodes)) == ("embed", "batch", 3)
    assert job.spec() == spec
