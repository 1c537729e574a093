"""Asking an instance for something: one ``agent_requests`` row (``checkpoint`` now, or ``stop``).

The controller decides to ask (``RequestCheckpoint``, ``RequestStop``) and its
executor writes the row here, in the state layer, below both the controller and
the control plane; the control plane serves the rows to the instance's agent
(``GET /v1/agents/{id}/requests``) and records their acknowledgement. A kind
outside :data:`~spothop.wire.contract.REQUEST_KINDS` is a
:class:`~spothop.wire.errors.ControlPlaneError` naming the known ones.
"""

from __future__ import annotations

import time

from sqlalchemy import Engine

from spothop.state.agent_tables import agent_requests
from spothop.wire.contract import REQUEST_KINDS
from spothop.wire.errors import ControlPlaneError


def add_request(
    engine: Engine,
    instance_id: str,
    kind: str,
    reason: str = "",
    deadline_unix_s: float | None = None,
) -> str:
    """Ask ``instance_id`` for ``kind`` (``checkpoint`` or ``stop``): what the controller will call; the id."""
    from spothop.state import ensure_schema

    if kind not in REQUEST_KINDS:
        raise ControlPlaneError(f"unknown request kind {kind!r}; known: {', '.join(REQUEST_KINDS)}")
    ensure_schema(engine)
    with engine.begin() as conn:
        result = conn.execute(
            agent_requests.insert().values(
                instance_id=instance_id,
                kind=kind,
                reason=reason,
                created_unix_s=time.time(),
                deadline_unix_s=deadline_unix_s,
            )
        )
    key = result.inserted_primary_key
    assert key is not None  # an INSERT of one row always has its key
    return str(key[0])
