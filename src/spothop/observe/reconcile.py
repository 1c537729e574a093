"""The ledger against the cloud's bill: each attempt's charge beside the provider's own.

:func:`reconcile` lines up the stored ledger records
(:class:`~spothop.observe.ledger_record.LedgerRecord`), spothop's own charge
from the running time, the billing rule and the rates in force, with the
provider's figure kept beside each (``Instance.cost_microusd``), never used to
compute it, so the two sums are independent:

- a :class:`ReconcileLine` per attempt, its difference provider − ledger, None
  when one side has no figure (a missing price, a cloud that did not say);
- :class:`Reconciliation` sums the matched lines (0: the books agree) and lists
  those that differ and those one side cannot price;
- an attempt that never had an instance and that the ledger charges nothing has
  no bill on either side and is left out.

A provider's figure is a bill only where the provider says it is one
(``Capabilities.bill_source``: the local cloud's billing records, the fake
provider's own records, a bill an adapter was given). Elsewhere (a cloud whose
bill API spothop does not call) the adapter's figure is its own estimate from
the price it launched at, the ledger's source too: comparing the two would
compare spothop with itself. So reconciliation is per provider
(:class:`ProviderReconciliation`): "reconciled against <source>: Δ N µUSD", or
"estimated, not reconciled", and only the reconciled providers' lines count in
:class:`Reconciliation`'s sums.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spothop.observe.ledger_record import LedgerRecord

if TYPE_CHECKING:
    from spothop.providers.base import Provider

NOT_RECONCILED = "estimated, not reconciled"

BillSources = Mapping[str, str | None]  # provider name → its bill's source (None: no bill)


@dataclass(frozen=True)
class ReconcileLine:
    """One attempt: the ledger's charge, the provider's, and their difference (provider − ledger)."""

    attempt_id: str
    instance_id: str | None
    provider: str
    ledger_microusd: int | None
    provider_microusd: int | None

    @property
    def difference_microusd(self) -> int | None:
        if self.ledger_microusd is None or self.provider_microusd is None:
            return None
        return self.provider_microusd - self.ledger_microusd

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt_id": self.attempt_id,
            "instance_id": self.instance_id,
            "provider": self.provider,
            "ledger_microusd": self.ledger_microusd,
            "provider_microusd": self.provider_microusd,
            "difference_microusd": self.difference_microusd,
        }


def _totals(lines: tuple[ReconcileLine, ...]) -> tuple[int, int, int]:
    """Ledger, provider and provider − ledger over the lines with both figures."""
    matched = [line for line in lines if line.difference_microusd is not None]
    return (
        sum(line.ledger_microusd or 0 for line in matched),
        sum(line.provider_microusd or 0 for line in matched),
        sum(line.difference_microusd or 0 for line in matched),
    )


@dataclass(frozen=True)
class ProviderReconciliation:
    """One provider's lines against its bill (``source``), or its estimate, not reconciled (None)."""

    provider: str
    source: str | None
    lines: tuple[ReconcileLine, ...]

    @property
    def reconciled(self) -> bool:
        return self.source is not None

    @property
    def difference_microusd(self) -> int | None:
        """Bill − ledger over the matched lines; None where there is no bill."""
        return _totals(self.lines)[2] if self.reconciled else None

    @property
    def unmatched(self) -> tuple[ReconcileLine, ...]:
        return tuple(line for line in self.lines if line.difference_microusd is None)

    @property
    def summary(self) -> str:
        """``reconciled against <source>: Δ N µUSD`` (and the lines without a figure), or
        :data:`NOT_RECONCILED`."""
        if self.source is None:
            return NOT_RECONCILED
        missing = len(self.unmatched)
        tail = f", {missing} without a figure on one side" if missing else ""
        return f"reconciled against {self.source}: Δ {self.difference_microusd} µUSD{tail}"

    def to_dict(self) -> dict[str, Any]:
        ledger, provider, _ = _totals(self.lines)
        return {
            "provider": self.provider,
            "source": self.source,
            "reconciled": self.reconciled,
            "ledger_microusd": ledger,
            "provider_microusd": provider if self.reconciled else None,
            "difference_microusd": self.difference_microusd,
            "unmatched": [line.attempt_id for line in self.unmatched] if self.reconciled else [],
            "summary": self.summary,
        }


@dataclass(frozen=True)
class Reconciliation:
    """The ledger against the providers' bills (module docstring): only the lines of providers
    with a bill (``sources``) count in the sums; the others are estimates, listed per provider."""

    lines: tuple[ReconcileLine, ...] = field(default_factory=tuple)
    sources: BillSources = field(default_factory=dict)

    @property
    def by_provider(self) -> tuple[ProviderReconciliation, ...]:
        names = sorted({line.provider for line in self.lines})
        return tuple(
            ProviderReconciliation(
                name,
                self.sources.get(name),
                tuple(line for line in self.lines if line.provider == name),
            )
            for name in names
        )

    @property
    def billed(self) -> tuple[ReconcileLine, ...]:
        """The lines of providers whose figure is a bill."""
        return tuple(line for line in self.lines if self.sources.get(line.provider) is not None)

    @property
    def matched(self) -> tuple[ReconcileLine, ...]:
        return tuple(line for line in self.billed if line.difference_microusd is not None)

    @property
    def unmatched(self) -> tuple[ReconcileLine, ...]:
        """Billed providers' lines without a figure on one side (a missing price, a cloud that
        did not say)."""
        return tuple(line for line in self.billed if line.difference_microusd is None)

    @property
    def ledger_microusd(self) -> int:
        return _totals(self.billed)[0]

    @property
    def provider_microusd(self) -> int:
        return _totals(self.billed)[1]

    @property
    def difference_microusd(self) -> int:
        """Bill − ledger over the matched lines (0: the books agree)."""
        return _totals(self.billed)[2]

    @property
    def differing(self) -> tuple[ReconcileLine, ...]:
        return tuple(line for line in self.matched if line.difference_microusd != 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ledger_microusd": self.ledger_microusd,
            "provider_microusd": self.provider_microusd,
            "difference_microusd": self.difference_microusd,
            "differing": [line.to_dict() for line in self.differing],
            "unmatched": [line.to_dict() for line in self.unmatched],
            "by_provider": [p.to_dict() for p in self.by_provider],
            "lines": [line.to_dict() for line in self.lines],
        }


def bill_sources(providers: Mapping[str, Provider]) -> dict[str, str | None]:
    """Each provider's bill source (``Capabilities.bill_source``; None: no bill, an estimate)."""
    return {name: p.capabilities.bill_source for name, p in providers.items()}


def reconcile(records: Iterable[LedgerRecord], sources: BillSources) -> Reconciliation:
    """Each record's charge beside the provider's own (see :class:`Reconciliation`); ``sources``
    names each provider's bill (:func:`bill_sources`; absent or None: no bill, not reconciled).

    An attempt that never had an instance (a launch the cloud refused, or one cut
    before the cloud answered) and that the ledger charges nothing has no bill to
    match on either side: it is left out, not listed as unmatched. One that the
    ledger charges without an instance is kept: that is a discrepancy to show.
    """
    return Reconciliation(
        tuple(
            ReconcileLine(
                r.attempt_id, r.instance_id, r.provider, r.cost_microusd, r.provider_cost_microusd
            )
            for r in records
            if not _never_billed(r)
        ),
        dict(sources),
    )


def _never_billed(record: LedgerRecord) -> bool:
    return record.instance_id is None and record.cost_microusd == 0
