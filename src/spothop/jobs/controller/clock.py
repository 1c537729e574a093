"""The one clock of attempt times: the provider's, since it is what bills.

Every attempt time the job store keeps (``launched_unix_s``, ``running_unix_s``,
``noticed_unix_s``, ``ended_unix_s``) is unix seconds of the attempt's
provider's clock, so that ``(ended − running) × price`` is what the cloud bills.
A real cloud's clock is the wall; a simulated one (the local cloud at ``speed``
5) runs faster. A provider that keeps a clock of its own has the
:class:`~spothop.providers.extensions.ClockKeeper` ability (the local cloud,
``FakeProvider``, an adapter given a clock); every other bills by the wall. Times the cloud reports about an instance (``running_at``,
``notice_time``, ``ended_at``) are already on that clock and are kept as they
are; a time the controller only observed (an agent event, a pass) is stamped
with :func:`provider_now` when it is written, which is late by at most one
pass. Job and event times stay on the store's (wall) clock.
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from typing import Any

from spothop.jobs.lifecycle import AttemptState
from spothop.providers.base import Provider
from spothop.providers.extensions import ClockKeeper

# The time column an attempt state sets (the store's own stamp uses the wall: never rely on it).
STAMPS = {
    AttemptState.RUNNING: "running_unix_s",
    AttemptState.NOTICED: "noticed_unix_s",
    AttemptState.ENDED: "ended_unix_s",
}


def provider_now(provider: Provider | None) -> float:
    """Now on ``provider``'s clock (the wall when it keeps none, or is None)."""
    if isinstance(provider, ClockKeeper):
        try:
            return float(provider.clock.now())
        except Exception:  # a clock that cannot be read: the wall, as a real cloud bills
            return time.time()
    return time.time()


def stamp(fields: MutableMapping[str, Any], provider: Provider | None) -> MutableMapping[str, Any]:
    """Give a state change in ``fields`` (the store's attempt columns) its time column on the
    provider's clock, unless set."""
    state = fields.get("state")
    column = STAMPS.get(AttemptState(state)) if state is not None else None
    if column is not None and fields.get(column) is None:
        fields[column] = provider_now(provider)
    return fields
