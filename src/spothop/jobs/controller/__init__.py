"""The controller: observe a snapshot, ``decide`` the actions (pure), execute them.

``decide`` and its types live here; the observer, the executor, the loop and
the daemon beside them (``observe``, ``executor``, ``loop``, ``daemon``).
"""

from spothop.jobs.controller.actions import (
    ACTION_TYPES,
    Action,
    CoolDown,
    EndAttempt,
    EnqueueShards,
    ForceOnDemand,
    Launch,
    PublishOutputs,
    RequestCheckpoint,
    RequestStop,
    SetJobState,
    Terminate,
    UpdateAttempt,
    Waiting,
)
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.decide import decide
from spothop.jobs.controller.snapshot import (
    TAG_JOB,
    TAG_NODE,
    TAG_TOKEN,
    AttemptView,
    JobView,
    Snapshot,
)

__all__ = [
    "ACTION_TYPES",
    "TAG_JOB",
    "TAG_NODE",
    "TAG_TOKEN",
    "Action",
    "AttemptView",
    "ControllerConfig",
    "CoolDown",
    "EndAttempt",
    "EnqueueShards",
    "ForceOnDemand",
    "JobView",
    "Launch",
    "PublishOutputs",
    "RequestCheckpoint",
    "RequestStop",
    "SetJobState",
    "Snapshot",
    "Terminate",
    "UpdateAttempt",
    "Waiting",
    "decide",
]
