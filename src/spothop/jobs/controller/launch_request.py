"""What one launch asks of its cloud: the :class:`~spothop.providers.base.LaunchRequest` of an attempt.

Built from the job's spec and the chosen candidate: the worker's command and
environment (:func:`spothop.jobs.launcher.bootstrap`), the attempt's market,
the reserved pool it launches into, a grouped task's rendezvous, and the tags
that let an instance whose launch never returned be found by its token.
"""

from __future__ import annotations

import logging
from typing import Any

from spothop.errors import ProviderError
from spothop.jobs.controller.agent_tokens import AgentTokens
from spothop.jobs.controller.observe import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_STORE,
    TAG_TOKEN,
    store_tag,
)
from spothop.jobs.launcher import GroupEnv, WorkerCommand, bootstrap, group_port
from spothop.jobs.store import AttemptRecord
from spothop.providers.base import LaunchRequest
from spothop.providers.extensions import GroupRendezvous

log = logging.getLogger(__name__)


class LaunchRequests(AgentTokens):
    """Builds each attempt's launch request (module docstring)."""

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

    def _group_env(self, job_id: str, attempt: AttemptRecord, candidate: Any) -> GroupEnv | None:
        """A grouped task's rendezvous environment (docs/multinode.md); None for other jobs.

        ``MASTER_ADDR`` is where node 0 is reached: a provider whose instances share one
        host says so (:class:`~spothop.providers.extensions.GroupRendezvous`: the local cloud's 127.0.0.1); a provider
        that cannot tell node 0's address before it boots refuses the launch, naming why.
        """
        if attempt.group_nnodes is None:
            return None
        provider = self.providers.get(attempt.provider)
        host = provider.group_rendezvous_host if isinstance(provider, GroupRendezvous) else ""
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
