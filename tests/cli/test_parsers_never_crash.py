"""Property tests: any input to spothop's parsers parses to a valid value or raises spothop's own error.

World YAML, batch job spec YAML, price files (through ``spothop market import``)
and metadata responses (the agent's notice watchers) are fed arbitrary and
mutated inputs. Each example must end in a value that validates, or in a
:class:`~spothop.errors.SpothopError` that names the file (and, for YAML, the
key) — never another exception, never a traceback, and within a deadline per
example. Examples are bounded so that the whole module runs in well under a
minute on a loaded machine.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spothop.errors import SpothopError

EXAMPLES = 60
DEADLINE_MS = 5000  # per example; ~50 ms on an idle machine, room for a loaded 2-core one
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=DEADLINE_MS,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Values a careless or hostile file holds in place of a good one.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["[/x]", "[red]", ".nan", "-.inf", "1e999", "ünïcødé", "../..", "\x00"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mutate(document: Any, path: list[Any], value: Any) -> Any:
    """``document`` with the node at ``path`` (indices into its dicts and lists, taken modulo) replaced."""
    if not path or not isinstance(document, dict | list) or not document:
        return value
    if isinstance(document, dict):
        keys = sorted(document)
        key = keys[path[0] % len(keys)]
        return {**document, key: _mutate(document[key], path[1:], value)}
    index = path[0] % len(document)
    return [*document[:index], _mutate(document[index], path[1:], value), *document[index + 1 :]]


PATHS = st.lists(st.integers(min_value=0, max_value=50), max_size=6)


def _dump(document: Any) -> str:
    try:
        return yaml.safe_dump(document, allow_unicode=True)
    except yaml.YAMLError:
        return json.dumps(document, default=str)


# -- world files ---------------------------------------------------------------------------------

WORLD: dict[str, Any] = {
    "seed": 1,
    "speed": 10,
    "clouds": [
        {
            "name": "aws-sim",
            "protocol": "aws",
            "catalog": "aws",
            "notice_lead_time_s": 120,
            "advance_notice_s": 300,
            "launch_delay_s": 1,
            "terminate_grace_s": 5,
            "locations": ["us-east-1a", "us-east-1b"],
            "instance_types": ["g5.xlarge"],
            "market": {
                "synthetic": {
                    "mean_time_between_preemptions_s": 21600,
                    "mean_outage_s": 1800,
                    "capacity": 4,
                    "price_std_ratio": 0.1,
                    "tick_s": 60,
                }
            },
            "markets": [
                {
                    "location": "us-east-1a",
                    "instance_type": "g5.xlarge",
                    "start_offset_s": 0,
                    "synthetic": {"mean_time_between_preemptions_s": 3600, "mean_outage_s": 600},
                }
            ],
        }
    ],
}


def _check_world(text: str) -> None:
    from spothop.providers.local.world import parse_world

    try:
        world = parse_world(text, "w.yaml")
        world.market_sources  # noqa: B018 - builds every market: the values must be usable, not only parse
    except SpothopError as exc:
        assert "w.yaml" in str(exc)
        return
    assert 0 < world.speed <= 100_000 and math.isfinite(world.speed)
    for cloud in world.spec.clouds:
        assert math.isfinite(cloud.notice_lead_time_s) and 0 <= cloud.notice_lead_time_s <= 86_400


@SETTINGS
@given(path=PATHS, value=VALUES)
def test_a_mutated_world_file_loads_or_names_the_file(path: list[int], value: Any) -> None:
    _check_world(_dump(_mutate(WORLD, path, value)))


@SETTINGS
@given(text=st.text(max_size=300))
def test_any_text_as_a_world_file_loads_or_names_the_file(text: str) -> None:
    _check_world(text)


# -- batch job specs -----------------------------------------------------------------------------

SPEC: dict[str, Any] = {
    "name": "embed",
    "input": {"files": ["a.bin", "b.bin"], "records_per_shard": 10},
    "command": ["cat"],
    "output": "out/",
    "queue": "sqlite:///q.db",
    "lease_s": 60,
    "max_attempts": 3,
}


@SETTINGS
@given(path=PATHS, value=VALUES, raw=st.one_of(st.none(), st.binary(max_size=200)))
def test_a_mutated_batch_spec_loads_or_names_the_file(
    path: list[int], value: Any, raw: bytes | None
) -> None:
    from spothop.batch import load_spec

    with tempfile.TemporaryDirectory() as folder:
        spec_path = Path(folder) / "spec.yaml"
        if raw is None:
            spec_path.write_text(_dump(_mutate(SPEC, path, value)), encoding="utf-8")
        else:
            spec_path.write_bytes(raw)
        try:
            spec = load_spec(spec_path)
        except SpothopError as exc:
            assert str(spec_path) in str(exc)
            return
    assert (
        math.isfinite(spec.lease_s)
        and 0 < spec.lease_s <= 86_400
        and 1 <= spec.max_attempts <= 10_000
    )


# -- price files, through `spothop market import` -----------------------------------------------

PRICE_HEADER = "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice"
PRICE_ROW = ["2020-01-01T00:00:00.000Z", "us-east-1a", "p3.2xlarge", "Linux/UNIX", "0.918"]
FIELD_VALUES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "nan",
            "inf",
            "-1",
            "1e308",
            "9999-12-31T23:59:59Z",
            "0001-01-01T00:00:00Z",
            "",
            '"',
            ",",
            "[/x]",
        ]
    ),
)


@pytest.fixture(scope="module")
def migrated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home whose store is migrated and empty: each example starts from a copy of it, as fresh
    as a new home but without running every migration again (~0.2 s of a loaded core each)."""
    from spothop.market.price_store import PriceStore

    home = tmp_path_factory.mktemp("price-home")
    PriceStore(f"sqlite:///{home / 'spothop.db'}").engine.dispose()  # written through to the file
    yield home


@SETTINGS
@given(
    rows=st.lists(st.tuples(st.integers(min_value=0, max_value=4), FIELD_VALUES), max_size=6),
    header=st.booleans(),
    tail=st.text(max_size=40),
)
def test_a_mutated_price_file_imports_or_is_refused_with_its_name(
    rows: list[tuple[int, str]],
    header: bool,
    tail: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    migrated_home: Path,
) -> None:
    from spothop.cli.main import main

    with tempfile.TemporaryDirectory() as folder:
        monkeypatch.setenv("SPOTHOP_HOME", folder)
        shutil.copy(migrated_home / "spothop.db", Path(folder) / "spothop.db")
        lines = [PRICE_HEADER] if header else []
        for column, value in rows:
            row = list(PRICE_ROW)
            row[column] = value
            lines.append(",".join(row))
        prices = Path(folder) / "prices.csv"
        prices.write_text("\n".join(lines) + "\n" + tail, encoding="utf-8")
        capsys.readouterr()
        code = main(["market", "import", str(prices)])
        err = capsys.readouterr().err
    assert code in (0, 1, 2, 5), err
    assert "Traceback" not in err
    if code == 2:
        assert "prices.csv" in err


# -- metadata responses: the agent's notice watchers ---------------------------------------------

STATUSES = st.sampled_from(
    [200, 200, 200, 201, 204, 301, 400, 401, 403, 404, 404, 405, 429, 500, 503]
)
BODIES = st.one_of(
    st.text(max_size=200),
    st.builds(json.dumps, VALUES),
    st.sampled_from(
        [
            '{"action": "terminate", "time": "not a time"}',
            '{"Events": [{"EventType": "Preempt"}]}',
            '{"Events": null}',
            "TRUE",
            "2099-01-01T00:00:00Z",
            "1e999",
            '{"action": "stop", "time": 1}',
            '[{"Code": "instance-stop", "NotBefore": "31 Feb 2019 09:00:43 GMT", "State": "active"}]',
        ]
    ),
)


@SETTINGS
@given(
    protocol=st.sampled_from(["aws", "gcp", "azure", "aliyun", "tencent", "volcengine"]),
    replies=st.lists(st.tuples(STATUSES, BODIES), min_size=1, max_size=6),
)
def test_notice_watchers_turn_any_answer_into_notices_or_a_notice_endpoint_error(
    protocol: str, replies: list[tuple[int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import spothop.agent.notices as notices
    from spothop.agent.errors import NoticeEndpointError
    from spothop.agent.notices._http import Reply

    answers = iter(replies * 20)  # a poll may make several requests (a token, then the paths)

    def fake_fetch(
        method: str, url: str, timeout_s: float, headers: Any = None, body: Any = None
    ) -> Reply:
        status, text = next(answers)
        return Reply(status, text, {})

    for module in (
        notices.base,
        notices.aws,
        notices.azure,
        notices.aliyun,
    ):  # the modules that call fetch
        monkeypatch.setattr(module, "fetch", fake_fetch)
    watcher = notices.WATCHERS[protocol](
        "http://169.254.169.254", poll_interval_s=0.01, timeout_s=0.05
    )
    for call in (watcher.poll, watcher.self_check):
        try:
            result = call()
        except NoticeEndpointError:
            continue
        if isinstance(result, list):
            for notice in result:
                assert math.isfinite(notice.deadline) if notice.deadline is not None else True
