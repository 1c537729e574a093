"""The AWS spot price history formats: the shared CSV and CLI JSON files, bad records, region names."""

from datetime import UTC, datetime

import pytest

from spothop.market import TraceError
from spothop.market.sources.aws import AwsCsv, AwsJson, region_of_zone
from tests.conftest import shared_path

HEADER = "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice\n"


def test_shared_csv_imports_every_record():
    points, problems = AwsCsv().read(
        shared_path("prices", "aws-spot-price-history-p2-p3-2019-2020.csv")
    )
    assert len(points) == 16_560
    assert problems == []
    first = points[0]
    assert first.timestamp == datetime(2019, 12, 20, 6, 39, 10, tzinfo=UTC)
    assert (first.zone, first.instance_type, first.product) == (
        "eu-west-1c",
        "p3.16xlarge",
        "Linux/UNIX",
    )
    assert first.price_usd_per_hour == 26.44
    assert len({p.zone for p in points}) == 19


def test_shared_cli_json_files_import():
    files = sorted(
        shared_path("prices", "aws-describe-spot-price-history-raw", "us-east-2").glob("*.json")
    )
    assert files
    for path in files:
        points, problems = AwsJson().read(path)
        assert points and problems == [], path.name
        assert all(p.zone.startswith("us-east-2") for p in points)


def test_bad_csv_lines_are_reported_by_line_and_the_rest_imported(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(
        HEADER
        + "2020-01-01T00:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.918\n"  # line 2: good
        + "2020-01-01T00:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.918\n"  # 3: duplicate
        + "2020-01-01T01:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,abc\n"  # 4: bad number
        + "2020-01-01T02:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,0\n"  # 5: price <= 0
        + "yesterday,us-east-1a,p3.2xlarge,Linux/UNIX,1.0\n"  # 6: time
        + "2020-01-01T03:00:00,us-east-1b,p3.2xlarge,Linux/UNIX,1.5\n"  # 7: good, naive = UTC
        + "2020-01-01T04:00:00Z,us-east-1a,p3.2xlarge\n"  # 8: too short
    )
    points, problems = AwsCsv().read(path)
    assert [p.price_usd_per_hour for p in points] == [0.918, 1.5]
    assert points[1].timestamp.tzinfo is not None
    assert [(p.line, p.reason.split()[0]) for p in problems] == [
        (3, "duplicate"),
        (4, "bad"),
        (5, "price"),
        (6, "unparsable"),
        (8, "missing"),
    ]
    assert str(problems[0]).endswith("p.csv:3: duplicate of line 2")


def test_bad_json_records_are_reported_by_record(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(
        '{"SpotPriceHistory": ['
        '{"AvailabilityZone": "us-east-2a", "InstanceType": "p2.xlarge", "ProductDescription": "Linux/UNIX",'
        ' "SpotPrice": "0.27", "Timestamp": "2020-02-27T01:42:32.000Z"},'
        '{"AvailabilityZone": "us-east-2a", "InstanceType": "p2.xlarge", "ProductDescription": "Linux/UNIX",'
        ' "SpotPrice": "-1", "Timestamp": "2020-02-27T02:42:32.000Z"}, 7]}'
    )
    points, problems = AwsJson().read(path)
    assert len(points) == 1
    assert [(p.record, p.line) for p in problems] == [(2, None), (3, None)]


def test_unreadable_files_raise(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        AwsCsv().read(tmp_path / "absent.csv")
    bad_header = tmp_path / "h.csv"
    bad_header.write_text("time,zone,price\n")
    with pytest.raises(TraceError, match="header lacks"):
        AwsCsv().read(bad_header)
    not_cli = tmp_path / "x.json"
    not_cli.write_text('{"data": []}')
    with pytest.raises(TraceError, match="SpotPriceHistory"):
        AwsJson().read(not_cli)


@pytest.mark.parametrize(
    ("zone", "region"),
    [
        ("us-east-1a", "us-east-1"),
        ("us-gov-west-1b", "us-gov-west-1"),
        ("ap-southeast-2c", "ap-southeast-2"),
        ("us-west-2-lax-1a", "us-west-2"),  # a Local Zone
        ("not-a-zone", "not-a-zone"),
    ],
)
def test_an_aws_zone_names_its_region(zone: str, region: str) -> None:
    assert region_of_zone(zone) == region


def test_every_point_is_keyed_to_its_zone_and_region() -> None:
    source = AwsCsv()
    points = source.read(shared_path("prices", "aws-spot-price-history-p2-p3-2019-2020.csv")).points
    keys = {source.key(p) for p in points}
    assert {(k.market.region, k.market.zone) for k in keys if k.market.zone == "eu-west-1c"} == {
        ("eu-west-1", "eu-west-1c")
    }
    assert all(
        k.market.provider == "aws" and k.market.zone.startswith(k.market.region) for k in keys
    )
    assert points[0].line == 2 and points[-1].line == 16_561


def test_a_json_point_knows_its_record_number() -> None:
    path = shared_path(
        "prices", "aws-describe-spot-price-history-raw", "us-east-2", "p3.2xlarge.json"
    )
    points = AwsJson().read(path).points
    assert [p.record for p in points[:3]] == [1, 2, 3] and all(p.line is None for p in points)
