"""An instance's bill as lines: running time under a billing rule, priced on a step function.

The one rule both sides of the books follow — the local cloud's instance host
when it bills, and spothop's ledger when it prices an attempt from the cloud's
own price history — so that the two agree to the micro-dollar:

1. **Steps.** The price in force is a step function of the provider's clock:
   ``[(t0, p0), (t1, p1), …]``, each price holding from its time until the
   next. A spot instance is billed at its market's steps, except that a
   :class:`~spothop.providers.base.BillingRule` protection period
   (``price_fixed_s``) holds the price at launch until ``launched_at +
   price_fixed_s`` (:func:`billed_price_steps`); on-demand and reserved
   instances have one step, their rate.
2. **Lines.** Each step covers ``[start, end)`` of running time (clipped to
   when the instance ran). Its billed seconds are ``billed(end − running_at)
   − billed(start − running_at)`` under the rule, so the minimum and the
   increments fall where the whole run's would: the lines' seconds add up to
   ``rule.billed_seconds(run)``.
3. **Money.** Each line costs ``round(price × billed_s / 3600 × 10⁶)`` integer
   micro-dollars (:func:`microusd`); the instance's cost is the sum of its
   lines. Rounding per line is the cloud's way (a bill's line items are each
   in whole units) and makes the sum independent of how often it was summed.

A provider that can say what its spot market charged over time implements
:class:`SpotPriceHistory` (AWS's ``describe-spot-price-history`` is that
API); the ledger then prices an attempt from it rather than from the prices
the controller happened to observe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from spothop.providers.base import MICROUSD_PER_USD, BillingRule

SECONDS_PER_HOUR = 3600.0

Steps = Sequence[tuple[float, float]]  # (provider-clock unix s, USD per hour), oldest first
History = Callable[[float, float], Steps]  # (start, end) → the steps over start … end


def microusd(price_usd_per_hour: float, seconds: float) -> int:
    """``seconds`` at ``price_usd_per_hour``, in integer micro-dollars."""
    return round(price_usd_per_hour * seconds / SECONDS_PER_HOUR * MICROUSD_PER_USD)


@dataclass(frozen=True)
class BillingLine:
    """``start_s … end_s`` of running time at one price: billed seconds and micro-dollars."""

    start_s: float
    end_s: float
    price_usd_per_hour: float
    billed_s: float
    cost_microusd: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def billing_line(
    rule: BillingRule, running_at: float, start: float, end: float, price_usd_per_hour: float
) -> BillingLine:
    """One line of the bill (rule 2 and 3 of the module docstring)."""
    billed = rule.billed_seconds(end - running_at) - rule.billed_seconds(start - running_at)
    return BillingLine(start, end, price_usd_per_hour, billed, microusd(price_usd_per_hour, billed))


def billing_lines(
    rule: BillingRule, running_at: float, end: float, steps: Steps, since: float | None = None
) -> list[BillingLine]:
    """The bill of a run from ``running_at`` to ``end`` at ``steps`` (``steps[0]`` in force at
    ``running_at``; later ones at their times): one line per step, in time order. ``since``: only
    the lines from then on (``steps[0]`` in force then), the rest of a bill already written."""
    if not steps:
        raise ValueError("billing_lines needs the price in force at running_at")
    first = running_at if since is None else since
    lines = []
    for i, (t, price) in enumerate(steps):
        start = max(t, first) if i else first
        stop = min(steps[i + 1][0], end) if i + 1 < len(steps) else end
        if stop > start or (i == 0 and stop == start):
            lines.append(billing_line(rule, running_at, start, max(stop, start), price))
    return lines


def billed_price_steps(
    rule: BillingRule, launched_at: float, start: float, end: float, history: History
) -> list[tuple[float, float]]:
    """The steps a spot instance launched at ``launched_at`` is billed at over ``start … end``:
    its market's (``history``), except that the rule's protection period holds the price at
    launch until ``launched_at + price_fixed_s``, where the market's price takes over."""
    fixed_until = launched_at + rule.price_fixed_s
    if rule.price_fixed_s <= 0 or start >= fixed_until:
        return list(history(start, end))
    steps = [(start, history(launched_at, launched_at)[0][1])]
    if end >= fixed_until:
        steps.extend(history(fixed_until, end))
    return steps


class SpotPriceHistory(ABC):
    """A provider that says what its spot markets charged over time, as its bills apply it."""

    @abstractmethod
    def spot_price_steps(
        self, region: str, zone: str | None, instance_type: str, start_s: float, end_s: float
    ) -> list[tuple[float, float]]:
        """The market's spot price over ``start_s … end_s`` (provider-clock unix seconds) as a
        step function: ``(start_s, price in force)``, then ``(t, price)`` for each change in
        ``(start_s, end_s]``. A change's time depends only on the market, so adjoining spans
        list the changes of their union. Unknown market: :class:`~spothop.errors.ProviderError`."""
