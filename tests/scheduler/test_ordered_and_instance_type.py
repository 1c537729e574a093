"""SkyPilot's ``instance_type`` and ``ordered`` reach placement: one named type only, on the
providers that sell it; ordered alternatives in preference order, not cheapest first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.errors import EXIT_BAD_INPUT
from spothop.jobs.spec import load_job
from spothop.providers.fake.factories import make_offering
from spothop.scheduler.market_view import MarketView
from spothop.scheduler.placement import rank
from spothop.scheduler.requirements import Requirements
from spothop.scheduler.tolerance import Situation, policy_for

A10G = {"instance_type": "g5.xlarge", "gpu": "A10G", "gpu_count": 1}
L4 = {"instance_type": "g6.xlarge", "gpu": "L4", "gpu_count": 1}
A10G_4 = {"instance_type": "g5.12xlarge", "gpu": "A10G", "gpu_count": 4}


def _offerings() -> tuple:  # type: ignore[type-arg]
    return (
        make_offering(provider="p1", zone="z1", spot_price_usd_per_hour=1.0, **A10G),
        make_offering(provider="p1", zone="z2", spot_price_usd_per_hour=0.2, **L4),
        make_offering(provider="p1", zone="z1", spot_price_usd_per_hour=3.0, **A10G_4),
        make_offering(provider="p2", zone="z9", spot_price_usd_per_hour=0.1, **L4),
    )


def test_an_instance_type_plans_only_that_type_with_its_own_gpu_count() -> None:
    view = MarketView(0.0, _offerings())
    spec = load_job(
        {"name": "t", "run": "x", "resources": {"instance_type": "g5.12xlarge", "use_spot": True}}
    )
    ranking = rank(view, spec.requirements())
    assert [c.offering.instance_type for c in ranking.candidates] == ["g5.12xlarge"]
    assert ranking.excluded["instance_type"] == 3
    # The type's GPUs are the count: a 4-GPU type is not refused for want of a count.
    assert spec.requirements().node_gpus is None


def test_an_instance_type_sold_by_several_providers_is_planned_on_each() -> None:
    view = MarketView(0.0, _offerings())
    ranking = rank(view, Requirements(instance_type="g6.xlarge"))
    assert {c.offering.provider for c in ranking.candidates} == {"p1", "p2"}


def test_ordered_alternatives_put_the_first_usable_before_a_cheaper_later_one() -> None:
    view = MarketView(0.0, _offerings())
    text = {
        "name": "t",
        "run": "x",
        "resources": {
            "use_spot": True,
            "ordered": [{"accelerators": "A10G:1"}, {"accelerators": "L4:1"}],
        },
    }
    ordered = rank(view, load_job(text).requirements())
    assert [c.offering.gpu for c in ordered.candidates] == ["A10G", "L4", "L4"]
    assert [c.preference for c in ordered.candidates] == [0, 1, 1]
    # The same alternatives under any_of: the cheapest useful first.
    text["resources"]["any_of"] = text["resources"].pop("ordered")  # type: ignore[index]
    anyof = rank(view, load_job(text).requirements())
    assert anyof.candidates[0].offering.gpu == "L4"


def test_an_unusable_first_choice_falls_to_the_next_in_order() -> None:
    view = MarketView(0.0, _offerings())
    req = load_job(
        {
            "name": "t",
            "run": "x",
            "resources": {
                "use_spot": True,
                "ordered": [{"accelerators": "H100:8"}, {"accelerators": "L4:1"}],
            },
        }
    ).requirements()
    best = rank(view, req).candidates[0]
    assert best.offering.gpu == "L4" and best.preference == 1


def test_a_market_auto_choice_keeps_the_preference_across_spot_and_on_demand() -> None:
    view = MarketView(0.0, _offerings())
    req = Requirements(
        alternatives=(Requirements(gpu="A10G", gpus_per_node=1), Requirements(gpu="L4")),
        ordered=True,
    )
    spot = list(rank(view, req, kinds=["spot"]).candidates)
    on_demand = list(rank(view, req, kinds=["on-demand"]).candidates)
    choice = policy_for("balanced").choose(spot, on_demand, Situation(now=0.0, prefer_spot=False))
    assert [c.offering.gpu for c in choice.candidates][:2] == ["A10G", "A10G"]


def test_plan_of_an_instance_type_file_lists_only_that_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("resources: {instance_type: g5.xlarge, use_spot: true}\nrun: python x.py\n")
    capsys.readouterr()
    code = main(["plan", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = json.loads(out)
    types = {c["instance_type"] for c in plan["candidates"]}
    assert types == {"g5.xlarge"}
    assert "read as a SkyPilot task" in err


def test_plan_of_an_ordered_file_lists_the_first_choice_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "task.yaml"
    # The demo world sells both; L4 is the cheaper useful work, A10G the first preference.
    path.write_text(
        "resources:\n  use_spot: true\n  ordered:\n"
        "    - {accelerators: A10G:1}\n    - {accelerators: L4:1}\nrun: python x.py\n"
    )
    capsys.readouterr()
    assert main(["plan", str(path), "--json"]) == 0
    gpus = [c["gpu"] for c in json.loads(capsys.readouterr().out)["candidates"]]
    assert gpus and gpus[0] == "A10G"
    assert gpus == sorted(gpus, key=lambda g: g != "A10G")  # every A10G before any L4
    assert main(["plan", str(path)]) == 0
    assert "your choices in order" in " ".join(capsys.readouterr().out.split())


def test_plan_fills_a_null_env_from_the_command_line_or_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("resources: {use_spot: true}\nenvs: {HF_TOKEN: null}\nrun: python x.py\n")
    capsys.readouterr()
    assert main(["plan", str(path)]) == EXIT_BAD_INPUT
    assert "envs.HF_TOKEN" in capsys.readouterr().err
    assert main(["plan", str(path), "--json", "--env", "HF_TOKEN=hf_x"]) == 0


def _entries_rank(key: str, entries: list[dict[str, object]]) -> list[tuple[str, str, int]]:
    """(GPU, market, preference) of every candidate of a SkyPilot file with these entries, spot
    and on-demand both asked (the job's market is auto when the entries' use_spot differ)."""
    view = MarketView(0.0, _offerings())
    spec = load_job({"name": "t", "run": "x", "resources": {key: entries}})
    assert spec.market.value == "auto"
    req = spec.requirements()
    spot = list(rank(view, req, kinds=["spot"]).candidates)
    on_demand = list(rank(view, req, kinds=["on-demand"]).candidates)
    choice = policy_for("balanced").choose(spot, on_demand, Situation(now=0.0, prefer_spot=False))
    return [(c.offering.gpu, c.market_kind.value, c.preference) for c in choice.candidates]


def test_an_ordered_spot_entry_before_an_on_demand_one_keeps_spot_first() -> None:
    ranked = _entries_rank(
        "ordered",
        [{"accelerators": "L4:1", "use_spot": True}, {"accelerators": "L4:1", "use_spot": False}],
    )
    assert ranked and {m for _, m, p in ranked if p == 0} == {"spot"}
    assert {m for _, m, p in ranked if p == 1} == {"on-demand"}
    assert [p for _, _, p in ranked] == sorted(p for _, _, p in ranked)  # spot, then on-demand


def test_an_ordered_on_demand_entry_first_is_tried_before_cheaper_spot() -> None:
    ranked = _entries_rank(
        "ordered",
        [{"accelerators": "L4:1", "use_spot": False}, {"accelerators": "L4:1", "use_spot": True}],
    )
    assert ranked[0][1] == "on-demand" and ranked[-1][1] == "spot"


def test_each_any_of_entry_keeps_to_its_own_market() -> None:
    ranked = _entries_rank(
        "any_of",
        [{"accelerators": "L4:1", "use_spot": True}, {"accelerators": "A10G:1", "use_spot": False}],
    )
    assert {(gpu, market) for gpu, market, _ in ranked} == {("L4", "spot"), ("A10G", "on-demand")}
