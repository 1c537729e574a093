import subprocess
import sys

import pytest

from tests.waiting import scaled


def test_offers_h100x8_spot_json_from_three_providers_sorted(cli):
    result = cli("offers", "--gpu", "H100", "--count", "8", "--spot", "--json")
    assert result.code == 0, result.err
    rows = result.json()
    assert len({r["provider"] for r in rows}) >= 3
    per_gpu = [r["usd_per_gpu_hour"] for r in rows]
    assert per_gpu == sorted(per_gpu)
    first = rows[0]
    for key in (
        "usd_per_gpu_second",
        "usd_per_nominal_tflops_hour",
        "usd_per_effective_tflops_hour",
        "effective_tflops_per_gpu",
        "price_date",
        "currency",
        "interconnect",
        "zone",
    ):
        assert key in first
    assert first["usd_per_gpu_second"] == pytest.approx(first["usd_per_gpu_hour"] / 3600)
    assert first["market"] == "spot"


def test_offers_table_is_readable(cli):
    result = cli("offers", "--gpu", "A10G", "--limit", "5")
    assert result.code == 0
    assert "A10G" in result.out and "$/GPU-h" in result.out and "5 spot offerings" in result.out


def test_on_demand_and_sort_by_tflops(cli):
    rows = cli("offers", "--on-demand", "--sort", "tflops", "--json").json()
    values = [r["usd_per_effective_tflops_hour"] for r in rows]
    assert values == sorted(values) and all(r["market"] == "on-demand" for r in rows)


def test_unknown_gpu_is_one_clear_line_with_suggestions(cli):
    result = cli("offers", "--gpu", "H1OO")
    assert result.code == 2
    assert "unknown GPU 'H1OO'" in result.err and "did you mean" in result.err
    assert "Traceback" not in result.err


def test_bad_flag_value_is_a_usage_error(cli):
    result = cli("offers", "--count", "many")
    assert result.code == 2 and "Invalid value for '--count'" in result.err


def test_nothing_matching_says_so_and_exits_0_with_or_without_json(cli):
    # docs/cli.md: an empty result is listed (0), and --json never changes the exit code
    result = cli("offers", "--gpu", "K80", "--max-price", "0.0001")
    assert result.code == 0 and "No spot offerings match" in result.out
    as_json = cli("offers", "--gpu", "K80", "--max-price", "0.0001", "--json")
    assert as_json.code == result.code and as_json.json() == []


def test_gpus_lists_models_and_aliases(cli):
    rows = cli("gpus", "--json").json()
    assert len(rows) >= 25
    h100 = cli("gpus", "H100", "--json").json()
    assert {r["family"] for r in h100} == {"H100"} and len(h100) >= 3


def test_installed_entry_point_has_help_everywhere(cli):
    # One real process proves the entry point starts; the subcommands' help is the same code
    # in-process (each extra interpreter cost ~4 s on the loaded 2-core CI machine).
    done = subprocess.run(
        [sys.executable, "-m", "spothop.cli.main", "--help"],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    for args in (
        ["offers", "--help"],
        ["catalog", "--help"],
        ["catalog", "import", "--help"],
        ["catalog", "diff", "--help"],
        ["gpus", "--help"],
    ):
        result = cli(*args)
        assert result.code == 0, (args, result.err)
        assert "Usage" in result.out
