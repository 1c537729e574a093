"""``decide(snapshot) -> actions``: the controller's one decision, pure and deterministic.

See docs/controller.md for the rules, in the order they apply.
"""

from __future__ import annotations

from spothop.jobs.controller.actions import Action
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.snapshot import Snapshot


def decide(snapshot: Snapshot, config: ControllerConfig | None = None) -> list[Action]:
    """The actions that move the world in ``snapshot`` towards what its jobs want.

    Pure: no I/O, no clock (time is ``snapshot.now``), no randomness; the same
    snapshot and config always give the same list, in the same order.
    """
    del snapshot, config
    raise NotImplementedError("decide's rules land next (g-decide)")
