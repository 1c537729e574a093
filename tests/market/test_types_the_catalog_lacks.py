"""Types the catalog lacks (AWS p2.*, K80): the message says why --gpu finds nothing, and a
catalog imported later fills the stored points' GPU on the next ``spothop market import``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.db import make_engine
from spothop.market import price_store
from spothop.market.price_store import PriceStore
from tests.conftest import shared_path

P2_FILE = ("prices", "aws-describe-spot-price-history-raw", "us-east-2", "p2.8xlarge.json")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")


def test_fill_gpu_counts_after_the_catalog_learns_a_type(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/p.db")
    before = PriceStore(engine=engine, gpu_lookup=lambda p, t: None)
    added = before.import_file(shared_path(*P2_FILE)).added
    assert added > 0 and before.types_without_gpu() == ["aws/p2.8xlarge"]
    assert before.fill_gpu_counts() == 0  # the catalog still does not know it
    after = PriceStore(
        engine=engine, gpu_lookup=lambda p, t: ("K80", 8) if t == "p2.8xlarge" else None
    )
    assert after.fill_gpu_counts() == added
    assert after.types_without_gpu() == [] and after.fill_gpu_counts() == 0
    points = after.points(gpus=["K80"])
    assert len(points) == added
    assert all(
        p.gpu_count == 8 and p.usd_per_gpu_second == pytest.approx(p.price_usd_per_hour / 8 / 3600)
        for p in points
    )


def test_gpu_without_catalog_type_says_why_and_how_to_fix(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(price_store, "catalog_gpu_lookup", lambda: lambda p, t: None)
    code, _, err = run(capsys, "market", "import", str(shared_path(*P2_FILE)))
    assert (
        code == 0
        and "aws/p2.8xlarge" in err
        and "spothop catalog import vms.csv --provider aws" in err
    )
    code, out, _ = run(capsys, "market", "prices", "--gpu", "K80", "--since", "2019-01-01")
    assert code == 1
    assert "aws/p2.8xlarge" in out and "does not list" in out and "spothop catalog import" in out

    # The user imports a catalog listing p2.8xlarge (8 K80s), then imports again: the stored points match.
    monkeypatch.setattr(
        price_store,
        "catalog_gpu_lookup",
        lambda: lambda p, t: ("K80", 8) if t == "p2.8xlarge" else None,
    )
    code, _, err = run(capsys, "market", "import", str(shared_path(*P2_FILE)))
    assert code == 0 and "got their GPU" in err
    code, out, _ = run(
        capsys, "market", "prices", "--gpu", "K80", "--since", "2019-01-01", "--json"
    )
    rows = json.loads(out)
    assert code == 0 and rows and all(r["gpu"] == "K80" and r["gpu_count"] == 8 for r in rows)


def test_gpu_message_stays_short_when_every_type_is_known(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(
        capsys,
        "market",
        "import",
        str(
            shared_path(
                "prices", "aws-describe-spot-price-history-raw", "us-east-2", "p3.8xlarge.json"
            )
        ),
    )
    code, out, _ = run(capsys, "market", "prices", "--gpu", "K80", "--since", "2019-01-01")
    assert code == 1 and "No prices for K80" in out and "does not list" not in out
