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
   ``f"{token}.{i}"``.
3. Every failure ends its attempt ``launch_failed`` with the cloud's own
   ``error_code`` and message (:class:`~spothop.errors.ProviderError`).
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
from typing import Any

from spothop.errors import ProviderError
from spothop.jobs.controller import actions as A
from spothop.jobs.controller.clock import provider_now, stamp
from spothop.jobs.controller.observe import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_STORE,
    TAG_TOKEN,
    store_tag,
)
from spothop.jobs.errors import JobLeaseLost
from spothop.jobs.launcher import GroupEnv, WorkerCommand, bootstrap, group_port
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.store import AttemptRecord, JobStore
from spothop.providers.base import InstanceState, LaunchRequest, Provider

log = logging.getLogger(__name__)

DEFAULT_PARALLEL_K = 3
DEFAULT_STEP_TIMEOUT_S = 30.0
# An ended attempt's agent token outlives its instance by this (monotonic seconds): an instance
# the cloud lists as ended may still be running its agent's last words (a terminate's grace, the
# emergency protocol's upload and records), which must reach the server.
DEFAULT_TOKEN_GRACE_S = 120.0
RACE_TIMEOUT_S = 600.0  # a parallel launch that has not run after this leaves the race
RACE_POLL_S = 0.1


@dataclass(frozen=True)
class StepReport:
    """One action carried out: what, whether it worked, how long it took, the error if not."""

    action: str
    ok: bool
    seconds: float
    error: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "ok": self.ok,
            "seconds": round(self.seconds, 6),
            "error": self.error,
            "detail": dict(self.detail),
        }


@dataclass
class LaunchOutcome:
    """What one :class:`Launch` came to (for tests and benchmarks): the winner and each failure."""

    job_id: str
    node: int
    winner: str | None = None  # attempt id
    instance_id: str | None = None
    failures: list[tuple[str, str | None, str]] = field(default_factory=list)  # attempt, code, msg
    superseded: list[str] = field(default_factory=list)
    started_monotonic: float = field(default_factory=time.monotonic)
    ended_monotonic: float | None = None


class Executor:
    """Carries out actions (see the module docstring)."""

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
    ) -> None:
        self.store = store
        self.wake_address = wake_address  # the agents' store process pokes it (None: the home's)
        self.control_plane_url = control_plane_url  # server mode: agents talk HTTP, with tokens
        # instance id → the job its tag names, as the last pass listed (a Terminate without a job)
        self.instance_jobs: dict[str, str | None] = {}
        # instances of finished jobs no one holds: anyone may end them (no lease to check)
        self.unheld_instances: frozenset[str] = frozenset()
        self._tokens: Any = None  # the server's TokenStore, made on first use (server mode)
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

    def execute(self, actions: Iterable[object]) -> list[StepReport]:
        """Carry out every action in order, each timed and isolated; their reports."""
        return [self.step(action) for action in actions]

    def step(self, action: object) -> StepReport:
        name = type(action).__name__
        handler = self._handlers().get(type(action))
        started = time.monotonic()
        if handler is None:
            return StepReport(name, False, 0.0, f"no handler for {name}")
        future: Future[Mapping[str, Any] | None] = self._pool.submit(handler, action)
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

    def _handlers(self) -> dict[type, Callable[[Any], Mapping[str, Any] | None]]:
        return {
            A.Launch: self._launch,
            A.Terminate: self._terminate,
            A.SetJobState: self._set_job_state,
            A.EndAttempt: self._end_attempt,
            A.UpdateAttempt: self._update_attempt,
            A.ForceOnDemand: self._force_on_demand,
            A.Waiting: self._waiting,
            A.CoolDown: self._cool_down,
            A.RequestCheckpoint: self._request_checkpoint,
            A.RequestStop: self._request_stop,
            A.EnqueueShards: self._enqueue_shards,
            A.PublishOutputs: self._publish_outputs,
        }

    def launching(self) -> set[tuple[str, int]]:
        """(job, node) pairs with a launch in flight."""
        with self._lock:
            return set(self._inflight)

    # -- launch ------------------------------------------------------------------

    def _launch(self, action: Any) -> Mapping[str, Any]:
        key = (action.job_id, int(action.node))
        with self._lock:
            if key in self._inflight:
                return {"skipped": "a launch of this node is in flight"}
        job = self.store.get_job(action.job_id)
        if job.state.final:
            return {"skipped": f"the job is {job.state}"}
        self.store.check_lease(action.job_id)  # a replica's (each attempt row is fenced too)
        chosen = list(action.candidates)
        if not chosen:
            return {"skipped": "no candidate"}
        first = f"{action.token}.0" if action.parallel else str(action.token)
        if self.store.attempt_by_token(first) is not None:
            return {"skipped": f"launch token {first} was used already (a replayed launch)"}
        outcome = LaunchOutcome(action.job_id, key[1])
        with self._lock:
            self._inflight[key] = outcome
            self.outcomes.append(outcome)
        if action.parallel:
            planned = [
                self._plan(job, action, candidate, f"{action.token}.{i}")
                for i, candidate in enumerate(chosen)
            ]
            self._launch_pool.submit(self._run_launch, outcome, self._launch_parallel, planned)
            return {"attempts": [p[1].attempt_id for p in planned]}
        self._launch_pool.submit(
            self._run_launch, outcome, self._launch_in_order, (job, action, chosen)
        )
        return {"candidates": len(chosen)}

    def _plan(
        self, job: Any, action: Any, candidate: Any, token: str
    ) -> tuple[Any, AttemptRecord, LaunchRequest | ProviderError]:
        """Write the attempt (before any cloud call) and build its launch request (or the
        refusal that fails it: a group launch the provider cannot rendezvous)."""
        offering = candidate.offering
        attempt = self.store.add_attempt(
            action.job_id,
            int(action.node),
            provider=offering.provider,
            region=offering.region,
            zone=offering.zone or "",
            instance_type=offering.instance_type,
            market_kind=str(candidate.market_kind),
            price_usd_per_hour=float(candidate.price_usd_per_hour),
            launch_token=token,
            launched_unix_s=provider_now(self.providers.get(offering.provider)),
            generation=int(getattr(action, "generation", None) or 0),
            group_nnodes=getattr(action, "group_nnodes", None),
            data={
                "reason": str(action.reason),
                "parallel": bool(action.parallel),
                "replaces": getattr(action, "replaces", None),
                "score": _finite(getattr(candidate, "score", None)),
            },
        )
        try:
            request: LaunchRequest | ProviderError = self._request(
                job.spec(), job.job_id, attempt, candidate
            )
        except ProviderError as exc:  # refused before any cloud call: the launch fails with it
            request = exc
        return candidate, attempt, request

    def _run_launch(self, outcome: LaunchOutcome, fn: Callable[..., None], arg: Any) -> None:
        try:
            fn(outcome, arg)
        except JobLeaseLost as exc:  # a replica lost the job mid-launch: its new holder goes on
            log.warning("launch of %s node %d stopped: %s", outcome.job_id, outcome.node, exc)
        except Exception:
            log.exception("launch of %s node %d failed", outcome.job_id, outcome.node)
        finally:
            outcome.ended_monotonic = time.monotonic()
            with self._lock:
                self._inflight.pop((outcome.job_id, outcome.node), None)
            self.wake()

    def _reservation_for(self, attempt: AttemptRecord) -> str | None:
        """The pool a reserved attempt launches into; ``None`` for spot and on-demand.

        The provider's matching pool (type, region, zone) with the most free
        slots; when it lists none, the default id ``<location>/<type>``, which the
        provider refuses with its own code (recorded as the attempt's launch failure).
        """
        from spothop.providers.reservations import ReservedCapacity

        if str(attempt.market_kind) != "reserved":
            return None
        provider = self.providers.get(attempt.provider)
        if not isinstance(provider, ReservedCapacity):
            return f"{attempt.zone or attempt.region}/{attempt.instance_type}"
        pools = [
            p
            for p in provider.list_reservations()
            if p.instance_type == attempt.instance_type
            and p.region == attempt.region
            and (not attempt.zone or p.zone in (None, attempt.zone))
        ]
        pools.sort(key=lambda p: (-p.free, p.reservation_id))
        return (
            pools[0].reservation_id
            if pools
            else f"{attempt.zone or attempt.region}/{attempt.instance_type}"
        )

    def _launch_in_order(self, outcome: LaunchOutcome, arg: Any) -> None:
        job, action, candidates = arg
        for index, candidate in enumerate(candidates):
            token = str(action.token) if index == 0 else f"{action.token}~{index}"
            _, attempt, request = self._plan(job, action, candidate, token)
            instance = self._call_launch(outcome, attempt, request)
            if instance is not None:
                outcome.winner, outcome.instance_id = attempt.attempt_id, instance.instance_id
                self._record_launched(attempt, instance)
                return

    def _launch_parallel(
        self, outcome: LaunchOutcome, planned: list[tuple[Any, AttemptRecord, LaunchRequest]]
    ) -> None:
        decided = threading.Lock()
        threads = [
            threading.Thread(
                target=self._launch_racer,
                args=(outcome, decided, attempt, request),
                name=f"launch-{attempt.attempt_id}",
                daemon=True,
            )
            for _, attempt, request in planned
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _call_launch(
        self,
        outcome: LaunchOutcome,
        attempt: AttemptRecord,
        request: LaunchRequest | ProviderError,
    ) -> Any:
        """``provider.launch``; on failure the attempt ends ``launch_failed`` with the cloud's code."""
        provider = self.providers.get(attempt.provider)
        try:
            if isinstance(request, ProviderError):
                raise request
            if provider is None:
                raise ProviderError(attempt.provider, "UnknownProvider", "no such provider here")
            return provider.launch(request)
        except Exception as exc:
            code = exc.code if isinstance(exc, ProviderError) else type(exc).__name__
            message = exc.cloud_message if isinstance(exc, ProviderError) else str(exc)
            with self._lock:
                outcome.failures.append((attempt.attempt_id, code, message))
            self._safely(
                self.store.update_attempt,
                attempt.attempt_id,
                state=AttemptState.ENDED,
                end_reason=EndReason.LAUNCH_FAILED,
                error_code=code,
                error_message=(message or "")[:2000],
                ended_unix_s=provider_now(provider),
            )
            return None

    def _record_launched(self, attempt: AttemptRecord, instance: Any) -> None:
        """The launch returned: the attempt gets its instance (the observer may have adopted it first)."""
        self._bind_token(attempt, instance.instance_id)
        current = self._safely(self.store.attempt, attempt.attempt_id)
        if current is None or not current.live:
            return
        fields: dict[str, Any] = {}
        if current.instance_id != instance.instance_id:
            fields["instance_id"] = instance.instance_id
        if instance.zone and current.zone != instance.zone:
            fields["zone"] = instance.zone
        if current.state is AttemptState.LAUNCHING:
            fields["state"] = AttemptState.PENDING
        if fields:
            stamp(fields, self.providers.get(attempt.provider))
            self._safely(self.store.update_attempt, attempt.attempt_id, **fields)

    def _launch_racer(
        self,
        outcome: LaunchOutcome,
        decided: threading.Lock,
        attempt: AttemptRecord,
        request: LaunchRequest | ProviderError,
    ) -> None:
        instance = self._call_launch(outcome, attempt, request)
        if instance is None:
            return
        self._record_launched(attempt, instance)
        provider = self.providers[attempt.provider]
        deadline = time.monotonic() + self.race_timeout_s
        state = instance.state
        while True:
            with decided:
                if outcome.winner is not None:
                    break
                if state is InstanceState.RUNNING:
                    outcome.winner, outcome.instance_id = attempt.attempt_id, instance.instance_id
                    return
            if not state.is_alive or time.monotonic() > deadline:
                break  # it died booting, or never ran: the observer and decide see it
            time.sleep(RACE_POLL_S)
            try:
                state = provider.describe(instance.instance_id).state
            except Exception as exc:
                log.warning("describe %s failed: %s", instance.instance_id, exc)
        if outcome.winner is None or not state.is_alive:
            return
        # A parallel failover's loser: keep the first that runs, terminate the rest.
        with self._lock:
            outcome.superseded.append(attempt.attempt_id)
        self._safely(provider.terminate, instance.instance_id)
        self._safely(
            self.store.update_attempt,
            attempt.attempt_id,
            state=AttemptState.ENDED,
            end_reason=EndReason.SUPERSEDED,
            ended_unix_s=provider_now(provider),
        )

    def _request(
        self, spec: Any, job_id: str, attempt: AttemptRecord, candidate: Any
    ) -> LaunchRequest:
        work = WorkerCommand(
            run=spec.run or "true",
            setup=getattr(spec, "setup", None),
            workdir=_str_or_none(getattr(spec, "workdir", None)),
            envs=dict(getattr(spec, "envs", None) or {}),
            checkpoint_url=_checkpoint_url(spec),
            queue_url=self.queue_url if str(getattr(spec, "kind", "task")) == "batch" else None,
            output_url=_str_or_none(getattr(getattr(spec, "batch", None), "output", None)),
            checkpoint_interval_s=getattr(getattr(spec, "checkpoint", None), "interval_s", None),
            checkpoint_save_cost_s=getattr(getattr(spec, "checkpoint", None), "save_cost_s", None),
            checkpoint_compat=_compat_of(spec),
            checkpoint_replicas=dict(
                getattr(getattr(spec, "checkpoint", None), "replicas", None) or {}
            ),
        )
        boot = bootstrap(
            work,
            job_id=job_id,
            node=attempt.node,
            attempt_id=attempt.attempt_id,
            provider=attempt.provider,
            store_url=self.store_url,
            preemption_rate_per_h=_finite(getattr(candidate, "preemption_rate_per_h", None)),
            home=self.home,
            group=self._group_env(job_id, attempt, candidate),
            region=attempt.region,
            wake_socket=self.wake_address,
            gpu=getattr(getattr(candidate, "offering", None), "gpu", None),
            control_plane=self.control_plane_url,
            agent_token=self._agent_token(job_id, attempt),
        )
        return LaunchRequest(
            instance_type=attempt.instance_type,
            region=attempt.region,
            zone=attempt.zone or None,
            spot=str(attempt.market_kind) == "spot",
            reservation=self._reservation_for(attempt),
            image=getattr(spec, "image", None),
            bootstrap_command=boot.command,
            env=boot.env,
            name=f"{job_id}-{attempt.node}",
            tags={
                TAG_JOB: job_id,
                TAG_NODE: str(attempt.node),
                TAG_TOKEN: attempt.launch_token,
                TAG_ATTEMPT: attempt.attempt_id,
                TAG_STORE: store_tag(self.store_url),
            },
        )

    # -- agent tokens (server mode) ---------------------------------------------------

    @property
    def tokens(self) -> Any:
        """The server's token store, on the job store's database (server mode only)."""
        if self._tokens is None:
            from spothop.state.tokens import TokenStore

            self._tokens = TokenStore(self.store.engine)
        return self._tokens

    def _agent_token(self, job_id: str, attempt: AttemptRecord) -> str | None:
        """Server mode: a token for this attempt's agent, scoped to its job and (once the launch
        names it) its instance; issued for the launch token until :meth:`_bind_token`."""
        if not self.control_plane_url:
            return None
        project = self.tokens.job_project(job_id)
        token: str = self.tokens.issue_agent_token(
            job_id, str(attempt.launch_token), project=project
        )
        return token

    def _bind_token(self, attempt: AttemptRecord, instance_id: str) -> None:
        """The launch returned (or the observer adopted its instance): the token names it now."""
        if self.control_plane_url and attempt.launch_token:
            self._safely(
                self.tokens.bind_agent_token, attempt.job_id, attempt.launch_token, instance_id
            )

    def sync_tokens(self, observation: Any) -> int:
        """Server mode, each pass: bind the tokens of adopted instances; revoke those of attempts
        that ended whose instance is gone.

        An instance adopted by its launch token (its launcher died before the launch
        returned) has its token bound here. Revoked: not at the moment the attempt ends.
        Not at the moment the attempt ends: a preempted instance's agent still sends its
        interruption record and releases its worker's leases while the cloud takes it back,
        and those must reach the server. Once its provider lists it ended (or no longer
        lists it), nothing the agent says is wanted: its token goes. A launch that failed
        has no instance, and its token goes with its attempt. Returns how many went.
        """
        if not self.control_plane_url or observation is None:
            return 0
        live = self.tokens.live_agent_tokens()
        by_key = self._attempts_by_token_key(observation, {j for j, _ in live})
        alive = {i for i, inst in observation.listed.items() if inst.state.is_alive}
        now = time.monotonic()
        revoked = 0
        for job_id, instance_id in live:
            attempt = by_key.get((job_id, instance_id))
            if attempt is None:
                continue
            if attempt.instance_id and instance_id == attempt.launch_token:
                self._bind_token(attempt, attempt.instance_id)  # adopted
                instance_id = attempt.instance_id
            if attempt.live or (
                attempt.instance_id
                and (
                    attempt.instance_id in alive
                    or attempt.provider not in observation.listed_providers
                )
            ):
                continue  # its instance still runs (or is unknown this pass): its agent may talk
            key = (job_id, instance_id)
            since = self._gone_since.setdefault(key, now)
            if attempt.instance_id and now - since < self.token_grace_s:
                continue  # gone from the listing a moment ago: its agent may still be finishing
            revoked += self._safely(self.tokens.revoke_agent_tokens, job_id, instance_id) or 0
            self._gone_since.pop(key, None)
        known = set(live)
        self._gone_since = {k: v for k, v in self._gone_since.items() if k in known}
        return revoked

    def _attempts_by_token_key(
        self, observation: Any, token_jobs: set[str]
    ) -> dict[tuple[str, str], AttemptRecord]:
        """(job, instance id or launch token) → attempt: the pass's jobs, and the finished jobs
        no one holds any more (released once their attempts ended) that still have live tokens;
        another replica's live job is left to it."""
        attempts = dict(observation.attempts)
        for job_id in sorted(token_jobs - set(attempts)):
            job = self._safely(self.store.get_job, job_id)
            if job is not None and job.state.final:
                attempts[job_id] = tuple(self.store.attempts(job_id))
        by_key: dict[tuple[str, str], AttemptRecord] = {}
        for atts in attempts.values():
            for a in atts:
                if a.instance_id:
                    by_key[(a.job_id, a.instance_id)] = a
                if a.launch_token:
                    by_key.setdefault((a.job_id, a.launch_token), a)
        return by_key

    def _group_env(self, job_id: str, attempt: AttemptRecord, candidate: Any) -> GroupEnv | None:
        """A grouped task's rendezvous environment (docs/multinode.md); None for other jobs.

        ``MASTER_ADDR`` is where node 0 is reached: a provider whose instances share one
        host says so (``group_rendezvous_host``: the local cloud's 127.0.0.1); a provider
        that cannot tell node 0's address before it boots refuses the launch, naming why.
        """
        if attempt.group_nnodes is None:
            return None
        provider = self.providers.get(attempt.provider)
        host = getattr(provider, "group_rendezvous_host", None)
        if not isinstance(host, str) or not host:
            raise ProviderError(
                attempt.provider,
                "GroupUnsupported",
                "multi-node groups need node 0's address before launch; this provider cannot "
                "give it yet (docs/multinode.md, 'Where it runs')",
            )
        gpus = getattr(getattr(candidate, "offering", None), "gpu_count", None)
        return GroupEnv(
            nnodes=int(attempt.group_nnodes),
            nproc_per_node=int(gpus) if isinstance(gpus, int) and gpus >= 1 else 1,
            generation=attempt.generation,
            master_addr=host,
            master_port=group_port(job_id, attempt.generation),
        )

    @staticmethod
    def _safely(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            log.warning("%s failed: %s: %s", getattr(fn, "__name__", fn), type(exc).__name__, exc)
            return None

    # -- the other actions -----------------------------------------------------------

    def _terminate(self, action: Any) -> Mapping[str, Any]:
        provider = self.providers[action.provider]
        job_id = action.job_id or self.instance_jobs.get(action.instance_id)
        if job_id and action.instance_id not in self.unheld_instances:
            self.store.check_lease(job_id)  # a cloud call is not fenced by the database
        provider.terminate(action.instance_id)
        return {"instance_id": action.instance_id}

    def _set_job_state(self, action: Any) -> Mapping[str, Any]:
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

    def _end_attempt(self, action: Any) -> Mapping[str, Any]:
        current = self.store.attempt(action.attempt_id)
        if not current.live:
            return {"skipped": "already ended"}
        fields: dict[str, Any] = {}
        if getattr(action, "exit_code", None) is not None:
            fields["exit_code"] = int(action.exit_code)
        if getattr(action, "error_code", None) is not None:
            fields["error_code"] = str(action.error_code)
        # The end on the provider's clock (clock.py): what the cloud says, else now there.
        # ``action.at_s`` is not used: it may be an agent's wall time.
        fields["ended_unix_s"] = self._ended_at(current)
        detail = str(getattr(action, "detail", "") or "")
        self.store.update_attempt(
            action.attempt_id,
            state=AttemptState.ENDED,
            end_reason=EndReason(action.reason),
            data={"detail": detail} if detail else None,
            **fields,
        )
        return {"attempt_id": action.attempt_id}

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

    def _update_attempt(self, action: Any) -> Mapping[str, Any]:
        current = self.store.attempt(action.attempt_id)
        if not current.live:
            return {"skipped": "already ended"}
        fields: dict[str, Any] = {}
        provider = self.providers.get(current.provider)
        for name, column in _ATTEMPT_COLUMNS.items():
            value = action.fields.get(name)
            if column in _TIME_COLUMNS:
                # Set once, on the provider's clock (the action's may be an agent's wall time).
                if value is not None and getattr(current, column) is None:
                    fields[column] = provider_now(provider)
            elif value is not None and getattr(current, column) != value:
                fields[column] = value
        state = getattr(action, "state", None)
        if state is not None:
            state = AttemptState(state)
            order = list(AttemptState)
            if order.index(state) > order.index(current.state):
                fields["state"] = state  # forward only: the observer may have moved it already
        if not fields:
            return {"skipped": "nothing new"}
        stamp(fields, provider)
        self.store.update_attempt(action.attempt_id, **fields)
        return {"fields": sorted(str(k) for k in fields)}

    def _force_on_demand(self, action: Any) -> Mapping[str, Any]:
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

    def _waiting(self, action: Any) -> Mapping[str, Any]:
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

    def _cool_down(self, action: Any) -> Mapping[str, Any]:
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
    ) -> Mapping[str, Any]:
        from spothop.controlplane.store import add_request

        self.store.check_lease(job_id)
        request_id = add_request(self.store.engine, instance_id, kind, reason, deadline_unix_s)
        return {"request_id": request_id}

    def _request_checkpoint(self, action: Any) -> Mapping[str, Any]:
        return self._agent_request(
            action.job_id, action.instance_id, "checkpoint", str(getattr(action, "reason", ""))
        )

    def _request_stop(self, action: Any) -> Mapping[str, Any]:
        deadline = getattr(action, "deadline_s", None)
        return self._agent_request(
            action.job_id,
            action.instance_id,
            "stop",
            str(getattr(action, "reason", "")),
            None if deadline is None else float(deadline),
        )

    def _enqueue_shards(self, action: Any) -> Mapping[str, Any]:
        job = self.store.get_job(action.job_id)
        added = enqueue_shards(job.spec(), job.job_id, self.queue_url)
        self.store.record_event(job.job_id, "shards_enqueued", {"added": added})
        return {"added": added}

    def _publish_outputs(self, action: Any) -> Mapping[str, Any]:
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


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _compat_of(spec: Any) -> dict[str, Any] | None:
    """The spec's ``checkpoint.compatibility`` as plain values; None: the job did not opt in."""
    compat = getattr(getattr(spec, "checkpoint", None), "compatibility", None)
    return compat.model_dump() if compat is not None else None


def _checkpoint_url(spec: Any) -> str | None:
    checkpoint = getattr(spec, "checkpoint", None)
    url = getattr(checkpoint, "url", None) if checkpoint is not None else None
    return None if url is None else str(url)


# -- batch jobs: the shards in, the outputs out ----------------------------------------


def enqueue_shards(spec: Any, job_id: str, queue_url: str | None) -> int:
    """Split the batch job's inputs (every file its globs match, in name order) into shards and
    enqueue them in the job's queue (named by the job id); how many were new (again: none).

    Shard ids are ``f<file index>-shard-<n>`` so that files of one job never collide.
    """
    import glob

    from spothop.batch import BatchInput, plan_shards
    from spothop.queue import Shard, open_queue

    batch = spec.batch
    files: list[str] = []
    for pattern in batch.inputs:
        pattern = str(pattern)
        matched = sorted(glob.glob(pattern)) if "://" not in pattern else [pattern]
        files.extend(m for m in matched if m not in files)
    shards: list[Any] = []
    for index, path in enumerate(files):
        if path.endswith((".jsonl", ".parquet")):
            planned = plan_shards(
                BatchInput(records=path, records_per_shard=int(batch.records_per_shard))
            )
        else:
            planned = plan_shards(BatchInput(files=[path]))
        shards.extend(Shard(f"f{index}-{s.id}", s.payload) for s in planned)
    with open_queue(queue_url, job_id) as queue:
        return queue.enqueue(shards)


def publish_outputs(spec: Any, job_id: str, queue_url: str | None) -> dict[str, Any]:
    """Publish every done shard's winning output (idempotent); the counts."""
    from spothop.queue import open_queue
    from spothop.queue.outputs import OutputStore, finalize_outputs

    with open_queue(queue_url, job_id) as queue:
        report = finalize_outputs(queue, OutputStore(str(spec.batch.output)))
    return {"published": report.published, "losers_removed": report.losers_removed}
