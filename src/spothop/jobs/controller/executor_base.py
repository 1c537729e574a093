"""What every part of the executor shares: its attributes, and one call that only logs a failure.

The :class:`~.executor.Executor` is put together from one mixin per kind of
step (:mod:`.agent_tokens`, :mod:`.launch_request`, :mod:`.launch`); each
reads and writes the attributes declared here, which ``Executor.__init__`` sets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from spothop.jobs.store import JobStore
from spothop.providers.base import Distribution, Provider

if TYPE_CHECKING:
    from spothop.state.tokens import TokenStore

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
# What a step reports about itself (logged, and kept in the pass's reports as JSON).
Detail = Mapping[str, object]


class ExecutorBase:
    """The executor's state, as its parts read it (set by ``Executor.__init__``)."""

    store: JobStore
    providers: Mapping[str, Provider]
    store_url: str
    queue_url: str | None
    home: Path | None
    wake: Callable[[], object]
    wake_address: str | None
    control_plane_url: str | None
    distribution: Distribution | None
    parallel_k: int
    race_timeout_s: float
    step_timeout_s: float
    token_grace_s: float
    instance_jobs: dict[str, str | None]
    unheld_instances: frozenset[str]
    outcomes: list[LaunchOutcome]
    _tokens: TokenStore | None
    _gone_since: dict[tuple[str, str], float]
    _pool: ThreadPoolExecutor
    _launch_pool: ThreadPoolExecutor
    _lock: threading.Lock
    _inflight: dict[tuple[str, int], LaunchOutcome]

    @staticmethod
    def _safely(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            log.warning("%s failed: %s: %s", getattr(fn, "__name__", fn), type(exc).__name__, exc)
            return None


@dataclass
class LaunchOutcome:
    """What one :class:`Launch` came to (for tests and benchmarks): the winner and each failure."""

    job_id: str
    node: int
    winner: str | None = None  # attempt id
    instance_id: str | None = None
    failures: list[tuple[str, str | None, str]] = field(default_factory=list)  # attempt, code, msg
    superseded: list[str] = field(default_factory=list)
    # Where (a provider, or a provider in a region: lifecycle.refused_where) → (code, message) of
    # the launch refused for good there (``launch_refused``, ``region_refused``).
    refused_by: dict[str, tuple[str, str]] = field(default_factory=dict)
    started_monotonic: float = field(default_factory=time.monotonic)
    ended_monotonic: float | None = None
