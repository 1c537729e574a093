"""What the emergency protocol hands off: lease release, upload, interruption records.

- :class:`LeaseReleaser` — ``release_worker(worker_id) -> int``: put every
  shard leased to the worker back in the queue, return how many. The agent
  passes the worker's id in ``SPOTHOP_WORKER_ID``; the worker claims under it.
- ``Upload`` — ``() -> None``: push what is still local (the emergency
  checkpoint) to durable storage.
- :class:`InterruptionRecorder` — ``record(report)``. :class:`StoreInterruptions`
  calls :func:`spothop.market.interruptions.record_interruption` (imported
  lazily: it brings SQLAlchemy, which the agent does not load until it needs it).

Hooks given on the command line are ``module:attribute`` specs naming a
zero-argument factory (:func:`load_hook`); that is how a deployment plugs in
its queue adapter without the agent importing the queue at start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from spothop.agent.errors import AgentConfigError

Upload = Callable[[], None]


class LeaseReleaser(Protocol):
    def release_worker(self, worker_id: str) -> int:
        """Requeue every shard leased to ``worker_id``; return how many. May raise; the agent logs it."""


@dataclass(frozen=True)
class InterruptionReport:
    """One preemption as the agent handled it. Times are unix seconds; steps are wall seconds each."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    instance_id: str
    worker_id: str
    protocol: str
    notice_kind: str
    cause: str
    notice_time: float
    deadline: float | None
    lead_time_s: float | None
    budget_s: float
    saved: str  # "saved" (the worker said so), "exited" (it ended in time), "nothing" (budget ran out)
    saved_detail: dict[str, Any] | None
    uploaded: bool | None  # None: no upload hook
    leases_released: int | None  # None: no releaser, or it failed
    steps_s: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class InterruptionRecorder(Protocol):
    def record(self, report: InterruptionReport) -> None:
        """Store the report. May raise; the agent logs it."""


class StoreInterruptions:
    """Records through ``spothop.market.interruptions.record_interruption`` (the store's preemption history)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def record(self, report: InterruptionReport) -> None:
        from spothop.market.interruptions import Interruption, record_interruption
        from spothop.resources.market_id import MarketId

        market = MarketId(report.cloud, report.region, report.zone, report.instance_type)
        record_interruption(Interruption(
            market, report.cause, report.lead_time_s, report.notice_time,
            cause=f"{report.protocol}:{report.cause}", instance_id=report.instance_id,
        ), url=self.url)


def load_hook(spec: str) -> Any:
    """``module:attribute`` → the attribute called with no arguments (a factory's product).

    AgentConfigError names the spec when the module or attribute is missing.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AgentConfigError(f"a hook is given as module:attribute, e.g. mypkg.hooks:make_releaser; got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentConfigError(f"hook {spec!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise AgentConfigError(f"hook {spec!r}: {module_name} has no callable {attribute!r}")
    return factory()
