"""``spothop``: the project's own online deadline policy (placeholder: Uniform Progress)."""

from __future__ import annotations

from spothop.scheduler.policies.base import register
from spothop.scheduler.policies.uniform_progress import UniformProgressPolicy


@register
class SpothopPolicy(UniformProgressPolicy):
    """Placeholder."""

    name = "spothop"
