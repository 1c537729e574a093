"""What one launch asks of its cloud: the :class:`~spothop.providers.base.LaunchRequest` of an attempt.

Built from the job's spec and the chosen candidate: the worker's command and
environment (:func:`spothop.jobs.launcher.bootstrap`), the root volume and
machine image the spec asks for (``resources.disk_size_gib``, ``disk_tier``,
``image_id``), the attempt's market,
the reserved pool it launches into, a grouped task's shape, and the tags
that let an instance whose launch never returned be found by its token.
"""

from __future__ import annotations

import ipaddress
import logging
import urllib.parse

from spothop.errors import InvalidRequest
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
from spothop.jobs.records import AttemptRecord
from spothop.jobs.spec import JobKind, JobSpec
from spothop.providers.base import LaunchRequest
from spothop.providers.extensions import runs_nothing, shares_host_network
from spothop.scheduler.placement import Candidate

log = logging.getLogger(__name__)


class LaunchRequests(AgentTokens):
    """Builds each attempt's launch request (module docstring)."""

    def _request(
        self,
        spec: JobSpec,
        job_id: str,
        attempt: AttemptRecord,
        candidate: Candidate,
        code_sha256: str | None = None,
        mounts_json: str | None = None,
    ) -> LaunchRequest:
        provider = self.providers.get(attempt.provider)
        refusal = unreachable_control_plane(attempt.provider, provider, self.control_plane_url)
        if refusal is not None:
            raise refusal
        work = worker_command(spec, self.queue_url)
        instance_local = (self.control_plane_url or "").startswith(("http:", "https:"))
        boot = bootstrap(
            work,
            job_id=job_id,
            node=attempt.node,
            attempt_id=attempt.attempt_id,
            provider=attempt.provider,
            store_url=self.store_url,
            preemption_rate_per_h=finite_or_none(candidate.preemption_rate_per_h),
            home=self.home,
            group=self._group_env(job_id, attempt, candidate),
            region=attempt.region,
            wake_socket=self.wake_address,
            gpu=candidate.offering.gpu,
            control_plane=self.control_plane_url,
            agent_token=self._agent_token(job_id, attempt),
            zone=attempt.zone or None,
            gpu_count=candidate.offering.gpu_count,
            # An instance shares nothing with the controller but the network: no path of its
            # disk, its code from the control plane (the database plane's instances are the
            # unisolated local cloud's, which share the controller's disk).
            instance_local=instance_local,
            code_sha256=code_sha256,
            mounts_json=mounts_json,
        )
        return LaunchRequest(
            instance_type=attempt.instance_type,
            region=attempt.region,
            zone=attempt.zone or None,
            spot=str(attempt.market_kind) == "spot",
            reservation=self._reservation_for(attempt),
            image=spec.image,
            disk=spec.resources.disk,
            image_id=spec.resources.image_id_in(attempt.region),
            distribution=self.distribution if instance_local else None,
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

    def _group_env(
        self, job_id: str, attempt: AttemptRecord, candidate: Candidate
    ) -> GroupEnv | None:
        """A grouped task's shape (docs/multinode.md); None for other jobs. Node 0's address is
        not in it: no node has one before it boots; each node's agent waits for the group's
        rendezvous from the control plane (:class:`spothop.wire.group.Rendezvous`)."""
        if attempt.group_nnodes is None:
            return None
        gpus = candidate.offering.gpu_count
        return GroupEnv(
            nnodes=int(attempt.group_nnodes),
            nproc_per_node=gpus if gpus >= 1 else 1,
            generation=attempt.generation,
            master_port=group_port(job_id, attempt.generation),
        )


def unreachable_control_plane(
    name: str, provider: object, control_plane_url: str | None
) -> InvalidRequest | None:
    """Why the instances of ``provider`` could not reach the control plane they would be given,
    or None when they can: refused before anything is paid for (launch_refused, once per race).

    Given the store's URL (no ``control_plane_url``: the database plane), only a provider whose
    instances run nothing (:class:`~spothop.providers.extensions.RunsNothing`: the fake provider)
    may launch, since an instance that runs an agent shares no disk with the controller and could
    never open the store; an ``http(s)://`` URL on loopback
    (``127.0.0.1``, ``localhost``: what ``spothop controller run`` serves) only the same; any
    other control plane URL (a database's) none. The fix is a control plane the instances reach:
    ``spothop server run --public-url``."""
    url = control_plane_url or ""
    fix = "run `spothop server run --public-url URL` (a URL its instances can reach) and launch through it"
    if url.startswith(("http:", "https:")):
        if shares_host_network(provider) or not _loopback(url):
            return None
        why = f"the control plane {url} is on the controller's loopback"
    elif not url:
        if runs_nothing(provider):
            return None
        why = (
            "the embedded control plane is the controller's database, which an instance that "
            "shares nothing with the controller cannot open"
        )
    else:
        why = "the control plane URL is a database's, not an http(s):// server's"
    return InvalidRequest(
        name, "ControlPlaneUnreachable", f"its instances cannot reach it: {why}", fix
    )


def _loopback(url: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host in ("localhost", "", "0.0.0.0", "::"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.endswith(".localhost")


def finite_or_none(value: float | None) -> float | None:
    """``value`` when it is a finite number, else None (a NaN or infinite rate is not passed on)."""
    if value is None:
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def worker_command(spec: JobSpec, queue_url: str | None) -> WorkerCommand:
    """What the worker runs, from the job's spec: its command and environment, a batch job's
    queue and output, the checkpoint's URL, interval, save cost, replicas and compatibility."""
    checkpoint = spec.checkpoint
    compat = checkpoint.compatibility if checkpoint is not None else None
    return WorkerCommand(
        run=spec.run or "true",
        setup=spec.setup,
        workdir=spec.workdir,
        envs=dict(spec.envs),
        secret_names=tuple(spec.secrets),
        checkpoint_url=None if checkpoint is None else str(checkpoint.url),
        queue_url=queue_url if spec.kind is JobKind.BATCH else None,
        output_url=None if spec.batch is None else str(spec.batch.output),
        checkpoint_interval_s=None if checkpoint is None else checkpoint.interval_s,
        checkpoint_save_cost_s=None if checkpoint is None else checkpoint.save_cost_s,
        checkpoint_compat=None if compat is None else compat.model_dump(),
        checkpoint_replicas={} if checkpoint is None else dict(checkpoint.replicas),
    )
