"""Act: carry out ``decide``'s actions against the providers and the store.

Each action is one **step**, timed and isolated as the agent's emergency
protocol runs its steps (:mod:`spothop.agent.emergency`): a step that raises
is recorded (:class:`StepReport`, with the error) and the next step still
runs; a step that hangs is abandoned after ``step_timeout_s`` (its thread
goes on, its result is ignored) so one stuck cloud call cannot stall the
controller.

Launches (:class:`Launch`) follow the issue's rules:

1. For each candidate used, an attempt row (state ``launching``, with its
   launch token) is written **before** ``provider.launch``; the instance's
   tags carry ``spothop-job``, ``spothop-node``, ``spothop-token`` and
   ``spothop-attempt``, so an instance whose launch call never returned
   (the controller died in it) is found and adopted by its token.
2. ``parallel=False``: the candidates in order, stopping at the first the
   provider accepts (each try its own attempt). ``parallel=True`` (after a
   failure): every candidate at once, one thread each; the first instance
   that reaches *running* wins, every other is terminated at once and its
   attempt ended ``superseded``. Parallel attempts' tokens are
   ``f"{token}.{i}"``. A provider's candidates after its first call only
   once that call has returned (a launch call, not a boot): if it refused
   for good, they end ``launch_refused`` with its error, never asked.
3. Every failure ends its attempt ``launch_failed`` with the cloud's own
   ``error_code`` and message (:class:`~spothop.errors.ProviderError`), or
   ``launch_refused`` when it repeats on every launch of that provider
   (configuration, credentials, an invalid request:
   :func:`~.launch.refuses_every_launch`), with the error's whole text; an
   in-order launch then skips that provider's other candidates. An error the
   cloud's code table marks ``region_scoped`` (a region not enabled, an image
   that exists in another region) ends it ``region_refused`` instead, and only
   the provider's candidates in that region are skipped.
4. Launch calls run in the background: the loop does not wait for a cloud's
   boot; when a launch ends, the controller is poked (``wake``) so the next
   pass sees it at once. A node with a launch in flight is not launched
   again until it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spothop.jobs.controller import actions as A
from spothop.jobs.controller import faults
from spothop.jobs.controller.batch_steps import enqueue_shards, publish_outputs
from spothop.jobs.controller.clock import provider_now, stamp
from spothop.jobs.controller.executor_base import Detail, LaunchOutcome
from spothop.jobs.controller.launch import RACE_TIMEOUT_S, LaunchSteps
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.providers.base import Distribution, Provider
from spothop.providers.extensions import ConsoleOutput

if TYPE_CHECKING:
    from spothop.state.tokens import TokenStore

log = logging.getLogger(__name__)

DEFAULT_PARALLEL_K = 3
DEFAULT_STEP_TIMEOUT_S = 30.0
# An ended attempt's agent token outlives its instance by this (monotonic seconds): an instance
# the cloud lists as ended may still be running its agent's last words (a terminate's grace, the
# emergency protocol's upload and records), which must reach the server.
DEFAULT_TOKEN_GRACE_S = 120.0
# A lost agent's attempt carries its console's last lines (the boot script's end), each bounded.
CONSOLE_TAIL_LINES = 5
CONSOLE_LINE_CHARS = 200


@dataclass(frozen=True)
class StepReport:
    """One action carried out: what, whether it worked, how long it took, the error if not."""

    action: str
    ok: bool
    seconds: float
    error: str | None = None
    detail: Detail = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "ok": self.ok,
            "seconds": round(self.seconds, 6),
            "error": self.error,
            "detail": dict(self.detail),
        }


class Executor(LaunchSteps):
    """Carries out actions (see the module docstring).

    The steps on jobs, attempts and agents are here; the launch step, its
    request and the agents' tokens are its parts (:mod:`.launch`,
    :mod:`.launch_request`, :mod:`.agent_tokens`), on the state
    :class:`~.executor_base.ExecutorBase` declares.
    """

    def __init__(
        self,
        store: JobStore,
        providers: Mapping[str, Provider],
        *,
        store_url: str,
        queue_url: str | None = None,
        home: Path | None = None,
        wake: Callable[[], object] = lambda: None,
        parallel_k: int = DEFAULT_PARALLEL_K,
        step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S,
        max_threads: int = 32,
        wake_address: str | None = None,
        control_plane_url: str | None = None,
        token_grace_s: float = DEFAULT_TOKEN_GRACE_S,
        distribution: Distribution | None = None,
    ) -> None:
        self.store = store
        # The wheel the control plane serves (the boot script installs spothop from it).
        self.distribution = distribution
        self.wake_address = wake_address  # the agents' store process pokes it (None: the home's)
        self.control_plane_url = control_plane_url  # server mode: agents talk HTTP, with tokens
        # instance id → the job its tag names, as the last pass listed (a Terminate without a job)
        self.instance_jobs: dict[str, str | None] = {}
        # instances of finished jobs no one holds: anyone may end them (no lease to check)
        self.unheld_instances: frozenset[str] = frozenset()
        self._tokens: TokenStore | None = (
            None  # the server's TokenStore, made on first use (server mode)
        )
        self.token_grace_s = token_grace_s
        self._gone_since: dict[tuple[str, str], float] = {}  # (job, instance) → first seen gone
        self.providers = providers
        self.store_url = store_url
        self.queue_url = queue_url or store_url
        self.home = home
        self.wake = wake
        self.parallel_k = parallel_k
        self.race_timeout_s = RACE_TIMEOUT_S
        self.step_timeout_s = step_timeout_s
        self._pool = ThreadPoolExecutor(max_threads, thread_name_prefix="controller-step")
        self._launch_pool = ThreadPoolExecutor(max_threads, thread_name_prefix="controller-launch")
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, int], LaunchOutcome] = {}
        self.outcomes: list[LaunchOutcome] = []  # every launch's outcome, newest last

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._launch_pool.shutdown(wait=True)

    # -- steps -------------------------------------------------------------------

    def execute(self, actions: Iterable[A.Action]) -> list[StepReport]:
        """Carry out every action in order, each timed and isolated; their reports."""
        return [self.step(action) for action in actions]

    def step(self, action: A.Action) -> StepReport:
        name = type(action).__name__
        started = time.monotonic()
        if type(action) not in A.ACTION_TYPES:
            return StepReport(name, False, 0.0, f"no handler for {name}")
        future: Future[Detail | None] = self._pool.submit(self._carry_out, action)
        try:
            detail = future.result(timeout=self.step_timeout_s) or {}
        except FutureTimeout:
            log.error("%s did not finish within %.0f s; abandoned", name, self.step_timeout_s)
            return StepReport(name, False, time.monotonic() - started, "timed out")
        except Exception as exc:
            log.warning("%s failed: %s: %s", name, type(exc).__name__, exc)
            return StepReport(
                name, False, time.monotonic() - started, f"{type(exc).__name__}: {exc}"
            )
        return StepReport(name, True, time.monotonic() - started, None, detail)

    def _carry_out(self, action: A.Action) -> Detail | None:
        """The step of ``action``'s type (one per type of :data:`~.actions.ACTION_TYPES`)."""
        match action:
            case A.Launch():
                return self._launch(action)
            case A.Terminate():
                return self._terminate(action)
            case A.SetJobState():
                return self._set_job_state(action)
            case A.EndAttempt():
                return self._end_attempt(action)
            case A.UpdateAttempt():
                return self._update_attempt(action)
            case A.ForceOnDemand():
                return self._force_on_demand(action)
            case A.Waiting():
                return self._waiting(action)
            case A.CoolDown():
                return self._cool_down(action)
        return self._carry_out_for_job(action)

    def _carry_out_for_job(self, action: A.Action) -> Detail | None:
        """The steps that ask the agents or the job's queue."""
        match action:
            case A.RequestCheckpoint():
                return self._request_checkpoint(action)
            case A.RequestStop():
                return self._request_stop(action)
            case A.EnqueueShards():
                return self._enqueue_shards(action)
            case A.PublishOutputs():
                return self._publish_outputs(action)
        raise TypeError(f"no handler for {type(action).__name__}")

    def launching(self) -> set[tuple[str, int]]:
        """(job, node) pairs with a launch in flight."""
        with self._lock:
            return set(self._inflight)

    # -- the other actions -----------------------------------------------------------

    def _terminate(self, action: A.Terminate) -> Detail:
        provider = self.providers[action.provider]
        job_id = action.job_id or self.instance_jobs.get(action.instance_id)
        if job_id and action.instance_id not in self.unheld_instances:
            self.store.check_lease(job_id)  # a cloud call is not fenced by the database
        provider.terminate(action.instance_id)
        return {"instance_id": action.instance_id}

    def _set_job_state(self, action: A.SetJobState) -> Detail:
        state = JobState(action.state)
        current = self.store.get_job(action.job_id)
        if current.state is state:
            return {"skipped": f"already {state}"}
        record = self.store.transition(
            action.job_id,
            state,
            f"job_{state.value}",
            {"reason": str(action.reason)},
            reason=str(action.reason),
        )
        return {"state": str(record.state)}

    def _end_attempt(self, action: A.EndAttempt) -> Detail:
        current = self.store.attempt(action.attempt_id)
        if not current.live:
            return {"skipped": "already ended"}
        fields: dict[str, Any] = {}  # the store's attempt columns
        if action.exit_code is not None:
            fields["exit_code"] = int(action.exit_code)
        if action.error_code is not None:
            fields["error_code"] = str(action.error_code)
        # The end on the provider's clock (clock.py): what the cloud says, else now there.
        # ``action.at_s`` is not used: it may be an agent's wall time.
        fields["ended_unix_s"] = self._ended_at(current)
        detail = str(action.detail or "")
        if action.reason is EndReason.AGENT_LOST:  # what is known: the boot's console, if shown
            detail = f"{detail}; console: {self._console_tail(current)}"
        if (
            action.reason in (EndReason.FAILED, EndReason.AGENT_LOST, EndReason.WORKER_FAILED)
            and detail
        ):
            fields["error_message"] = detail[:2000]  # what status shows, as a launch failure's
        self.store.update_attempt(
            action.attempt_id,
            state=AttemptState.ENDED,
            end_reason=EndReason(action.reason),
            data={"detail": detail} if detail else None,
            **fields,
        )
        return {"attempt_id": action.attempt_id}

    def _console_tail(self, attempt: AttemptRecord) -> str:
        """The last :data:`CONSOLE_TAIL_LINES` lines of the instance's console (each cut to
        :data:`CONSOLE_LINE_CHARS`), joined by `` | ``; what stands in where the cloud shows none."""
        provider = self.providers.get(attempt.provider)
        if not isinstance(provider, ConsoleOutput) or not attempt.instance_id:
            return "none (the cloud shows no console output)"
        try:
            text = provider.console_output(attempt.instance_id)
        except Exception as exc:  # the console is a hint: its absence never blocks the end
            return f"not read ({type(exc).__name__}: {exc})"
        lines = [line.rstrip()[:CONSOLE_LINE_CHARS] for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-CONSOLE_TAIL_LINES:]) or "empty"

    def _ended_at(self, attempt: AttemptRecord) -> float:
        provider = self.providers.get(attempt.provider)
        if provider is not None and attempt.instance_id:
            try:
                ended = provider.describe(attempt.instance_id).ended_at
            except Exception:  # unknown to the cloud, or the call failed: now on its clock
                ended = None
            if ended is not None:
                return float(ended)
        return provider_now(provider)

    def _update_attempt(self, action: A.UpdateAttempt) -> Detail:
        current = self.store.attempt(action.attempt_id)
        if not current.live:
            return {"skipped": "already ended"}
        fields: dict[str, Any] = {}  # the store's attempt columns
        provider = self.providers.get(current.provider)
        stored = _column_values(current)
        for name, column in _ATTEMPT_COLUMNS.items():
            value = action.fields.get(name)
            if column in _TIME_COLUMNS:
                # Set once, on the provider's clock (the action's may be an agent's wall time).
                if value is not None and stored[column] is None:
                    fields[column] = provider_now(provider)
            elif value is not None and stored[column] != value:
                fields[column] = value
        if action.state is not None:
            state = AttemptState(action.state)
            order = list(AttemptState)
            if order.index(state) > order.index(current.state):
                fields["state"] = state  # forward only: the observer may have moved it already
        if not fields:
            return {"skipped": "nothing new"}
        stamp(fields, provider)
        self.store.update_attempt(action.attempt_id, **fields)
        if fields.get("state") is AttemptState.RUNNING:
            faults.reached("running")
        return {"fields": sorted(str(k) for k in fields)}

    def _force_on_demand(self, action: A.ForceOnDemand) -> Detail:
        job = self.store.get_job(action.job_id)
        if job.on_demand_forced:
            return {"skipped": "already on-demand"}
        self.store.update_job(
            action.job_id,
            "forced_on_demand",
            {"reason": str(action.reason)},
            reason=str(action.reason),
            on_demand_forced=True,
        )
        return {}

    def _waiting(self, action: A.Waiting) -> Detail:
        job = self.store.get_job(action.job_id)
        if job.reason == str(action.reason):
            return {"skipped": "same reason"}
        self.store.update_job(
            action.job_id,
            "waiting",
            {"node": int(action.node), "reason": str(action.reason)},
            reason=str(action.reason),
        )
        return {}

    def _cool_down(self, action: A.CoolDown) -> Detail:
        until = float(action.until_s)
        self.store.add_cooldown(action.market, until, str(action.reason))
        return {"until_unix_s": until}

    def _agent_request(
        self,
        job_id: str,
        instance_id: str,
        kind: str,
        reason: str,
        deadline_unix_s: float | None = None,
    ) -> Detail:
        from spothop.state.agent_requests import add_request

        self.store.check_lease(job_id)
        request_id = add_request(self.store.engine, instance_id, kind, reason, deadline_unix_s)
        return {"request_id": request_id}

    def _request_checkpoint(self, action: A.RequestCheckpoint) -> Detail:
        return self._agent_request(
            action.job_id, action.instance_id, "checkpoint", str(action.reason)
        )

    def _request_stop(self, action: A.RequestStop) -> Detail:
        deadline = action.deadline_s
        return self._agent_request(
            action.job_id,
            action.instance_id,
            "stop",
            str(action.reason),
            None if deadline is None else float(deadline),
        )

    def _enqueue_shards(self, action: A.EnqueueShards) -> Detail:
        from spothop.queue.errors import BatchSpecError

        job = self.store.get_job(action.job_id)
        try:
            added = enqueue_shards(job.spec(), job.job_id, self.queue_url)
        except BatchSpecError as exc:  # inputs no shard could be read from: no pass fixes them
            if not job.state.final:
                self.store.transition(job.job_id, JobState.FAILED, "job_failed", reason=str(exc))
            return {"failed": str(exc)}
        self.store.record_event(job.job_id, "shards_enqueued", {"added": added})
        return {"added": added}

    def _publish_outputs(self, action: A.PublishOutputs) -> Detail:
        job = self.store.get_job(action.job_id)
        report = publish_outputs(job.spec(), job.job_id, self.queue_url)
        self.store.record_event(job.job_id, "outputs_published", report)
        return report


# UpdateAttempt's field names → the store's attempt columns (the rest are folded from agent events).
_ATTEMPT_COLUMNS = {
    "instance_id": "instance_id",
    "running_at": "running_unix_s",
    "noticed_at": "noticed_unix_s",
    "zone": "zone",
}
_TIME_COLUMNS = frozenset({"running_unix_s", "noticed_unix_s"})


def _column_values(attempt: AttemptRecord) -> dict[str, object]:
    """The stored values of :data:`_ATTEMPT_COLUMNS`' columns."""
    return {
        "instance_id": attempt.instance_id,
        "running_unix_s": attempt.running_unix_s,
        "noticed_unix_s": attempt.noticed_unix_s,
        "zone": attempt.zone,
    }
