"""Deadline policies: small registered classes that decide SPOT (which zone), ON_DEMAND or NONE.

``on-demand``, ``greedy`` and ``uniform-progress`` are SIMULATION.md's
baselines; ``optimal`` is the offline oracle (the floor); ``spothop`` is the
project's own online policy, the default for jobs with a deadline;
``spothop-proactive`` adds a make-before-break move away from a zone whose risk rises. See
:mod:`spothop.scheduler.policies.base` for the state a policy sees and the
contract of ``decide``.
"""

from __future__ import annotations

from spothop.scheduler.policies import (
    greedy,
    on_demand,
    optimal,
    proactive,
    spothop,
    uniform_progress,
)
from spothop.scheduler.policies.base import (
    IDLE,
    ON_DEMAND,
    DeadlineState,
    Decision,
    Kind,
    Policy,
    ZoneView,
    advise,
    apply_safety_rule,
    get_policy,
    policy_class,
    policy_names,
    register,
)

DEFAULT_DEADLINE_POLICY = spothop.SpothopPolicy.name

__all__ = [
    "DEFAULT_DEADLINE_POLICY",
    "IDLE",
    "ON_DEMAND",
    "DeadlineState",
    "Decision",
    "Kind",
    "Policy",
    "ZoneView",
    "advise",
    "apply_safety_rule",
    "get_policy",
    "greedy",
    "on_demand",
    "optimal",
    "policy_class",
    "policy_names",
    "proactive",
    "register",
    "spothop",
    "uniform_progress",
]
