"""The local cloud's world: which simulated clouds exist, what they sell, how their markets move.

A world file (YAML) declares simulated clouds. Each one speaks one real
cloud's metadata protocol, sells instance types taken from the built-in
catalog (at that catalog's prices), gives that cloud's interruption notice,
and runs a spot market per (zone, instance type) from a trace or a seeded
synthetic generator::

    seed: 7
    speed: 1.0                    # simulated seconds per wall second
    clouds:
      - name: aws-sim
        protocol: aws             # the metadata protocol its instances speak
        catalog: aws              # built-in catalog provider it takes offerings from
        notice_lead_time_s: 120   # final notice → reclaim
        advance_notice_s: 300     # rebalance recommendation before the final notice
        launch_delay_s: 1
        terminate_grace_s: 5      # a user's terminate: SIGTERM to every process, SIGKILL after
        locations: [us-east-1a, us-east-1b]     # zones (or regions, for region-priced clouds)
        instance_types: [g5.xlarge, p3.2xlarge]
        market:                   # the default for every market of this cloud
          synthetic: {mean_time_between_preemptions_s: 21600, mean_outage_s: 1800}
        markets:                  # overrides for single markets
          - location: us-east-1a
            instance_type: p3.2xlarge
            trace: traces/us-east-1a_v100_1.json   # relative to the world file
            start_offset_s: 0
          - location: us-east-1b
            instance_type: p3.2xlarge
            replay: traces/cant-be-late/preemption-1node-aws-2023-04-22/us-east-1c_v100_1.json
            start_offset_s: 64640     # a published trace, in the data folder (below)
            prices: catalog           # its availability; the price this catalog's (p3 ≠ this type)
        reserved:                 # pools the account holds: never preempted, billed at their rate
          - instance_type: g5.xlarge
            location: us-east-1a
            count: 1
            price_usd_per_hour: 0.6
            id: cr-east-g5        # optional; default "<location>/<instance_type>"

``replay:`` names a trace in the **data folder**: ``$SPOTHOP_SHARED_DATA``
if set, else the world's ``data_dir:`` (relative to the world file), the
folder of published traces that sits beside a checkout (``../shared/data``).
When that folder is absent — a fresh clone without it — each replayed market
runs its cloud's ``market:`` instead, and loading the world prints one line
saying so (:attr:`World.notes`). A replayed file missing from a data folder
that exists is an error, as a ``trace:`` is.

What an instance sees of this machine is the world's too: ``image:`` (the
folders of the Python environment playing the machine image, read-only;
default: the running interpreter's prefix and base prefix), ``buckets:``
(folders playing the object store, read-write at their own paths; each must
exist) and ``isolation:`` (``auto``, ``required`` or ``off``; see
:mod:`.isolation`).

A default world ships in the package, so the embedded default needs no file.
Errors name the file, the key and the fix.

The schema, key by key, is :mod:`.world_spec`. This module loads a file
(:func:`load_world`, :func:`parse_world`) into a :class:`World`: each cloud's
offerings from the built-in catalog, each market's source (traces read once),
the storms' windows, and what a loaded world checks that needs the catalog (a
reserved pool's type is sold in its location; a storm names a cloud of the
world and only its locations and types).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from functools import cached_property
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from spothop.errors import ConfigError, NotFoundError, ValueOutOfRange
from spothop.market import (
    AvailabilityTrace,
    MarketSource,
    SyntheticMarketParams,
    TraceKind,
    read_trace,
)
from spothop.market.errors import TraceError
from spothop.market.traces import detect_kind
from spothop.providers.local.storms import StormSpec, Window
from spothop.providers.local.world_spec import (
    CloudSpec,
    MarketSpec,
    ReservedSpec,
    WorldSpec,
    checked_folders,
)
from spothop.resources.catalog import builtin_offerings
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering

DEFAULT_WORLD = "default-world.yaml"
SHARED_DATA_ENV = "SPOTHOP_SHARED_DATA"  # the data folder of published traces, for 'replay:'


class World:
    """A loaded world: its clouds, their offerings and their spot markets."""

    def __init__(self, spec: WorldSpec, origin: str, base_dir: Path | None) -> None:
        self.spec = spec
        self.origin = origin
        self.base_dir = base_dir
        self.offerings: dict[str, list[Offering]] = {
            c.name: _offerings_for(c, origin) for c in spec.clouds
        }
        for i, cloud in enumerate(spec.clouds):
            for j, pool in enumerate(cloud.reserved):
                if self.offering(cloud.name, pool.location, pool.instance_type) is None:
                    raise ConfigError(
                        f"{origin}: key clouds.{i}.reserved.{j}: the {cloud.catalog} catalog does not sell "
                        f"{pool.instance_type} in {pool.location}; reserve a type sold there"
                    )
        for i, storm in enumerate(spec.storms):
            _check_storm(storm, f"{origin}: key storms.{i}", {c.name: c for c in spec.clouds})
        self.buckets: tuple[Path, ...] = checked_folders(spec.buckets, "buckets", origin, base_dir)
        """The world's buckets: folders every instance sees read-write at their own paths."""
        image = spec.image if spec.image is not None else [sys.prefix, sys.base_prefix]
        self.image_paths: tuple[Path, ...] = checked_folders(image, "image", origin, base_dir)
        """The machine image: folders every instance sees read-only at their own paths."""

    @cached_property
    def data_dir(self) -> Path | None:
        """The data folder ``replay:`` paths resolve in (see the module docstring); None: none named."""
        env = os.environ.get(SHARED_DATA_ENV)
        if env:
            return Path(env).expanduser()
        if self.spec.data_dir is None:
            return None
        path = Path(self.spec.data_dir).expanduser()
        return path if path.is_absolute() or self.base_dir is None else self.base_dir / path

    @cached_property
    def replays_fall_back(self) -> bool:
        """True when the world replays traces but its data folder is absent (a fresh clone)."""
        replays = any(
            spec.replay is not None
            for cloud in self.spec.clouds
            for spec in (cloud.market, *cloud.markets)
        )
        return replays and (self.data_dir is None or not self.data_dir.is_dir())

    @property
    def notes(self) -> list[str]:
        """What a person loading this world should know: one line per note."""
        if not self.replays_fall_back:
            return []
        replayed = sum(
            spec.replay is not None for cloud in self.spec.clouds for spec in cloud.markets
        )
        where = self.data_dir or f"data_dir (unset in {self.origin})"
        return [
            f"{self.origin}: the data folder {where} is absent (set ${SHARED_DATA_ENV} to it); "
            f"{replayed} market(s) that replay its real traces run their cloud's synthetic market instead"
        ]

    @property
    def isolation(self) -> str | None:
        """The world's isolation mode (``auto``, ``required``, ``off``); None: the world does not say."""
        return self.spec.isolation

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def speed(self) -> float:
        return self.spec.speed

    @property
    def cloud_names(self) -> list[str]:
        return [c.name for c in self.spec.clouds]

    def cloud(self, name: str) -> CloudSpec:
        for cloud in self.spec.clouds:
            if cloud.name == name:
                return cloud
        raise ConfigError(
            f"{self.origin}: no cloud named {name!r}; the world has {', '.join(self.cloud_names)}"
        )

    def offering(self, cloud: str, location: str, instance_type: str) -> Offering | None:
        for o in self.offerings[cloud]:
            if o.instance_type == instance_type and location in (o.zone, o.region):
                return o
        return None

    def reserved_pools(self, cloud: str) -> list[tuple[ReservedSpec, Offering]]:
        """The cloud's reserved pools, each with the offering it holds (checked to exist when loaded)."""
        out = []
        for pool in self.cloud(cloud).reserved:
            offering = self.offering(cloud, pool.location, pool.instance_type)
            assert offering is not None  # World.__init__ refused a pool of a type not sold there
            out.append((pool, offering))
        return out

    def market_key(self, cloud: str, offering: Offering) -> MarketId:
        """The market of ``offering`` in the world's cloud ``cloud`` (the world names its clouds)."""
        return MarketId.of(cloud, offering.region, offering.zone, offering.instance_type)

    @cached_property
    def storm_windows(self) -> dict[MarketId, list[Window]]:
        """Each market's storms, ``(start, end)`` in seconds after the markets' start."""
        out: dict[MarketId, list[Window]] = {}
        for cloud in self.spec.clouds:
            for offering in self.offerings[cloud.name]:
                key = self.market_key(cloud.name, offering)
                windows = [
                    (s.at_s, s.at_s + s.duration_s)
                    for s in self.spec.storms
                    if s.takes(key, offering.location)
                ]
                if windows:
                    out[key] = windows
        return out

    @cached_property
    def market_sources(self) -> dict[MarketId, MarketSource]:
        """Every market of every cloud. Traces are read once, here."""
        traces: dict[tuple[str, str | None], AvailabilityTrace] = {}
        sources: dict[MarketId, MarketSource] = {}
        for i, cloud in enumerate(self.spec.clouds):
            overrides = {
                (m.location, m.instance_type): (f"clouds.{i}.markets.{j}", m)
                for j, m in enumerate(cloud.markets)
            }
            for offering in self.offerings[cloud.name]:
                where, spec = overrides.get(
                    (offering.location, offering.instance_type),
                    (f"clouds.{i}.market", cloud.market),
                )
                if spec.replay is not None and self.replays_fall_back:
                    where, spec = f"clouds.{i}.market", cloud.market  # said once, in notes
                    if spec.replay is not None:
                        raise ConfigError(
                            f"{self.origin}: key {where}.replay: the data folder is absent and this cloud's "
                            "market replays it too; give the cloud a 'synthetic:' market to fall back on"
                        )
                sources[self.market_key(cloud.name, offering)] = self._source(
                    spec, where, offering, traces
                )
        return sources

    def _source(
        self,
        spec: MarketSpec,
        where: str,
        offering: Offering,
        traces: dict[tuple[str, str | None], AvailabilityTrace],
    ) -> MarketSource:
        on_demand = offering.on_demand_price_usd_per_hour or offering.spot_price_usd_per_hour or 1.0
        catalog_ratio = _spot_ratio(offering)
        if spec.synthetic is not None:
            s = spec.synthetic
            params = SyntheticMarketParams(
                mean_time_between_preemptions_s=s.mean_time_between_preemptions_s,
                mean_outage_s=s.mean_outage_s,
                capacity=s.capacity,
                on_demand_price_usd_per_hour=on_demand,
                spot_ratio=s.spot_ratio or catalog_ratio,
                price_std_ratio=s.price_std_ratio,
                tick_s=s.tick_s,
            )
            return MarketSource(synthetic=params, start_offset_s=spec.start_offset_s)
        name, field, base = (
            (spec.replay, "replay", self.data_dir)
            if spec.replay is not None
            else (spec.trace, "trace", self.base_dir)
        )
        assert name is not None  # MarketSpec holds exactly one source
        key = (f"{field}:{name}", spec.kind)
        if key not in traces:
            traces[key] = self._read_trace(name, spec.kind, f"{where}.{field}", base)
        trace = traces[key]
        if trace.prices_usd_per_hour is not None:
            if spec.prices == "trace":
                return MarketSource(trace=trace, start_offset_s=spec.start_offset_s)
            trace = dataclasses.replace(trace, prices_usd_per_hour=None)  # availability only
        return MarketSource(
            trace=trace,
            start_offset_s=spec.start_offset_s,
            spot_ratio=catalog_ratio,
            on_demand_price_usd_per_hour=on_demand,
        )

    def _read_trace(
        self, name: str, kind: str | None, key: str, base: Path | None
    ) -> AvailabilityTrace:
        """The trace ``name`` (relative to ``base``); errors name the YAML ``key`` and the fix."""
        path = Path(name).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        where = key.rpartition(".")[0]
        if not path.is_file():
            found = "is not a file" if path.exists() else "not found"
            relative = "the data folder" if key.endswith(".replay") else "the world file"
            raise ConfigError(
                f"{self.origin}: key {key}: trace {name!r} {found} (looked at {path}); "
                f"fix the path, relative to {relative}"
            )
        choices = " or ".join(f"'kind: {k.value}'" for k in TraceKind)
        try:
            parsed_kind = TraceKind(kind) if kind else None
        except ValueError:
            raise ConfigError(
                f"{self.origin}: key {where}.kind: {kind!r} is not a trace kind; use {choices}"
            ) from None
        try:
            return read_trace(path, kind=parsed_kind)
        except TraceError as exc:
            if parsed_kind is None and detect_kind(path) is None and path.suffix.lower() == ".json":
                # The folder name (…-1node-…, spothedge…) tells a trace's polarity; a copied trace loses it.
                raise ConfigError(
                    f"{self.origin}: key {where}: cannot tell whether trace {name!r} flags unavailability "
                    f"or counts available instances (its folder name does not say); add {choices} "
                    "(Can't Be Late 1-node traces flag, multi-node and SpotHedge traces count)"
                ) from None
            raise ConfigError(f"{self.origin}: key {key}: {exc}") from None


def _check_storm(storm: StormSpec, where: str, clouds: dict[str, CloudSpec]) -> None:
    """ConfigError unless ``storm`` names a cloud of the world and only its locations and types."""
    cloud = clouds.get(storm.cloud)
    if cloud is None:
        raise ConfigError(
            f"{where}.cloud: {storm.cloud!r} is not a cloud of this world; use one of {', '.join(clouds)}"
        )
    for key, given, known in (
        ("locations", storm.locations, cloud.locations),
        ("instance_types", storm.instance_types, cloud.instance_types),
    ):
        unknown = [v for v in given or () if v not in known]
        if unknown:
            raise ConfigError(
                f"{where}.{key}: {', '.join(map(repr, unknown))} not among {storm.cloud}'s {key} "
                f"({', '.join(known)}); name those, or leave '{key}' out to take them all"
            )


def _spot_ratio(offering: Offering) -> float:
    # Most clouds' GPU spot sits at 30-40 % of on-demand; use the catalog's ratio where it has both.
    od, spot = offering.on_demand_price_usd_per_hour, offering.spot_price_usd_per_hour
    return spot / od if od and spot else 0.35


def _offerings_for(cloud: CloudSpec, origin: str) -> list[Offering]:
    catalog = [o for o in builtin_offerings() if o.provider == cloud.catalog]
    if not catalog:
        providers = sorted({o.provider for o in builtin_offerings()})
        raise ConfigError(
            f"{origin}: cloud {cloud.name!r}: catalog {cloud.catalog!r} is not a built-in provider ({', '.join(providers)})"
        )
    out: list[Offering] = []
    for instance_type in cloud.instance_types:
        rows = [o for o in catalog if o.instance_type == instance_type]
        if not rows:
            raise ConfigError(
                f"{origin}: cloud {cloud.name!r}: instance type {instance_type!r} is not in the {cloud.catalog} catalog; "
                f"`spothop offers --provider {cloud.catalog}` lists what is"
            )
        for location in cloud.locations:
            match = next((o for o in rows if location in (o.zone, o.region)), None)
            if match is not None:
                out.append(
                    match.model_copy(
                        update={"provider": cloud.name, "source": f"world:{cloud.name}"}
                    )
                )
    if not out:
        raise ConfigError(
            f"{origin}: cloud {cloud.name!r}: none of its instance types is sold in {', '.join(cloud.locations)}"
        )
    return out


def parse_world(text: str, origin: str, base_dir: Path | None = None) -> World:
    try:
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {exc}") from None
    try:
        spec = WorldSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        message = first["msg"].removeprefix("Value error, ")
        bounded = isinstance(
            first.get("ctx", {}).get("error"), ValueOutOfRange
        )  # it names the value itself
        given = "" if bounded or first["type"] == "missing" else f", got {first.get('input')!r:.80}"
        raise ConfigError(f"{origin}: key {where}: {message}{given}") from None
    world = World(spec, origin, base_dir)
    for note in world.notes:
        if note not in _SAID:  # once per process: every host and CLI call loads the world
            _SAID.add(note)
            print(note, file=sys.stderr)
    return world


_SAID: set[str] = set()


def load_world(path: Path | None = None) -> World:
    """The world in ``path``, or the default world shipped in the package."""
    if path is None:
        text = (
            importlib_resources.files("spothop.providers.local")
            .joinpath(f"data/{DEFAULT_WORLD}")
            .read_text(encoding="utf-8")
        )
        return parse_world(text, f"builtin:{DEFAULT_WORLD}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(
            f"world file {path} does not exist; give a world YAML file (README: the local cloud)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read world file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"world file {path} is not a text (UTF-8 YAML) file") from None
    return parse_world(text, str(path), path.parent)
