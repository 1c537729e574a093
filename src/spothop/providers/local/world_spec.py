"""The world file's schema: what a world YAML may say, checked key by key before anything runs.

One frozen pydantic model per section, ``extra="forbid"`` (an unknown key is
refused): :class:`WorldSpec` (the file) holds :class:`CloudSpec` (one
simulated cloud), which holds its :class:`MarketSpec` (the default market),
its :class:`MarketOverride` entries (single markets) and its
:class:`ReservedSpec` pools; a market's generator is a :class:`SyntheticSpec`;
the world's storms are :class:`~spothop.providers.local.storms.StormSpec`.
:mod:`.world` has an example file and loads it.

- Every number is checked against a :class:`~spothop.bounds.Bound` (below
  or in :mod:`spothop.bounds`): a NaN, an infinity or an absurd magnitude is
  refused naming the key and the value.
- The validators raise ``ValueError`` saying what to change;
  :func:`~spothop.providers.local.world.parse_world` turns the first error
  into a :class:`~spothop.errors.ConfigError` naming the file and the key.
  Checked here: a market has exactly one source (``trace``, ``replay`` or
  ``synthetic``); a synthetic market's mean times span at least its tick;
  a cloud's protocol is known and takes its ``metadata_options``; no
  location, instance type, market override or reserved id is listed twice;
  overrides and reserved pools are markets of their cloud; cloud names are
  unique.
- What needs the built-in catalog (a type sold in a location) or the other
  clouds (a storm's cloud) is checked when :class:`~.world.World` loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spothop.bounds import (
    DURATION_S,
    LEAD_TIME_S,
    PRICE_USD_PER_HOUR,
    SECONDS_PER_DAY,
    SPEED,
    Bound,
)
from spothop.errors import ConfigError
from spothop.providers.local.metadata import PROTOCOLS, check_options
from spothop.providers.local.storms import StormSpec

# Every number of a world file is checked against one of these (spothop.bounds):
# a NaN, an infinity or an absurd magnitude is refused naming the key and the value.
LAUNCH_DELAY_S = Bound(0, 3600, "s")  # no cloud takes an hour to boot; a longer delay is a typo
GRACE_S = Bound(
    0, 3600, "s"
)  # a terminate's SIGTERM-to-SIGKILL; real clouds give seconds to minutes
MEAN_TIME_S = Bound(
    0, 10 * 365 * SECONDS_PER_DAY, "s", low_open=True
)  # up to a decade between events
ADVANCE_NOTICE_S = Bound(
    0, SECONDS_PER_DAY, "s", low_open=True
)  # a lead time, and there must be one
TICK_S = Bound(
    1, SECONDS_PER_DAY, "s"
)  # the generator steps per tick: under a second would never end
CAPACITY = Bound(1, 100_000, "instances", integer=True)
SPOT_RATIO = Bound(0, 1, low_open=True)
PRICE_STD_RATIO = Bound(0, 10)
SEED = Bound(0, 2**32 - 1, integer=True)  # a 32-bit seed, as numpy's and most generators take


class SyntheticSpec(BaseModel):
    """A synthetic market; the on-demand price comes from the catalog."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean_time_between_preemptions_s: Annotated[
        float, MEAN_TIME_S.annotated("mean_time_between_preemptions_s")
    ]
    mean_outage_s: Annotated[float, MEAN_TIME_S.annotated("mean_outage_s")]
    capacity: Annotated[int, CAPACITY.annotated("capacity")] = 4
    spot_ratio: Annotated[float, SPOT_RATIO.annotated("spot_ratio")] | None = Field(
        default=None, description="default: the catalog's spot/on-demand ratio"
    )
    price_std_ratio: Annotated[float, PRICE_STD_RATIO.annotated("price_std_ratio")] = 0.1
    tick_s: Annotated[float, TICK_S.annotated("tick_s")] = 60.0

    @model_validator(mode="after")
    def _outage_spans_a_tick(self) -> SyntheticSpec:
        # The generator draws up periods and outages on its tick; a shorter mean could not be played.
        for name in ("mean_time_between_preemptions_s", "mean_outage_s"):
            value = getattr(self, name)
            if value < self.tick_s:
                raise ValueError(
                    f"{name} ({value:g}) must be at least tick_s ({self.tick_s:g}); raise it or lower tick_s"
                )
        return self


class MarketSpec(BaseModel):
    """Where one market's availability and price come from: a trace or a synthetic generator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str | None = None
    replay: str | None = Field(
        default=None,
        description="a trace in the data folder ($SPOTHOP_SHARED_DATA, else data_dir); "
        "absent folder: the cloud's market instead",
    )
    kind: str | None = Field(
        default=None, description="override a trace's polarity: unavailable_flag or available_count"
    )
    prices: Literal["trace", "catalog"] = Field(
        default="trace",
        description="a trace's price: its own per-tick prices where it has them ('trace'), or the "
        "catalog's spot price ('catalog': a trace recorded on another instance type)",
    )
    start_offset_s: Annotated[float, DURATION_S.annotated("start_offset_s")] | None = Field(
        default=0.0, description="None: drawn from the seed"
    )
    synthetic: SyntheticSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> MarketSpec:
        if sum(x is not None for x in (self.trace, self.replay, self.synthetic)) != 1:
            raise ValueError("give exactly one of 'trace', 'replay' or 'synthetic'")
        return self


class MarketOverride(MarketSpec):
    location: str
    instance_type: str


class ReservedSpec(BaseModel):
    """A reserved pool of one cloud: ``count`` instances of a type in a location, at a fixed rate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str
    location: str
    count: Annotated[int, CAPACITY.annotated("count")]
    price_usd_per_hour: Annotated[float, PRICE_USD_PER_HOUR.annotated("price_usd_per_hour")]
    id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        description='the pool\'s id in launch requests; default "<location>/<instance_type>"',
    )

    @property
    def reservation_id(self) -> str:
        return self.id or f"{self.location}/{self.instance_type}"


class CloudSpec(BaseModel):
    """One simulated cloud."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    protocol: str
    catalog: str
    notice_lead_time_s: Annotated[float, LEAD_TIME_S.annotated("notice_lead_time_s")]
    advance_notice_s: Annotated[float, ADVANCE_NOTICE_S.annotated("advance_notice_s")] | None = None
    launch_delay_s: Annotated[float, LAUNCH_DELAY_S.annotated("launch_delay_s")] = 1.0
    terminate_grace_s: Annotated[float, GRACE_S.annotated("terminate_grace_s")] = Field(
        default=5.0,
        description="a user's terminate: SIGTERM to every process of the instance, SIGKILL this long after (the OS shutdown)",
    )
    locations: list[str] = Field(min_length=1)
    instance_types: list[str] = Field(min_length=1)
    market: MarketSpec
    markets: list[MarketOverride] = Field(default_factory=list)
    reserved: list[ReservedSpec] = Field(default_factory=list)
    metadata_options: dict[str, str | bool] = Field(
        default_factory=dict,
        description="options of every instance's metadata endpoint, e.g. {tokens: refused} where the protocol hands out session tokens; {endpoint: down} (every protocol) hands the instance's processes an address nothing answers: its agent is notice-blind",
    )

    @model_validator(mode="after")
    def _known_protocol(self) -> CloudSpec:
        if self.protocol not in PROTOCOLS:
            raise ValueError(
                f"unknown protocol {self.protocol!r}; use one of {', '.join(sorted(PROTOCOLS))}"
            )
        try:
            check_options(self.protocol, self.metadata_options)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        return self

    @model_validator(mode="after")
    def _no_overlapping_markets(self) -> CloudSpec:
        for key, values in (("locations", self.locations), ("instance_types", self.instance_types)):
            dupes = _repeated(values)
            if dupes:
                raise ValueError(f"{key} lists {', '.join(dupes)} more than once; list each once")
        pairs = [f"{m.instance_type} in {m.location}" for m in self.markets]
        dupes = _repeated(pairs)
        if dupes:
            raise ValueError(
                f"markets overrides {', '.join(dupes)} more than once; keep one entry per market"
            )
        for m in self.markets:
            if m.location not in self.locations or m.instance_type not in self.instance_types:
                raise ValueError(
                    f"markets entry {m.instance_type} in {m.location} is not a market of this cloud; "
                    "its location must be in 'locations' and its instance type in 'instance_types'"
                )
        return self

    @model_validator(mode="after")
    def _reserved_in_the_cloud(self) -> CloudSpec:
        for r in self.reserved:
            if r.location not in self.locations or r.instance_type not in self.instance_types:
                raise ValueError(
                    f"reserved pool {r.instance_type} in {r.location} is not a market of this cloud; "
                    "its location must be in 'locations' and its instance type in 'instance_types'"
                )
        dupes = _repeated([r.reservation_id for r in self.reserved])
        if dupes:
            raise ValueError(
                f"reserved pools repeat the id {', '.join(dupes)}; give each pool its own 'id'"
            )
        return self


def _repeated(values: list[str]) -> list[str]:
    return sorted({v for v in values if values.count(v) > 1})


class WorldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: Annotated[int, SEED.annotated("seed")] = 0
    data_dir: str | None = Field(
        default=None,
        description="where 'replay:' traces are, relative to the world file; $SPOTHOP_SHARED_DATA overrides it",
    )
    speed: Annotated[float, SPEED.annotated("speed")] = Field(
        default=1.0, description="simulated seconds per wall second"
    )
    clouds: list[CloudSpec] = Field(min_length=1)
    storms: list[StormSpec] = Field(
        default_factory=list,
        description="scheduled capacity crunches on top of the markets' own weather (storms.py)",
    )
    image: list[str] | None = Field(
        default=None,
        description="the machine image: folders of the Python environment every instance sees "
        "read-only at their own paths; default: the running interpreter's prefix and base prefix",
    )
    buckets: list[str] = Field(
        default_factory=list,
        description="folders playing the object store: every instance sees them read-write at "
        "their own paths (relative paths are relative to the world file)",
    )
    isolation: Literal["auto", "required", "off"] | None = Field(
        default=None,
        description="auto: instances run isolated where the machine can, else unisolated with a "
        "warning; required: a launch fails where it cannot; off: unisolated. Default: "
        "$SPOTHOP_LOCAL_ISOLATION, else auto",
    )

    @field_validator("isolation", mode="before")
    @classmethod
    def _off_is_off(cls, value: object) -> object:
        # YAML 1.1 reads a bare ``off`` as false: the user meant the mode.
        return "off" if value is False else value

    @model_validator(mode="after")
    def _unique_names(self) -> WorldSpec:
        dupes = _repeated([c.name for c in self.clouds])
        if dupes:
            raise ValueError(f"cloud names must be unique; repeated: {', '.join(dupes)}")
        return self


def checked_folders(
    values: list[str], key: str, origin: str, base_dir: Path | None
) -> tuple[Path, ...]:
    """``values`` as absolute paths (relative ones from ``base_dir``), each an existing folder.

    A missing one is a :class:`ConfigError` naming the key, the folder and the fix.
    """
    out: list[Path] = []
    for i, value in enumerate(values):
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        path = path.resolve()
        if not path.is_dir():
            raise ConfigError(
                f"{origin}: key {key}.{i}: the folder {path} does not exist; create it "
                f"(mkdir -p {path}) or remove it from '{key}'"
            )
        if path not in out:
            out.append(path)
    return tuple(out)
