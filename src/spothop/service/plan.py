"""Where a job would run, and why: ``spothop plan FILE`` and ``POST /v1/plans``.

:func:`plan_request` takes the command's own options (:class:`PlanRequest`) and answers a
:class:`PlanResult`: the ranking by expected cost of useful work, the spread chosen for the
job's nodes, and what was excluded. The helpers that turn options into the ranking's inputs
(:func:`plan_providers`, :func:`data_location`, :func:`reliability_history`) serve
``spothop advise`` too. Nothing is launched, and spothop's store is only read.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec
    from spothop.market.reliability import ReliabilityBook
    from spothop.providers.base import Provider
    from spothop.scheduler.market_view import MarketKind
    from spothop.scheduler.placement import Candidate, Ranking
    from spothop.scheduler.requirements import Requirements

DEFAULT_LIMIT = 10

Warn = Callable[[str], None]
"""Where a plan says what it left out (a provider that could not be made): one line each."""


def _to_stderr(message: str) -> None:
    sys.stderr.write(message + "\n")


@dataclass(frozen=True)
class PlanRequest:
    """What ``plan`` is asked: the job, the providers to ask (none: the job's ``providers.allow``,
    else the controller's own), how many candidates to show, ``data_gib`` of inputs at
    ``data_at`` (PROVIDER/REGION) to move, the useful hours the placement carries (none: the
    scheduler's default) and the GPU a checkpoint was made on (rank as for moving it)."""

    spec: JobSpec
    provider_names: tuple[str, ...] = ()
    limit: int = DEFAULT_LIMIT
    data_gib: float = 0.0
    data_at: str | None = None
    horizon_h: float | None = None
    checkpoint_gpu: str | None = None


@dataclass(frozen=True)
class PlanResult:
    """The answer of ``plan FILE --json`` and ``POST /v1/plans``: the best ``limit`` of the
    ranking, the spread chosen for the job's ``node_count`` nodes, and what was excluded (and,
    for a checkpoint's GPU, refused by the compatibility matrix)."""

    job: str
    now: float
    requirements: Requirements
    market_kinds: tuple[MarketKind, ...]
    ranking: Ranking
    limit: int
    spread: tuple[Candidate, ...]
    node_count: int
    min_zones: int
    min_instance_types: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "now": self.now,
            "requirements": self.requirements.to_dict(),
            "market_kinds": [k.value for k in self.market_kinds],
            **self.ranking.to_dict(self.limit),
            "spread": [c.to_dict() for c in self.spread],
            "node_count": self.node_count,
            "min_zones": self.min_zones,
            "min_instance_types": self.min_instance_types,
        }


def plan_request(request: PlanRequest, warn: Warn = _to_stderr) -> PlanResult:
    """:func:`plan` from the command's own options (``--provider`` names, ``--data-at
    PROVIDER/REGION`` as text): what ``plan`` runs and ``POST /v1/plans`` answers. A provider
    that cannot be made is left out, said through ``warn``. A spec ``launch`` would refuse
    however the markets stand (:func:`~spothop.service.launch.check_spec`) is refused here too,
    and so is a ``budget_usd`` below the cheapest first launch, as ``launch`` refuses it."""
    from spothop.service.launch import check_budget, check_spec

    check_spec(request.spec)
    result = plan(
        request.spec,
        plan_providers(request.spec, list(request.provider_names), warn),
        limit=request.limit,
        data_gib=request.data_gib,
        data_at=data_location(request.data_at, request.data_gib),
        horizon_h=request.horizon_h,
        history=reliability_history,
        checkpoint_gpu=request.checkpoint_gpu,
        warn=warn,
    )
    check_budget(request.spec, [c.price_usd_per_hour for c in result.ranking.candidates[:64]])
    return result


def plan(
    spec: JobSpec,
    providers: Sequence[Provider],
    *,
    limit: int,
    data_gib: float = 0.0,
    data_at: tuple[str, str] | None = None,
    horizon_h: float | None = None,
    history: Callable[[float], ReliabilityBook | None] | None = None,
    checkpoint_gpu: str | None = None,
    warn: Warn | None = None,
) -> PlanResult:
    """The ranking of ``providers``' offerings for ``spec`` (best ``limit`` candidates shown),
    the spread chosen for the job's nodes, and what was excluded.
    :class:`~spothop.scheduler.errors.NoCandidates` when no offering meets the spec.
    ``checkpoint_gpu``: rank as for a checkpoint made on that GPU (the compatibility matrix's
    refusals under ``refused``). ``warn``: where a spot price that cannot be true is said (it is
    taken as missing: ``scheduler.price_checks``)."""
    from spothop.jobs.controller.observe import reserved_pools
    from spothop.jobs.controller.place import plan_inputs
    from spothop.scheduler.market_view import gather_market_view
    from spothop.scheduler.placement import rank
    from spothop.scheduler.spread import spread

    compat = spec.checkpoint.compatibility if spec.checkpoint is not None else None
    need = compat.need() if compat is not None else None  # --checkpoint-gpu applies it anyway
    req = spec.requirements().moving_from(checkpoint_gpu, need)
    profile, kinds, pools = plan_inputs(spec, reserved_pools({p.name: p for p in providers}))
    changes: dict[str, Any] = {"data_gib": data_gib, "data_location": data_at}
    if horizon_h is not None:
        changes["horizon_h"] = horizon_h
    profile = replace(profile, **changes)
    view = gather_market_view(list(providers), history, on_note=warn)
    ranking = rank(view, req, profile, kinds, reserved=pools)
    ranking.raise_if_empty()
    chosen = spread(
        ranking.candidates,
        spec.node_count,
        spec.spread.min_zones,
        spec.spread.min_instance_types,
    )
    return PlanResult(
        job=spec.name,
        now=view.now,
        requirements=req,
        market_kinds=tuple(kinds),
        ranking=ranking,
        limit=limit,
        spread=tuple(chosen),
        node_count=spec.node_count,
        min_zones=spec.spread.min_zones,
        min_instance_types=spec.spread.min_instance_types,
    )


def data_location(value: str | None, data_gib: float) -> tuple[str, str] | None:
    """``--data-at PROVIDER/REGION`` as (provider, region); None when not given.
    :class:`~spothop.errors.ConfigError` for a malformed one, or for ``data_gib`` without it."""
    from spothop.errors import ConfigError

    if value is None:
        if data_gib > 0:
            raise ConfigError("--data-gib needs --data-at PROVIDER/REGION: where the data is now")
        return None
    provider, _, region = value.partition("/")
    if not provider.strip() or not region.strip() or "/" in region:
        raise ConfigError(
            f"--data-at is PROVIDER/REGION (as `spothop offers` names them), got {value!r}"
        )
    return provider.strip(), region.strip()


def plan_providers(
    spec: JobSpec, names: Sequence[str] | None, warn: Warn = _to_stderr
) -> list[Provider]:
    """The providers to ask: ``names`` (``--provider``), else the job's ``providers.allow``,
    else the controller's own (every cloud of the local world plus ``$SPOTHOP_PROVIDERS``).

    A provider that cannot be made (SDK missing, no credentials) is left out with its
    reason said through ``warn``, as the controller leaves it out; a job that only it could
    carry is then told no offering satisfies it.
    """
    from spothop.errors import SpothopError, StoreUnwritable
    from spothop.providers.registry import default_providers, get_provider

    wanted = tuple(n for n in (names or spec.providers.allow) if n not in spec.providers.deny)
    if not wanted:
        made = default_providers()
        return [p for name, p in made.items() if name not in spec.providers.deny]
    providers: list[Provider] = []
    for name in dict.fromkeys(wanted):
        try:
            providers.append(get_provider(name))
        except StoreUnwritable:
            raise  # this machine's disk, not the provider: the launch could store nothing
        except SpothopError as exc:
            warn(f"provider {name} left out: {exc}")
    return providers


def reliability_history(now: float) -> ReliabilityBook | None:
    """The interruption history's book at ``now``, or None (priors) when there is no store to read.

    A home without a database has no history: it is not created just to be read.
    """
    from spothop.db import DATABASE_URL_ENV
    from spothop.errors import SpothopError
    from spothop.market.interruptions import reliability_from_store
    from spothop.paths import spothop_home

    if not os.environ.get(DATABASE_URL_ENV) and not (spothop_home() / "spothop.db").exists():
        return None
    try:
        return reliability_from_store(now)
    except SpothopError:
        return None
