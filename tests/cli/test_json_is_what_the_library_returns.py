"""Every ``--json`` prints the library type's own dict (``to_dict()``), never a row built by the CLI."""

from __future__ import annotations

import json

from spothop.checkpoint.admin import CheckpointInfo, VerifyResult
from spothop.checkpoint.gc import GcPlan
from spothop.providers.local.metadata.state import ScheduledEvent
from spothop.queue import ShardState
from spothop.queue.model import ShardRecord
from spothop.resources.catalog import OfferQuery, load_catalog
from spothop.resources.catalog_summary import summarise
from spothop.resources.diff import change_json, diff_catalogs
from spothop.resources.gpus import gpu_catalog
from spothop.resources.sources.skypilot import ImportReport
from spothop.resources.topology import parse_file, topology_json
from spothop.testing import make_offering
from tests.conftest import shared_path


def _same(printed: str, expected: object) -> None:
    assert json.loads(printed) == json.loads(json.dumps(expected, default=str))


def test_offers_json_is_each_offerings_dict(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("offers", "--gpu", "H100", "--limit", "3", "--json")
    assert result.code == 0, result.err
    found = load_catalog().query(OfferQuery(gpu="H100", spot=True, limit=3))
    _same(result.out, [o.to_dict(True) for o in found])
    assert json.loads(result.out)[0]["market"] == "spot"


def test_gpus_json_is_each_models_dict(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("gpus", "--json")
    _same(result.out, [m.to_dict() for m in gpu_catalog()])
    assert all("nominal_tflops" in m for m in json.loads(result.out))


def test_catalog_summary_json_is_each_providers_summary(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("catalog", "summary", "--json")
    _same(result.out, [s.to_dict() for s in summarise(load_catalog())])


def test_topology_json_carries_its_cost_matrix_and_choice(cli) -> None:  # type: ignore[no-untyped-def]
    path = shared_path("nvidia-smi", "topo", "dgx_a100_40gb_topo_PARTIAL.txt")
    result = cli("topo", "parse", str(path), "--json", "--choose", "2")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    _same(result.out, topology_json(parse_file(path), data["chosen"]))
    assert data["cost_matrix"] and len(data["chosen"]) == 2


def test_the_other_types_own_their_dicts() -> None:
    offering = make_offering()
    report = ImportReport(path="vms.csv", provider="fake", rows=1, offerings=[offering])
    assert report.to_dict()["imported"] == 1 and report.to_dict()["saved_to"] is None
    (change,) = diff_catalogs(
        [offering], [offering.model_copy(update={"spot_price_usd_per_hour": 2.0})]
    )
    assert change.to_dict() == change_json(change) and change.to_dict()["kind"] == change.kind
    record = ShardRecord("s1", {"n": 1}, ShardState.DEAD, 3, 3, 3, 0, None, "boom")
    assert record.to_dict()["state"] == "dead" and record.to_dict()["last_error"] == "boom"
    assert CheckpointInfo("step-1", "committed", 1).to_dict()["status"] == "committed"
    assert (
        VerifyResult("step-1", 1, "durable", False, "bad checksum").to_dict()["reason"]
        == "bad checksum"
    )
    plan = GcPlan(
        kept=["a"],
        deleted=["b"],
        partial_deleted=[],
        damaged=[("c", "truncated")],
        newest_restorable="a",
    )
    assert json.loads(json.dumps(plan.to_dict()))["damaged"] == [["c", "truncated"]]
    event = ScheduledEvent("e-1", "instance-stop", 10.0, 20.0)
    assert event.to_dict() == {
        "event_id": "e-1",
        "code": "instance-stop",
        "not_before": 10.0,
        "not_after": 20.0,
        "state": "active",
        "description": "",
    }
