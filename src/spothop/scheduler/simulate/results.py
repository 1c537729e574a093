"""Many runs summed up: the averages ``spothop simulate`` and the bench print."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spothop.scheduler.simulate.model import RunResult


@dataclass(frozen=True)
class Summary:
    """Averages over runs of one policy; ``runs_per_s`` is the simulator's speed, if timed."""

    policy: str
    runs: tuple[RunResult, ...]
    elapsed_s: float = 0.0

    @property
    def average_cost(self) -> float:
        return sum(r.cost_usd for r in self.runs) / len(self.runs) if self.runs else 0.0

    @property
    def deadlines_met_fraction(self) -> float:
        return sum(r.deadline_met for r in self.runs) / len(self.runs) if self.runs else 1.0

    def _mean(self, values: Sequence[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    @property
    def runs_per_s(self) -> float:
        return len(self.runs) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "average_cost": round(self.average_cost, 6),
            "deadlines_met_fraction": self.deadlines_met_fraction,
            "average_finish_hours": round(self._mean([r.finish_h for r in self.runs]), 6),
            "average_preemptions": round(self._mean([r.preemptions for r in self.runs]), 6),
            "average_spot_hours": round(self._mean([r.spot_hours for r in self.runs]), 6),
            "average_on_demand_hours": round(self._mean([r.on_demand_hours for r in self.runs]), 6),
            "runs_per_second": round(self.runs_per_s, 3),
            "runs": [r.to_dict() for r in self.runs],
        }
