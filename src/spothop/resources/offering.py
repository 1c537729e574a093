"""Offerings: one rentable instance type in one place, priced in one unit system.

An :class:`Offering` is what a cloud sells (provider, region, zone, instance
type, its GPUs and host) at the prices it quoted, kept in the cloud's own
currency and normalised to USD. From those it derives what spothop compares:
USD per GPU-second, per nominal-TFLOPS-hour and per effective-TFLOPS-hour.

Effective TFLOPS are what a GPU really sustains. Once the compute probe has
measured an instance type the measured figure is used; until then nominal ×
:data:`DEFAULT_EFFICIENCY`.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from spothop.bounds import USD_PER_GPU_HOUR
from spothop.resources.gpus import GpuModel, resolve_gpu
from spothop.resources.market_id import MarketId

# Dense BF16 matmul reaches 70-80 % of the datasheet peak on large square
# problems (A100 ~250 of 312, H100 SXM ~700 of 989 TFLOPS, as published by
# NVIDIA's own cuBLAS benchmarks and reproduced by MLPerf submitters); real
# training steps sit lower. 0.70 is the conservative end until a probe measures.
DEFAULT_EFFICIENCY = 0.70

# No cloud rents a GPU for more than this per GPU-hour; anything above is a typo
# (a monthly price, cents read as dollars) and is rejected.
MAX_USD_PER_GPU_HOUR = USD_PER_GPU_HOUR.high

SECONDS_PER_HOUR = 3600


class Interconnect(StrEnum):
    """How the GPUs inside one instance talk to each other."""

    NVSWITCH = "nvswitch"  # every pair at full NVLink bandwidth (HGX/DGX boards)
    NVLINK = "nvlink"  # NVLink bridges or a partial mesh
    XGMI = "xgmi"  # AMD Infinity Fabric
    PCIE = "pcie"  # through the PCIe tree only
    NONE = "none"  # a single GPU: nothing to talk to


class Offering(BaseModel):
    """One instance type in one zone (or region), with its prices.

    Prices are per instance-hour. ``spot_price_usd_per_hour`` is ``None``
    where the cloud has no spot market for it. ``zone`` is ``None`` when the
    cloud prices a whole region alike.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    region: str
    zone: str | None = None
    instance_type: str
    gpu: str = Field(description="canonical GPU model name")
    gpu_count: int = Field(ge=1)
    vcpus: float = Field(gt=0)
    memory_gib: float = Field(gt=0)
    local_disk_gib: float | None = Field(None, ge=0)
    network_bandwidth_gbps: float | None = Field(None, gt=0)
    interconnect: Interconnect
    on_demand_price_usd_per_hour: float | None = Field(None, gt=0)
    spot_price_usd_per_hour: float | None = Field(None, gt=0)
    currency: str = "USD"
    on_demand_price_original: float | None = Field(None, gt=0)
    spot_price_original: float | None = Field(None, gt=0)
    price_date: dt.date
    measured_tflops_per_gpu: float | None = Field(
        None, gt=0, description="from the compute probe, when one has run on this instance type"
    )
    source: str = "builtin"

    @model_validator(mode="after")
    def _sane_prices(self) -> Offering:
        if self.on_demand_price_usd_per_hour is None and self.spot_price_usd_per_hour is None:
            raise ValueError("an offering needs an on-demand or a spot price")
        for label, price in (
            ("on-demand", self.on_demand_price_usd_per_hour),
            ("spot", self.spot_price_usd_per_hour),
        ):
            if price is not None and price / self.gpu_count > MAX_USD_PER_GPU_HOUR:
                raise ValueError(
                    f"{label} price {price:.2f} USD/h is {price / self.gpu_count:.0f} USD per GPU-hour, "
                    f"above the {MAX_USD_PER_GPU_HOUR:.0f} no cloud charges; is it a monthly price?"
                )
        return self

    # -- identity ---------------------------------------------------------

    @property
    def market_id(self) -> MarketId:
        """What identifies an offering across catalog versions (a regional offering's zone is ``""``)."""
        return MarketId.of(self.provider, self.region, self.zone, self.instance_type)

    @property
    def location(self) -> str:
        return self.zone or self.region

    @property
    def gpu_model(self) -> GpuModel:
        return resolve_gpu(self.gpu)

    # -- derived prices ---------------------------------------------------

    def price_usd_per_hour(self, spot: bool) -> float | None:
        return self.spot_price_usd_per_hour if spot else self.on_demand_price_usd_per_hour

    @computed_field  # type: ignore[prop-decorator]
    @property
    def nominal_tflops_per_gpu(self) -> float:
        return self.gpu_model.nominal_tflops

    @computed_field  # type: ignore[prop-decorator]
    @property
    def effective_tflops_per_gpu(self) -> float:
        if self.measured_tflops_per_gpu is not None:
            return self.measured_tflops_per_gpu
        return self.nominal_tflops_per_gpu * DEFAULT_EFFICIENCY

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpu_memory_gib(self) -> float:
        return self.gpu_model.memory_gib

    def usd_per_gpu_hour(self, spot: bool) -> float | None:
        price = self.price_usd_per_hour(spot)
        return None if price is None else price / self.gpu_count

    def usd_per_gpu_second(self, spot: bool) -> float | None:
        per_hour = self.usd_per_gpu_hour(spot)
        return None if per_hour is None else per_hour / SECONDS_PER_HOUR

    def usd_per_nominal_tflops_hour(self, spot: bool) -> float | None:
        per_hour = self.usd_per_gpu_hour(spot)
        return None if per_hour is None else per_hour / self.nominal_tflops_per_gpu

    def usd_per_effective_tflops_hour(self, spot: bool) -> float | None:
        per_hour = self.usd_per_gpu_hour(spot)
        return None if per_hour is None else per_hour / self.effective_tflops_per_gpu

    def derived(self, spot: bool) -> dict[str, float | None]:
        """The derived figures for one market (spot or on-demand), for JSON output."""
        return {
            "usd_per_hour": self.price_usd_per_hour(spot),
            "usd_per_gpu_hour": self.usd_per_gpu_hour(spot),
            "usd_per_gpu_second": self.usd_per_gpu_second(spot),
            "usd_per_nominal_tflops_hour": self.usd_per_nominal_tflops_hour(spot),
            "usd_per_effective_tflops_hour": self.usd_per_effective_tflops_hour(spot),
        }

    def to_dict(self, spot: bool) -> dict[str, Any]:
        """Every field, JSON-ready, with the market (``spot``/``on-demand``) and its derived figures."""
        data: dict[str, Any] = self.model_dump(mode="json")
        data["market"] = "spot" if spot else "on-demand"
        data.update(self.derived(spot))
        return data

    def with_measured_tflops(self, tflops_per_gpu: float | None) -> Offering:
        return (
            self
            if tflops_per_gpu is None
            else self.model_copy(update={"measured_tflops_per_gpu": tflops_per_gpu})
        )
