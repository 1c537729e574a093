"""Platforms with no notice endpoint (a Kubernetes pod, a cloud without one): SIGTERM is the notice.

A pod gets SIGTERM and then ``terminationGracePeriodSeconds`` (30 s by
default, kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle) before
SIGKILL. The agent turns its own SIGTERM into a final notice with that grace
as lead time (``--sigterm-grace-s``). The agent listens for SIGTERM on every
platform; this watcher is the one used where there is nothing to poll.
"""

from __future__ import annotations

from typing import ClassVar

from spothop.agent.model import Identity, Notice, final_notice
from spothop.agent.notices.base import Watcher

KUBERNETES_GRACE_S = 30.0  # terminationGracePeriodSeconds default


class SigtermWatcher(Watcher):
    """Nothing to poll: every poll is empty and the self-check passes (SIGTERM needs no endpoint)."""

    protocol: ClassVar[str] = "sigterm"
    documented_lead_s: ClassVar[float | None] = KUBERNETES_GRACE_S

    def poll(self) -> list[Notice]:
        return []

    def self_check(self) -> Identity:
        return Identity()


def sigterm_notice(seen_at: float, grace_s: float) -> Notice:
    """The final notice a SIGTERM stands for: the deadline is ``grace_s`` from now."""
    return final_notice(
        "sigterm", "sigterm", seen_at=seen_at, deadline=seen_at + grace_s, documented_lead_s=grace_s
    )
