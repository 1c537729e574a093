"""The vectorised ranking excludes exactly what Requirements.failed says, filter by filter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spothop.providers.fake.factories import make_offering
from spothop.resources.offering import Interconnect, Offering
from spothop.scheduler.market_view import MarketView
from spothop.scheduler.placement import rank
from spothop.scheduler.requirements import FILTERS, Requirements

GPUS = ("H100-SXM5-80GB", "A100-SXM4-80GB", "A10G", "L4")

offerings = st.builds(
    lambda provider, zone, gpu, count, cpus, link: make_offering(
        provider=provider,
        zone=zone,
        instance_type=f"{gpu}-{count}-{cpus}",
        gpu=gpu,
        gpu_count=count,
        vcpus=float(cpus),
        interconnect=link,
    ),
    st.sampled_from(("p1", "p2", "p3")),
    st.sampled_from(("z1", "z2", None)),
    st.sampled_from(GPUS),
    st.sampled_from((1, 2, 8)),
    st.sampled_from((4, 16, 64)),
    st.sampled_from(list(Interconnect)),
)
simple = st.builds(
    Requirements,
    gpu=st.sampled_from((None, "H100", "A100", "A10G")),
    gpus_per_node=st.sampled_from((None, 1, 8)),
    min_gpu_memory_gib=st.sampled_from((None, 24.0, 80.0)),
    min_tflops_per_gpu=st.sampled_from((None, 100.0, 500.0)),
    interconnect=st.sampled_from((None, Interconnect.NVLINK)),
    min_cpus=st.sampled_from((None, 16.0)),
    providers_allow=st.sampled_from(((), ("p1", "p2"))),
    providers_deny=st.sampled_from(((), ("p2",))),
    zones=st.sampled_from(((), ("z1",))),
    instance_type=st.sampled_from((None, "A10G-1-4", "L4-8-64")),
)


def _with_alternatives(
    base: Requirements, alts: list[Requirements], ordered: bool = False
) -> Requirements:
    fields = {
        name: getattr(base, name) for name in base.__dataclass_fields__ if name != "gpu_names"
    }
    return Requirements(**{**fields, "alternatives": tuple(alts), "ordered": ordered})


requirements = st.builds(_with_alternatives, simple, st.lists(simple, max_size=3), st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(offerings, min_size=1, max_size=25), requirements)
def test_the_ranking_and_the_per_offering_check_agree(
    offers: list[Offering], req: Requirements
) -> None:
    ranking = rank(MarketView(0.0, tuple(offers)), req, kinds=["on-demand"])
    failures = [req.failed(o) for o in offers]
    for name in FILTERS:
        assert ranking.excluded.get(name, 0) == sum(name in f for f in failures), name
    assert {c.offering for c in ranking.candidates} == {
        o for o, f in zip(offers, failures, strict=True) if not f
    }
    # Ordered alternatives: each candidate's preference is the per-offering one, and the
    # ranking never puts a later alternative's candidate before an earlier one's.
    preferences = [c.preference for c in ranking.candidates]
    assert preferences == [req.preference(c.offering) for c in ranking.candidates]
    assert preferences == sorted(preferences)
