"""The :class:`~.actions.Launch` step: attempts written before the cloud call, then launched in the background.

See :mod:`.executor`'s module docstring for the rules (in order, or in
parallel with the first that runs kept); each launch's :class:`LaunchOutcome`
is kept for tests and benchmarks.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from spothop.errors import AuthFailed, ConfigError, InvalidRequest, ProviderError
from spothop.jobs.controller import actions as A
from spothop.jobs.controller import faults
from spothop.jobs.controller.clock import provider_now, stamp
from spothop.jobs.controller.executor_base import Detail, LaunchOutcome
from spothop.jobs.controller.launch_request import LaunchRequests, finite_or_none
from spothop.jobs.errors import JobLeaseLost
from spothop.jobs.lifecycle import AttemptState, EndReason, refused_where
from spothop.jobs.records import AttemptRecord, JobRecord
from spothop.providers.base import Instance, InstanceState, LaunchRequest
from spothop.scheduler.placement import Candidate

log = logging.getLogger(__name__)

# An attempt planned for one candidate: the attempt row written, and its launch request (or the
# refusal that fails it before any cloud call).
Planned = tuple[Candidate, AttemptRecord, LaunchRequest | ProviderError]
RACE_TIMEOUT_S = 600.0  # a parallel launch that has not run after this leaves the race
RACE_POLL_S = 0.1


def refuses_every_launch(exc: BaseException, attempt: AttemptRecord) -> bool:
    """The launch failed for a reason that repeats on every launch of that provider, so that
    failing over to its other markets only repeats it: a configuration error (no image),
    credentials refused, a request the cloud refuses as such (a missing image or security group).

    A reserved launch's invalid request is the pool's (a reservation id the cloud does not know,
    one in another zone): that pool fails, and the job fails over as from any market's failure.
    """
    if isinstance(exc, (ConfigError, AuthFailed)):
        return True
    return isinstance(exc, InvalidRequest) and attempt.market_kind != "reserved"


def refused_at(exc: BaseException, attempt: AttemptRecord) -> str | None:
    """Where ``exc`` refuses every launch (:func:`~spothop.jobs.lifecycle.refused_where`): the
    attempt's provider, or that provider in the attempt's region when the cloud's error holds
    there only (``ProviderError.region_scoped``: a region not enabled, an image that exists in
    another region); None when it is a market's failure (:func:`refuses_every_launch`)."""
    if not refuses_every_launch(exc, attempt):
        return None
    regional = isinstance(exc, ProviderError) and exc.region_scoped
    return refused_where(attempt.provider, attempt.region if regional else None)


def refusal_for(
    refused_by: dict[str, tuple[str, str]], attempt: AttemptRecord
) -> tuple[str, tuple[str, str]] | None:
    """The refusal a launch of this race already met that covers ``attempt``: (where, (code,
    message)) for its provider, or for its provider in its region; None if none does."""
    for where in (attempt.provider, refused_where(attempt.provider, attempt.region)):
        if where in refused_by:
            return where, refused_by[where]
    return None


class LaunchSteps(LaunchRequests):
    """Carries out :class:`~.actions.Launch` (module docstring)."""

    def _launch(self, action: A.Launch) -> Detail:
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
            race = functools.partial(self._launch_parallel, outcome, planned)
            self._launch_pool.submit(self._run_launch, outcome, race)
            return {"attempts": [p[1].attempt_id for p in planned]}
        in_order = functools.partial(self._launch_in_order, outcome, job, action, chosen)
        self._launch_pool.submit(self._run_launch, outcome, in_order)
        return {"candidates": len(chosen)}

    def _plan(self, job: JobRecord, action: A.Launch, candidate: Candidate, token: str) -> Planned:
        """Write the attempt (before any cloud call) and build its launch request (or the
        refusal that fails it: a control plane its instances cannot reach)."""
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
            generation=action.generation or 0,
            group_nnodes=action.group_nnodes,
            group_nproc_per_node=(
                None if action.group_nnodes is None else max(1, offering.gpu_count)
            ),
            data={
                "reason": str(action.reason),
                "parallel": bool(action.parallel),
                "replaces": action.replaces,
                "score": finite_or_none(candidate.score),
            },
        )
        faults.reached("attempt_written")
        try:
            request: LaunchRequest | ProviderError = self._request(
                job.spec(), job.job_id, attempt, candidate, job.code_sha256, job.mounts_json
            )
        except ProviderError as exc:  # refused before any cloud call: the launch fails with it
            request = exc
        faults.reached("request_built")
        return candidate, attempt, request

    def _run_launch(self, outcome: LaunchOutcome, launch: Callable[[], None]) -> None:
        try:
            launch()
        except JobLeaseLost as exc:  # a replica lost the job mid-launch: its new holder goes on
            log.warning("launch of %s node %d stopped: %s", outcome.job_id, outcome.node, exc)
        except Exception:
            log.exception("launch of %s node %d failed", outcome.job_id, outcome.node)
        finally:
            outcome.ended_monotonic = time.monotonic()
            with self._lock:
                self._inflight.pop((outcome.job_id, outcome.node), None)
            self.wake()

    def _launch_in_order(
        self,
        outcome: LaunchOutcome,
        job: JobRecord,
        action: A.Launch,
        candidates: list[Candidate],
    ) -> None:
        for index, candidate in enumerate(candidates):
            offering = candidate.offering
            if offering.provider in outcome.refused_by or (
                refused_where(offering.provider, offering.region) in outcome.refused_by
            ):
                continue  # it refused this launch for good: its other markets (there) would too
            token = str(action.token) if index == 0 else f"{action.token}~{index}"
            _, attempt, request = self._plan(job, action, candidate, token)
            instance = self._call_launch(outcome, attempt, request)
            if instance is not None:
                outcome.winner, outcome.instance_id = attempt.attempt_id, instance.instance_id
                self._record_launched(attempt, instance)
                return

    def _launch_parallel(self, outcome: LaunchOutcome, planned: list[Planned]) -> None:
        decided = threading.Lock()
        # A provider's first racer calls at once; its others once that call has returned, so a
        # provider that refuses for good (``launch_refused``) is asked once per race, not k times.
        first_called: dict[str, threading.Event] = {}
        threads = []
        for _, attempt, request in planned:
            ahead = first_called.get(attempt.provider)
            called = first_called.setdefault(attempt.provider, threading.Event())
            turn = (ahead, None if ahead else called)  # wait for, then set once called
            threads.append(
                threading.Thread(
                    target=self._launch_racer,
                    args=(outcome, decided, attempt, request, turn),
                    name=f"launch-{attempt.attempt_id}",
                    daemon=True,
                )
            )
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _call_launch(
        self,
        outcome: LaunchOutcome,
        attempt: AttemptRecord,
        request: LaunchRequest | ProviderError,
    ) -> Instance | None:
        """``provider.launch``; on failure the attempt ends ``launch_failed`` with the cloud's code
        and message, or ``launch_refused`` (:func:`refuses_every_launch`) with the error's whole
        text (provider, code, message and the fix it names)."""
        provider = self.providers.get(attempt.provider)
        try:
            if isinstance(request, ProviderError):
                raise request
            if provider is None:
                raise ProviderError(attempt.provider, "UnknownProvider", "no such provider here")
            instance = provider.launch(request)
            faults.reached("provider_called")
            return instance
        except Exception as exc:
            code = exc.code if isinstance(exc, ProviderError) else type(exc).__name__
            message = exc.cloud_message if isinstance(exc, ProviderError) else str(exc)
            where = refused_at(exc, attempt)
            if where is not None:
                message = str(exc)  # a ProviderError's text adds its provider and hint (the fix)
            with self._lock:
                outcome.failures.append((attempt.attempt_id, code, message))
                if where is not None:
                    outcome.refused_by.setdefault(where, (code, message))
            self._safely(
                self.store.update_attempt,
                attempt.attempt_id,
                state=AttemptState.ENDED,
                end_reason=_end_reason(attempt, where),
                error_code=code,
                error_message=(message or "")[:2000],
                ended_unix_s=provider_now(provider),
            )
            return None

    def _end_unasked(self, attempt: AttemptRecord, where: str, code: str, message: str) -> None:
        """End an attempt whose provider (or region) refused the same launch for good: with
        that refusal."""
        self._safely(
            self.store.update_attempt,
            attempt.attempt_id,
            state=AttemptState.ENDED,
            end_reason=_end_reason(attempt, where),
            error_code=code,
            error_message=message[:2000],
            ended_unix_s=provider_now(self.providers.get(attempt.provider)),
        )

    def _record_launched(self, attempt: AttemptRecord, instance: Instance) -> None:
        """The launch returned: the attempt gets its instance (the observer may have adopted it first)."""
        self._bind_token(attempt, instance.instance_id)
        faults.reached("token_bound")
        current = self._safely(self.store.attempt, attempt.attempt_id)
        if current is None or not current.live:
            return
        fields: dict[str, Any] = {}  # the store's attempt columns
        if current.instance_id != instance.instance_id:
            fields["instance_id"] = instance.instance_id
        if instance.zone and current.zone != instance.zone:
            fields["zone"] = instance.zone
        if current.state is AttemptState.LAUNCHING:
            fields["state"] = AttemptState.PENDING
        if fields:
            stamp(fields, self.providers.get(attempt.provider))
            self._safely(self.store.update_attempt, attempt.attempt_id, **fields)
        faults.reached("instance_recorded")

    def _launch_racer(
        self,
        outcome: LaunchOutcome,
        decided: threading.Lock,
        attempt: AttemptRecord,
        request: LaunchRequest | ProviderError,
        turn: tuple[threading.Event | None, threading.Event | None] = (None, None),
    ) -> None:
        """One candidate of a parallel launch. ``turn``: the event of its provider's first call
        to wait for before calling (None: it is that first call), and the event to set once its
        own call has returned (None: it is not the first)."""
        ahead, called = turn
        if ahead is not None:
            ahead.wait(self.race_timeout_s)
        refusal = refusal_for(outcome.refused_by, attempt)
        if refusal is not None:  # its provider refused this race's first call: not asked again
            where, (code, message) = refusal
            self._end_unasked(attempt, where, code, message)
            return
        try:
            instance = self._call_launch(outcome, attempt, request)
        finally:
            if called is not None:
                called.set()
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


def _end_reason(attempt: AttemptRecord, where: str | None) -> EndReason:
    """``launch_failed`` (None: a market's failure), ``launch_refused`` (the whole provider) or
    ``region_refused`` (the provider in the attempt's region)."""
    if where is None:
        return EndReason.LAUNCH_FAILED
    return EndReason.LAUNCH_REFUSED if where == attempt.provider else EndReason.REGION_REFUSED
