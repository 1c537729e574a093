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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from spothop.observe.ledger_record import LedgerRecord


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


@dataclass(frozen=True)
class Reconciliation:
    """The ledger against the providers' bills: matched lines, and those one side cannot price."""

    lines: tuple[ReconcileLine, ...] = field(default_factory=tuple)

    @property
    def matched(self) -> tuple[ReconcileLine, ...]:
        return tuple(line for line in self.lines if line.difference_microusd is not None)

    @property
    def unmatched(self) -> tuple[ReconcileLine, ...]:
        """Lines without a figure on one side (a missing price, a cloud that did not say)."""
        return tuple(line for line in self.lines if line.difference_microusd is None)

    @property
    def ledger_microusd(self) -> int:
        return sum(line.ledger_microusd or 0 for line in self.matched)

    @property
    def provider_microusd(self) -> int:
        return sum(line.provider_microusd or 0 for line in self.matched)

    @property
    def difference_microusd(self) -> int:
        """Provider − ledger over the matched lines (0: the books agree)."""
        return sum(line.difference_microusd or 0 for line in self.matched)

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
            "lines": [line.to_dict() for line in self.lines],
        }


def reconcile(records: Iterable[LedgerRecord]) -> Reconciliation:
    """Each record's charge beside the provider's own (see :class:`Reconciliation`).

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
        )
    )


def _never_billed(record: LedgerRecord) -> bool:
    return record.instance_id is None and record.cost_microusd == 0
