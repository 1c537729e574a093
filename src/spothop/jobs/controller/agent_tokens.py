"""Server mode: each agent's token, issued for its launch, bound to its instance, revoked once it is gone."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from spothop.jobs.controller.executor_base import ExecutorBase

if TYPE_CHECKING:
    from spothop.jobs.controller.views import Observation
    from spothop.state.tokens import TokenStore
from spothop.jobs.records import AttemptRecord

log = logging.getLogger(__name__)


class AgentTokens(ExecutorBase):
    """The agent tokens of the executor's launches (server mode only; none without a control plane URL)."""

    @property
    def tokens(self) -> TokenStore:
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
        token: str = self.tokens.issue_launch_token(
            job_id, str(attempt.launch_token), project=project
        )
        return token

    def _bind_token(self, attempt: AttemptRecord, instance_id: str) -> None:
        """The launch returned (or the observer adopted its instance): the token names it now.

        The instance may have bound it on its first use (``TokenStore.bind_on_first_use``):
        to the same id this changes nothing; to another, the cloud's answer (``instance_id``)
        wins and the store warns of the instance that used it first."""
        if self.control_plane_url and attempt.launch_token:
            self._safely(
                self.tokens.bind_agent_token, attempt.job_id, attempt.launch_token, instance_id
            )

    def sync_tokens(self, observation: Observation | None) -> int:
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
        live = self.tokens.live_launch_tokens()
        by_key = self._attempts_by_token_key(observation, {j for j, _, _ in live})
        alive = {i for i, inst in observation.listed.items() if inst.state.is_alive}
        now = time.monotonic()
        revoked = 0
        for job_id, instance_id, launch in live:
            attempt = by_key.get((job_id, launch or instance_id))
            if attempt is None:
                continue
            if attempt.instance_id and instance_id != attempt.instance_id:
                # adopted (its token unbound, or bound on first use by another instance)
                self._bind_token(attempt, attempt.instance_id)
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
        known = {(j, i) for j, i, _ in live}
        self._gone_since = {k: v for k, v in self._gone_since.items() if k in known}
        return revoked

    def _attempts_by_token_key(
        self, observation: Observation, token_jobs: set[str]
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
