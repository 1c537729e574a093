import datetime as dt

import pytest
from pydantic import ValidationError

from spothop.resources.gpus import resolve_gpu
from spothop.resources.offering import DEFAULT_EFFICIENCY, Interconnect, Offering


def make(**overrides: object) -> Offering:
    fields: dict[str, object] = dict(
        provider="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="p5.48xlarge",
        gpu="H100-SXM5-80GB",
        gpu_count=8,
        vcpus=192,
        memory_gib=2048,
        interconnect=Interconnect.NVSWITCH,
        on_demand_price_usd_per_hour=55.04,
        spot_price_usd_per_hour=28.8,
        price_date=dt.date(2026, 11, 1),
    )
    fields.update(overrides)
    return Offering(**fields)  # type: ignore[arg-type]


def test_per_gpu_prices_divide_by_count_and_hours():
    o = make()
    assert o.usd_per_gpu_hour(spot=True) == pytest.approx(3.6)
    assert o.usd_per_gpu_second(spot=True) == pytest.approx(3.6 / 3600)
    assert o.usd_per_gpu_hour(spot=False) == pytest.approx(6.88)


def test_tflops_prices_use_nominal_bf16_and_default_efficiency():
    o = make()
    bf16 = resolve_gpu("H100-SXM5-80GB").bf16_tflops
    assert bf16 is not None
    assert o.nominal_tflops_per_gpu == bf16
    assert o.effective_tflops_per_gpu == pytest.approx(bf16 * DEFAULT_EFFICIENCY)
    assert o.usd_per_nominal_tflops_hour(spot=True) == pytest.approx(3.6 / bf16)
    assert o.usd_per_effective_tflops_hour(spot=True) == pytest.approx(
        3.6 / (bf16 * DEFAULT_EFFICIENCY)
    )


def test_measured_tflops_replace_the_default_efficiency():
    o = make().with_measured_tflops(700.0)
    assert o.effective_tflops_per_gpu == 700.0
    assert o.usd_per_effective_tflops_hour(spot=True) == pytest.approx(3.6 / 700.0)


def test_no_spot_market_gives_no_spot_figures():
    o = make(spot_price_usd_per_hour=None)
    assert o.usd_per_gpu_hour(spot=True) is None
    assert o.derived(spot=True)["usd_per_effective_tflops_hour"] is None


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"gpu_count": 0}, "gpu_count"),
        ({"spot_price_usd_per_hour": -1.0}, "spot_price_usd_per_hour"),
        ({"on_demand_price_usd_per_hour": 40_000.0}, "monthly"),
        (
            {"on_demand_price_usd_per_hour": None, "spot_price_usd_per_hour": None},
            "needs an on-demand or a spot price",
        ),
    ],
)
def test_absurd_offerings_are_rejected_with_the_reason(overrides, needle):
    with pytest.raises(ValidationError, match=needle):
        make(**overrides)
