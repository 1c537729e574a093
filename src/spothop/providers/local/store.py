"""The local cloud's own records: its clock anchor, its instances, and every second it billed.

Like a real cloud's control plane, the local cloud keeps state that outlives
any one process: `spothop cloud launch` in one shell and `spothop cloud ls`
in another must agree. It lives in ``$SPOTHOP_HOME/localcloud/cloud.db``
(SQLite, WAL), written by the provider (launch, terminate, preempt requests)
and by each instance's host process (state, billing).

Money is kept in integer micro-dollars, as the ledger contract asks.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    inspect,
    select,
    update,
)

from spothop.db import make_engine
from spothop.paths import ensure_home, private_dir
from spothop.providers.billing import BillingLine

metadata = MetaData()

world_state = Table(
    "world_state",
    metadata,
    Column("key", String, primary_key=True),
    Column("value", Text, nullable=False),
)

instances = Table(
    "instances",
    metadata,
    Column("instance_id", String, primary_key=True),
    Column("cloud", String, nullable=False),
    Column("region", String, nullable=False),
    Column("zone", String),
    Column("instance_type", String, nullable=False),
    Column("spot", Boolean, nullable=False),
    Column("state", String, nullable=False),
    Column("launched_at", Float, nullable=False),
    Column("running_at", Float),
    Column("ended_at", Float),
    Column("end_reason", Text),
    Column("exit_code", Integer),
    Column("price_usd_per_hour", Float, nullable=False),
    Column("billed_seconds", Float, nullable=False, default=0.0),
    Column("cost_micro_usd", Integer, nullable=False, default=0),
    Column("notice_time", Float),
    Column("termination_time", Float),
    Column("metadata_url", String),
    Column("host_pid", Integer),
    Column("worker_pgid", Integer),
    Column("directory", String, nullable=False),
    Column("name", String),
    Column("tags", Text, nullable=False, default="{}"),
    Column("preempt_lead_s", Float),  # a request: give a notice with this lead time now
    Column(
        "preempt_advance_s", Float
    ),  # with it: an advance notice now, the final notice this much later
    Column("terminate_requested", Boolean, nullable=False, default=False),
    Column(
        "scheduled_events", Text
    ),  # JSON list of maintenance events (see .maintenance); NULL: none
    Column("reservation", String),  # the reserved pool it runs in; NULL: spot or on-demand
)
# The states of an instance that holds a reserved pool's slot (providers.base.InstanceState.is_alive).
_LIVE_STATES = ("pending", "running", "noticed")

billing = Table(
    "billing",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("instance_id", String, nullable=False, index=True),
    Column("start_s", Float, nullable=False),
    Column("end_s", Float, nullable=False),
    Column("price_usd_per_hour", Float, nullable=False),
    Column("cost_micro_usd", Integer, nullable=False),
)


def local_cloud_dir() -> Path:
    return ensure_home() / "localcloud"  # the home made private (0700) if this creates it


class CloudStore:
    """Typed access to the local cloud's tables."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or local_cloud_dir()
        private_dir(self.root)  # its instances' folders hold their jobs' envs
        self.engine: Engine = make_engine(f"sqlite:///{self.root / 'cloud.db'}")
        metadata.create_all(self.engine)
        _add_missing_columns(self.engine)

    @property
    def instances_dir(self) -> Path:
        return self.root / "instances"

    # -- world state ------------------------------------------------------

    def get_state(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            value: str | None = conn.execute(
                select(world_state.c.value).where(world_state.c.key == key)
            ).scalar()
            return value

    def get_states(self, keys: Collection[str]) -> dict[str, str | None]:
        """Each key's value (None: not stored), read in one statement: one snapshot of them all."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(world_state.c.key, world_state.c.value).where(
                    world_state.c.key.in_(sorted(keys))
                )
            ).all()
        stored = {str(key): value for key, value in rows}
        return {key: stored.get(key) for key in keys}

    def set_state_default(self, values: Mapping[str, str]) -> dict[str, str]:
        """Store each value unless one is already stored; returns what is stored now."""
        with self.engine.begin() as conn:
            stored = {
                key: value
                for key, value in conn.execute(select(world_state.c.key, world_state.c.value))
            }
            for key, value in values.items():
                if key not in stored:
                    conn.execute(insert(world_state).values(key=key, value=value))
                    stored[key] = value
            return stored

    def set_state(self, values: Mapping[str, str]) -> None:
        with self.engine.begin() as conn:
            for key, value in values.items():
                conn.execute(world_state.delete().where(world_state.c.key == key))
                conn.execute(insert(world_state).values(key=key, value=value))

    # -- instances --------------------------------------------------------

    def add_instance(self, row: Mapping[str, Any], *, capacity: int | None = None) -> bool:
        """Record a new instance; with ``capacity``, only while fewer live instances hold its reservation.

        The count and the insert are one transaction (SQLite's write lock), so
        two launches racing for a pool's last slot cannot both get it. False:
        the pool was full and nothing was written.
        """
        values = dict(row)
        values["tags"] = json.dumps(dict(values.get("tags") or {}))
        with self.engine.begin() as conn:
            if capacity is not None:
                in_use = conn.execute(
                    select(func.count())
                    .select_from(instances)
                    .where(
                        instances.c.reservation == values["reservation"],
                        instances.c.cloud == values["cloud"],
                        instances.c.state.in_(_LIVE_STATES),
                    )
                ).scalar_one()
                if in_use >= capacity:
                    return False
            conn.execute(insert(instances).values(**values))
        return True

    def instance(self, instance_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = (
                conn.execute(select(instances).where(instances.c.instance_id == instance_id))
                .mappings()
                .first()
            )
        return _decode(row) if row is not None else None

    def all_instances(self, cloud: str | None = None) -> list[dict[str, Any]]:
        query = select(instances).order_by(instances.c.launched_at)
        if cloud is not None:
            query = query.where(instances.c.cloud == cloud)
        with self.engine.connect() as conn:
            return [_decode(r) for r in conn.execute(query).mappings().all()]

    def update_instance(self, instance_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(instances).where(instances.c.instance_id == instance_id).values(**values)
            )

    def end_lost(self, instance_id: str, lines: Sequence[BillingLine], **values: Any) -> bool:
        """End a live instance whose host is gone (``values``: its state, end reason, ended_at,
        billed seconds) and add the rest of its bill (``lines``), its cost the sum of every
        billing row: in one transaction, only if it is still live (False: another process ended
        it first, and nothing was written)."""
        with self.engine.begin() as conn:
            ended = conn.execute(
                update(instances)
                .where(instances.c.instance_id == instance_id, instances.c.state.in_(_LIVE_STATES))
                .values(**values)
            )
            if ended.rowcount != 1:
                return False
            for line in lines:
                conn.execute(
                    insert(billing).values(
                        instance_id=instance_id,
                        start_s=line.start_s,
                        end_s=line.end_s,
                        price_usd_per_hour=line.price_usd_per_hour,
                        cost_micro_usd=line.cost_microusd,
                    )
                )
            total = conn.execute(
                select(func.coalesce(func.sum(billing.c.cost_micro_usd), 0)).where(
                    billing.c.instance_id == instance_id
                )
            ).scalar_one()
            conn.execute(
                update(instances)
                .where(instances.c.instance_id == instance_id)
                .values(cost_micro_usd=int(total))
            )
        return True

    def add_billing(
        self, instance_id: str, start_s: float, end_s: float, price: float, cost_micro_usd: int
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(billing).values(
                    instance_id=instance_id,
                    start_s=start_s,
                    end_s=end_s,
                    price_usd_per_hour=price,
                    cost_micro_usd=cost_micro_usd,
                )
            )

    def billing_rows(self, instance_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = (
                conn.execute(
                    select(billing)
                    .where(billing.c.instance_id == instance_id)
                    .order_by(billing.c.start_s)
                )
                .mappings()
                .all()
            )
        return [dict(r) for r in rows]


def _add_missing_columns(engine: Engine) -> None:
    """Bring a cloud.db written by an older spothop up to this schema (new nullable columns only)."""
    with engine.begin() as conn:
        for table in (instances, billing, world_state):
            have = {c["name"] for c in inspect(conn).get_columns(table.name)}
            for column in table.columns:
                if column.name not in have and column.nullable:
                    conn.exec_driver_sql(
                        f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {column.type.compile(engine.dialect)}'
                    )


def _decode(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["tags"] = json.loads(out.get("tags") or "{}")
    return out
