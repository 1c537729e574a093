"""One local instance's host: the hypervisor of a simulated VM.

``python -m spothop.providers.local.host INSTANCE_DIR`` runs for as long as
the instance lives. It

1. serves the instance's metadata endpoint in its cloud's protocol;
2. after the cloud's launch delay, once the provider has written the
   instance's ``user-data`` (the boot script, :mod:`.userdata`), runs it as
   root in the instance's own root (:mod:`.vm` on :mod:`.isolation`; unisolated where that
   cannot be), in a process group of its own, its output in ``console.log``;
3. every tick, bills the seconds that passed at the market's price (one billing row
   per price step, :mod:`spothop.providers.billing`: the rule the ledger prices with), and
   watches for what ends an instance:
   - the market taking capacity away (spot): the advance notice first where
     the cloud has one, then the final notice with the cloud's lead time,
     then, at the deadline, SIGKILL to the whole group — no grace beyond the
     cloud's own;
   - an injected preemption (``spothop cloud preempt``), handled the same way;
   - a scheduled maintenance event (``spothop cloud maintenance``), shown on
     the metadata endpoint from when it is scheduled; at its start, one that
     stops or retires the instance ends it as a terminate request does
     (:mod:`.maintenance`);
   - a terminate request: what a VM's shutdown does — no notice on the
     metadata endpoint (no cloud gives a spot notice for its user's own
     terminate), SIGTERM to every process of the instance, the cloud's
     ``terminate_grace_s`` (simulated), then SIGKILL;
   - the agent unit's main process (the bootstrap command, started by the
     boot script through the ``systemctl`` shim) exiting: the instance shuts
     down, as a VM whose unit ends with ``shutdown`` does (after any pending
     notice's deadline, so a preempted instance is recorded as preempted);
   - the boot script failing (non-zero) or ending without starting the
     unit: the instance fails, its end reason "boot script failed: " and the
     console's last line.

"Every process of the instance" is every process the boot script
started, also one that left its process group or session (``setsid``,
a daemon): the host adopts orphans as a VM's init does (a child subreaper on
Linux), and whatever ends the instance ends them all. Whatever ends the host
itself, a SIGKILL included, ends them too: its parent is the instance's
watchdog (:mod:`.watchdog`), to which they are reparented, and which kills
them all, as a VM dies whole.

Everything it learns goes to the cloud's records (:mod:`.store`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spothop.market import SimClock, SpotMarket
from spothop.providers.base import InstanceState
from spothop.providers.billing import billed_price_steps, billing_line
from spothop.providers.local import isolation, maintenance
from spothop.providers.local.metadata import (
    PROTOCOLS,
    InstanceMetadata,
    MetadataServer,
    NoticeState,
    ScheduledEvent,
)
from spothop.providers.local.processes import become_subreaper
from spothop.providers.local.runtime import cloud_clock, market_drop, spot_market
from spothop.providers.local.store import CloudStore
from spothop.providers.local.vm import Vm
from spothop.providers.local.world import load_world
from spothop.resources.market_id import MarketId

TICK_WALL_S = 0.1  # how often the host looks at the world; notices land within a tick
# How often the running bill (the open line so far) is written: a line that closes, and the
# bill when the instance ends, are written at once. Written every tick, it was most of a host's
# CPU (a write transaction on the cloud's SQLite ten times a second, per instance).
BILL_WRITE_WALL_S = 1.0
INSTANCE_ID_ENV = "SPOTHOP_INSTANCE_ID"
USER_DATA_TIMEOUT_S = (
    30.0  # wall seconds the provider has to write the user-data after the host serves
)


@dataclass
class _Plan:
    """When this instance's notices and reclaim fall, once decided."""

    advance_at: float | None = None
    notice_at: float | None = None
    terminate_at: float | None = None


class Host:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.spec: dict[str, Any] = json.loads((directory / "instance.json").read_text())
        self.instance_id: str = self.spec["instance_id"]
        self.store = CloudStore(Path(self.spec["cloud_root"]))
        world_path = self.spec.get("world_path")
        self.world = load_world(Path(world_path) if world_path else None)
        self.clock: SimClock = cloud_clock(self.store, self.world)
        self.key = MarketId.of(
            self.spec["cloud"], self.spec["region"], self.spec["zone"], self.spec["instance_type"]
        )
        self.market: SpotMarket = spot_market(self.store, self.world, [self.key])
        self.billing = PROTOCOLS[self.spec["protocol"]].BILLING
        # The endpoint prints the cloud's times on the instance's own clock, the wall (see
        # metadata.state): a notice's deadline is then the wall instant this host kills at.
        self.notices = NoticeState(clock=self.clock.now, instance_time=self.wall_time)
        self.plan = _Plan()
        self.vm = Vm(directory)  # the boot script, the agent unit, ending them
        self.billed_to = self.clock.now()
        self.stop_requested = False
        self.running_at = self.billed_to
        # The bill (spothop.providers.billing): the closed lines' sum, and the open line.
        self.closed_micro = 0
        self.line_start = self.billed_to
        self.line_price = float(self.spec["price_usd_per_hour"])
        self.bill_written_at: float | None = None  # time.monotonic() of the last running bill
        self.row: dict[str, Any] = {}

    def wall_time(self, t: float) -> float:
        """The wall instant (unix seconds) at which the cloud's clock reads ``t``."""
        return self.clock.wall_start + (t - self.clock.sim_start) / self.clock.speed

    # -- lifecycle ----------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        become_subreaper()
        server = MetadataServer(
            self.spec["protocol"],
            InstanceMetadata(
                instance_id=self.instance_id,
                instance_type=self.spec["instance_type"],
                region=self.spec["region"],
                zone=self.spec["location"],
                provider=self.spec["cloud"],
                launch_time=self.wall_time(self.spec["launched_at"]),
                spot=self.spec["spot"],
            ),
            self.notices,
            options=self.world.cloud(self.spec["cloud"]).metadata_options,
        )
        server.start()
        self.store.update_instance(self.instance_id, metadata_url=server.url, host_pid=os.getpid())
        try:
            # ``endpoint: down`` (metadata_options): the instance's processes reach no endpoint.
            return self._lifecycle()
        finally:
            self._kill_worker(signal.SIGKILL)
            server.stop()

    def _lifecycle(self) -> int:
        boot_at = self.spec["launched_at"] + self.spec["launch_delay_s"]
        while self.clock.now() < boot_at and not self._should_end():
            time.sleep(TICK_WALL_S)
        user_data = self._await_user_data()
        if self._should_end():
            return self._finish(InstanceState.TERMINATED, "terminated before boot")
        if user_data is None:
            return self._finish(InstanceState.FAILED, "no user-data reached the instance")
        self._start_worker(user_data)
        self.billed_to = self.line_start = self.running_at = self.clock.now()
        self.line_price = self._steps(self.running_at, self.running_at)[0][1]
        self.store.update_instance(
            self.instance_id, state=InstanceState.RUNNING.value, running_at=self.running_at
        )
        while True:
            now = self.clock.now()
            self._bill(now)
            outcome = self._step(now)
            if outcome is not None:
                return outcome
            time.sleep(TICK_WALL_S)

    def _step(self, now: float) -> int | None:
        self.row = self.store.instance(self.instance_id) or {}
        if self._should_end():
            grace_s = self.world.cloud(self.spec["cloud"]).terminate_grace_s
            self._kill_worker(signal.SIGTERM, grace_s=grace_s / self.world.speed)
            return self._finish(InstanceState.TERMINATED, "terminated on request")
        ending = self._maintenance(now)
        if ending is not None:
            grace_s = self.world.cloud(self.spec["cloud"]).terminate_grace_s
            self._kill_worker(signal.SIGTERM, grace_s=grace_s / self.world.speed)
            return self._finish(
                InstanceState.TERMINATED, f"scheduled event {ending.code} ({ending.event_id})"
            )
        self._plan_notices(now)
        if self.plan.advance_at is not None and now >= self.plan.advance_at:
            self.notices.recommend_rebalance(self.plan.advance_at)
        if (
            self.plan.notice_at is not None
            and now >= self.plan.notice_at
            and self.plan.terminate_at is not None
        ):
            if self.notices.termination_time is None:
                self.notices.schedule_termination(self.plan.notice_at, self.plan.terminate_at)
                self.store.update_instance(
                    self.instance_id,
                    state=InstanceState.NOTICED.value,
                    notice_time=self.plan.notice_at,
                    termination_time=self.plan.terminate_at,
                )
            if now >= self.plan.terminate_at:
                self._kill_worker(signal.SIGKILL)
                return self._finish(InstanceState.PREEMPTED, "spot capacity reclaimed")
        if self.plan.terminate_at is None:
            ended = self._ended()
            if ended is not None:
                return self._finish(*ended)
        return None

    def _ended(self) -> tuple[InstanceState, str, int | None] | None:
        """How the instance ended by itself (its boot script failed, its unit exited), or None."""
        had = self.vm.unit_pid
        ended = self.vm.ended()
        if had is None and self.vm.unit_pid is not None:
            self.store.update_instance(self.instance_id, worker_pgid=self.vm.unit_pid)
        return None if ended is None else (ended.state, ended.reason, ended.exit_code)

    def _await_user_data(self) -> str | None:
        """The boot script the provider wrote, once it is there (None: not in time, or ended)."""
        path = self.directory / isolation.USER_DATA
        deadline = time.monotonic() + USER_DATA_TIMEOUT_S
        while not self._should_end() and time.monotonic() < deadline:
            if path.exists():
                return path.read_text()
            time.sleep(TICK_WALL_S / 2)
        return None

    def _maintenance(self, now: float) -> ScheduledEvent | None:
        """Mirror the scheduled events onto the endpoint; the one that ends the instance now, if any."""
        events = maintenance.events_of(self.row)
        if not events:
            return None
        current, ending = maintenance.advance(self.spec["protocol"], events, now)
        if (
            current != events
        ):  # only when an event completes: a user's new event in between would be lost
            self.store.update_instance(
                self.instance_id, scheduled_events=maintenance.encode(current)
            )
        self.notices.set_scheduled_events(current)
        return ending

    def _plan_notices(self, now: float) -> None:
        if self.plan.terminate_at is not None:
            return
        lead = self.spec["notice_lead_time_s"]
        injected = self.row.get("preempt_lead_s")
        if injected is not None:
            advance = self.row.get("preempt_advance_s")
            if advance is None:
                self.plan = _Plan(
                    advance_at=self.plan.advance_at,
                    notice_at=now,
                    terminate_at=now + float(injected),
                )
            else:
                notice_at = now + float(advance)
                self.plan = _Plan(
                    advance_at=now, notice_at=notice_at, terminate_at=notice_at + float(injected)
                )
            return
        if not self.spec["spot"]:
            return
        drop = market_drop(self.market, self.key, now)
        if drop is None:
            return
        advance = self.spec.get("advance_notice_s")
        if advance is not None and now >= drop - lead - advance:
            self.plan.advance_at = (
                max(now, drop - lead - advance)
                if self.plan.advance_at is None
                else self.plan.advance_at
            )
        if now >= drop - lead:
            # A drop sooner than the cloud's lead time still gets a notice, with what time is left.
            self.plan = _Plan(
                advance_at=self.plan.advance_at, notice_at=now, terminate_at=max(drop, now)
            )

    # -- billing and records ------------------------------------------------

    def _steps(self, start: float, end: float) -> list[tuple[float, float]]:
        """The price this instance is billed at over ``start … end`` (spothop.providers.billing)."""
        if not self.spec["spot"]:
            return [(start, float(self.spec["price_usd_per_hour"]))]
        return billed_price_steps(
            self.billing,
            float(self.spec["launched_at"]),
            start,
            end,
            lambda a, b: self.market.price_steps(self.key, a, b),
        )

    def _bill(self, now: float, *, final: bool = False) -> None:
        """Bill up to ``now``: a line closes at each price step (spothop.providers.billing, the
        rule the ledger prices with; at the step's own time, however late it is seen), the open
        one is billed so far. At most every :data:`BILL_WRITE_WALL_S`, and always when ``final``."""
        written = self.bill_written_at
        if not final and written is not None and time.monotonic() - written < BILL_WRITE_WALL_S:
            return
        self.bill_written_at = time.monotonic()
        if now <= self.billed_to:
            return
        for t, price in self._steps(self.billed_to, now)[1:]:
            self._close_line(t)
            self.line_price = price
        self.billed_to = now
        open_line = billing_line(
            self.billing, self.running_at, self.line_start, now, self.line_price
        )
        self.store.update_instance(
            self.instance_id,
            billed_seconds=self.billing.billed_seconds(now - self.running_at),
            cost_micro_usd=self.closed_micro + open_line.cost_microusd,
            price_usd_per_hour=self.line_price,
        )

    def _close_line(self, end: float) -> None:
        """The open line ends at ``end``: one billing row, its cost added to the closed sum."""
        if end > self.line_start:
            line = billing_line(
                self.billing, self.running_at, self.line_start, end, self.line_price
            )
            self.store.add_billing(
                self.instance_id,
                line.start_s,
                line.end_s,
                line.price_usd_per_hour,
                line.cost_microusd,
            )
            self.closed_micro += line.cost_microusd
        self.line_start = max(self.line_start, end)

    def _finish(self, state: InstanceState, reason: str, exit_code: int | None = None) -> int:
        now = self.clock.now()
        if self.vm.worker is not None:
            self._bill(now, final=True)
            self._close_line(now)
            self.store.update_instance(self.instance_id, cost_micro_usd=self.closed_micro)
        if exit_code is None:
            exit_code = self.vm.exit_code()
        self.store.update_instance(
            self.instance_id,
            state=state.value,
            ended_at=now,
            end_reason=reason,
            exit_code=exit_code,
        )
        return 0

    # -- the worker process group -------------------------------------------

    def _start_worker(self, user_data: str) -> None:
        """Start the boot script (:mod:`.vm`), its output the instance's console."""
        pid = self.vm.boot(
            user_data,
            isolated=bool(self.spec.get("isolated", False)),
            image=[Path(p) for p in self.spec.get("image_paths", [])],
            buckets=[Path(p) for p in self.spec.get("buckets", [])],
        )
        self.store.update_instance(self.instance_id, worker_pgid=pid)

    def _kill_worker(self, sig: int, grace_s: float = 0.0) -> None:
        self.vm.kill(sig, grace_s)

    def _should_end(self) -> bool:
        if self.stop_requested:
            return True
        if self.vm.worker is None:  # still booting: nothing else reads the row
            self.row = self.store.instance(self.instance_id) or {}
        return bool(self.row.get("terminate_requested"))

    def _on_sigterm(self, _signum: int, _frame: Any) -> None:
        self.stop_requested = True


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m spothop.providers.local.host INSTANCE_DIR", file=sys.stderr)
        return 2
    return Host(Path(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
