"""Every route of the server (read from the app itself) under hostile input: no token, a wrong
token, another job's agent token, bodies that are huge, malformed, deeply nested or of the wrong
type, unknown fields, and odd path ids. Each answer is a 4xx whose body is one JSON error line
naming the problem; never a 5xx, never a hang, never a secret echoed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import FAKE_CREDENTIALS, JOB_SPEC

VICTIM_JOB, VICTIM_INSTANCE = "j-victim0", "i-victim"
OTHER_JOB, OTHER_INSTANCE = "j-other00", "i-other"
SHA = "0" * 64
WRONG_TOKENS = (
    "nonsense",
    "shp_u_0123456789abcdef_notthesecretatall",
    "shp_a_0123456789abcdef_notthesecretatall",
    "x" * 10_000,
)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from fastapi.testclient import TestClient

    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    home: Path = tmp_path_factory.mktemp("hostile-home")
    monkey = pytest.MonkeyPatch()
    monkey.setenv("SPOTHOP_HOME", str(home))
    for name, value in FAKE_CREDENTIALS.items():
        monkey.setenv(name, value)
    app = create_app(
        Settings(db_url=f"sqlite:///{home / 'server.db'}", auth_failures_per_window=10**6)
    )
    _, user = app.state.tokens.create_user("hostile", "hostile")
    victim = app.state.tokens.issue_agent_token(VICTIM_JOB, VICTIM_INSTANCE)
    other = app.state.tokens.issue_agent_token(OTHER_JOB, OTHER_INSTANCE)
    _, stranger = app.state.tokens.create_user("stranger", "elsewhere")
    client = TestClient(app, raise_server_exceptions=False)
    made = client.post(
        "/v1/jobs",
        headers={"Authorization": f"Bearer {user}"},
        json={"spec": JOB_SPEC.format(name="hostile"), "filename": "hostile.yaml"},
    )
    assert made.status_code == 201, made.text
    yield {
        "app": app,
        "client": client,
        "user": user,
        "victim": victim,
        "other": other,
        "stranger": stranger,
        "job_id": made.json()["job_id"],
        "secrets": [user, victim, other, stranger, *FAKE_CREDENTIALS.values()],
    }
    client.close()
    monkey.undo()


def _routes() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(method, path template) of every route the app serves, the dashboard's included; and of
    those that take a body."""
    import tempfile

    from fastapi.routing import APIRoute

    from spothop.server import dashboard
    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    with tempfile.TemporaryDirectory() as folder:
        monkey = pytest.MonkeyPatch()
        monkey.setenv("SPOTHOP_HOME", folder)
        try:
            document = create_app(Settings(db_url=f"sqlite:///{folder}/routes.db")).openapi()
        finally:
            monkey.undo()
    served = {(m.upper(), p) for p, item in document["paths"].items() for m in item}
    served |= {
        (m, r.path)
        for r in dashboard.router.routes
        if isinstance(r, APIRoute)
        for m in r.methods
        if r.path != "/dashboard/api/stream"  # a stream: its resume point is tested apart
    }
    assert len(served) > 30, served  # every route is found, not a few
    bodies = {
        (m.upper(), p)
        for p, item in document["paths"].items()
        for m, operation in item.items()
        if "requestBody" in operation
    }
    return sorted(served), sorted(bodies)


ROUTES, BODY_ROUTES = _routes()
OPEN = {
    "/healthz",
    "/readyz",
    "/openapi.json",
    "/metrics",
    "/dashboard",
    "/v1/dist/{sha256}/{filename}",
}
AGENT_ROUTES = [r for r in ROUTES if r[1].startswith("/v1/agents")]


def _fill(path: str, **ids: str) -> str:
    values = {"instance_id": VICTIM_INSTANCE, "sha256": SHA, "filename": "x.whl", "name": "jobs"}
    values.update(ids)
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "x"), path)


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def assert_clean_refusal(response: Any, secrets: list[str], *statuses: int) -> dict[str, Any]:
    """A 4xx (one of ``statuses`` when given), one JSON line naming the problem, no secret."""
    text = response.text
    assert 400 <= response.status_code < 500, (response.status_code, text[:500])
    if statuses:
        assert response.status_code in statuses, (response.status_code, text[:500])
    assert "Traceback" not in text and "\n" not in text.strip(), text[:500]
    body = response.json()
    message = body["error"]["message"]
    assert isinstance(message, str) and message and "\n" not in message, body
    for secret in secrets:
        assert secret not in text, f"a secret was echoed: {text[:300]}"
    return body


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[1] not in OPEN])
@pytest.mark.parametrize(
    "token", [None, *WRONG_TOKENS], ids=["none", "word", "user", "agent", "huge"]
)
def test_a_route_refuses_a_missing_or_unknown_token(
    method: str, path: str, token: str | None, hostile: dict[str, Any]
) -> None:
    response = hostile["client"].request(
        method, _fill(path, job_id=hostile["job_id"]), headers=_auth(token), json={}
    )
    # 401; or 422 where the route reads its body before the token (the batched heartbeat writes
    # check the token with their batch; a request without any token is 401 before that)
    statuses = (401,) if token is None else (401, 422)
    assert_clean_refusal(response, [*hostile["secrets"], token or "-"], *statuses)


@pytest.mark.parametrize(("method", "path"), AGENT_ROUTES)
def test_an_agent_route_refuses_another_jobs_agent_token(
    method: str, path: str, hostile: dict[str, Any]
) -> None:
    body = {
        "instance_id": VICTIM_INSTANCE,
        "job_id": VICTIM_JOB,
        "events": [],
        "worker_id": "w",
        "shard_ids": [],
        "request_ids": [],
        "lines": [],
    }
    response = hostile["client"].request(
        method, _fill(path, request_id="r-1"), headers=_auth(hostile["other"]), json=body
    )
    # 403 where the path names the victim; 422 where the body is not even this route's shape
    assert_clean_refusal(response, hostile["secrets"], 403, 422)


def test_a_registration_for_another_instance_is_forbidden(hostile: dict[str, Any]) -> None:
    response = hostile["client"].post(
        "/v1/agents/register",
        headers=_auth(hostile["other"]),
        json={"instance_id": VICTIM_INSTANCE, "job_id": VICTIM_JOB},
    )
    assert_clean_refusal(response, hostile["secrets"], 403, 422)


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[1].startswith("/v1/jobs/")])
def test_a_user_route_refuses_an_agent_reaching_another_job(
    method: str, path: str, hostile: dict[str, Any]
) -> None:
    response = hostile["client"].request(
        method, _fill(path, job_id=hostile["job_id"]), headers=_auth(hostile["other"])
    )
    assert_clean_refusal(response, hostile["secrets"], 403)


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[1].startswith("/v1/jobs/")])
def test_a_user_route_refuses_a_user_of_another_project(
    method: str, path: str, hostile: dict[str, Any]
) -> None:
    response = hostile["client"].request(
        method, _fill(path, job_id=hostile["job_id"]), headers=_auth(hostile["stranger"])
    )
    assert_clean_refusal(response, hostile["secrets"], 403)
    listed = hostile["client"].get("/v1/jobs", headers=_auth(hostile["stranger"]))
    assert hostile["job_id"] not in listed.text


@pytest.mark.parametrize("where", ["run", "name", "envs", "resources"])
def test_a_token_or_credential_in_a_refused_spec_is_not_echoed(
    where: str, hostile: dict[str, Any]
) -> None:
    for secret in (hostile["victim"], FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]):
        value = {"envs": {"X": [secret]}, "resources": {"accelerators": secret}}.get(
            where, [secret]
        )
        spec = json.dumps({"name": "leak", "run": "true", where: value})
        response = hostile["client"].post(
            "/v1/jobs", headers=_auth(hostile["user"]), json={"spec": spec}
        )
        assert_clean_refusal(response, hostile["secrets"], 400, 422)


HOSTILE_BODIES: dict[str, bytes] = {
    "malformed": b'{"instance_id": ',
    "not-utf8": b"\xff\xfe\x00{",
    "nested": b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    "nested-list": b"[" * 10_000 + b"]" * 10_000,
    "a-list": b"[]",
    "a-string": b'"hello"',
    "null": b"null",
    "nan": b'{"instance_id": NaN, "events": NaN, "spec": NaN, "count": NaN}',
    "infinity": b'{"count": Infinity, "limit": -Infinity, "cpus": 1e308}',
    "strings-for-numbers": b'{"instance_id": "i-victim", "count": "ten", "limit": "many"}',
    "negative-counts": b'{"instance_id": "i-victim", "count": -5, "limit": -1, "max": -1e308}',
    "unknown-fields": b'{"instance_id": "i-victim", "no_such_field": 1, "__proto__": {}}',
    "huge-number": b'{"count": ' + b"9" * 5000 + b"}",
}


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize("kind", sorted(HOSTILE_BODIES))
def test_a_hostile_body_is_a_clean_refusal(
    method: str, path: str, kind: str, hostile: dict[str, Any]
) -> None:
    token = hostile["victim"] if path.startswith("/v1/agents") else hostile["user"]
    response = hostile["client"].request(
        method,
        _fill(path, job_id=hostile["job_id"], request_id="r-1"),
        headers={**_auth(token), "Content-Type": "application/json"},
        content=HOSTILE_BODIES[kind],
    )
    if response.status_code < 400:  # a body every field of which is optional: taken, harmlessly
        assert kind in ("unknown-fields", "negative-counts", "strings-for-numbers"), response.text
        return
    assert_clean_refusal(response, hostile["secrets"], 400, 403, 404, 409, 422)


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_a_body_over_the_limit_is_413_before_it_is_read(
    method: str, path: str, hostile: dict[str, Any]
) -> None:
    limit = hostile["app"].state.settings.max_body_bytes
    token = hostile["victim"] if path.startswith("/v1/agents") else hostile["user"]
    response = hostile["client"].request(
        method,
        _fill(path, job_id=hostile["job_id"], request_id="r-1"),
        headers={**_auth(token), "Content-Type": "application/json"},
        content=b'{"spec": "' + b"x" * (limit + 1) + b'"}',
    )
    body = assert_clean_refusal(response, hostile["secrets"], 413)
    assert str(limit) in body["error"]["message"]


def test_a_body_over_the_limit_without_a_length_is_413(hostile: dict[str, Any]) -> None:
    limit = hostile["app"].state.settings.max_body_bytes

    def chunks() -> Iterator[bytes]:
        yield b'{"spec": "'
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536

    response = hostile["client"].post("/v1/jobs", headers=_auth(hostile["user"]), content=chunks())
    assert_clean_refusal(response, hostile["secrets"], 413)


ODD_IDS = {
    "long": "i" * 5000,
    "dotdot-slash": "..%2F..%2Fetc%2Fpasswd",
    "nul": "i%00x",
    "unicode": "ｉ-实例-🚀",
    "rtl": "i-\u202eevil",
    "spaces": "i%20-%20x",
    "percent": "%25%25%25",
}


@pytest.mark.parametrize(
    ("method", "path"), [r for r in ROUTES if "{" in r[1] and r[1] != "/dashboard/static/{name}"]
)
@pytest.mark.parametrize("odd", sorted(ODD_IDS))
def test_an_odd_path_id_is_a_clean_refusal(
    method: str, path: str, odd: str, hostile: dict[str, Any]
) -> None:
    token = hostile["victim"] if path.startswith("/v1/agents") else hostile["user"]
    value = ODD_IDS[odd]
    url = re.sub(r"\{(\w+)\}", value, path)
    response = hostile["client"].request(method, url, headers=_auth(token), json={})
    assert_clean_refusal(response, hostile["secrets"])


@pytest.mark.parametrize("odd", sorted(ODD_IDS))
def test_an_odd_static_name_is_not_found(odd: str, hostile: dict[str, Any]) -> None:
    response = hostile["client"].get(
        f"/dashboard/static/{ODD_IDS[odd]}", headers=_auth(hostile["user"])
    )
    assert_clean_refusal(response, hostile["secrets"], 404)


@pytest.mark.parametrize(
    "filename", ["..%2F..%2Fserver.db", "*.whl", "%2A", "x.whl%00.txt", "[a-z]*.whl", ".whl"]
)
def test_a_wheel_name_that_is_not_one_is_refused_before_the_cache_is_searched(
    filename: str, hostile: dict[str, Any]
) -> None:
    response = hostile["client"].get(f"/v1/dist/{SHA}/{filename}")
    body = assert_clean_refusal(response, hostile["secrets"], 404, 422)
    assert response.status_code == 422 or "no endpoint" in body["error"]["message"]


QUERY_VALUES = st.one_of(
    st.text(max_size=50),
    st.sampled_from(["NaN", "inf", "-1", "1e308", "9" * 400, "²", "١٢", "0x10", "", "%00"]),
)
GET_ROUTES = [r for r in ROUTES if r[0] == "GET"]


@pytest.mark.parametrize(("method", "path"), GET_ROUTES)
def test_hostile_query_strings_never_fail_the_server(
    method: str, path: str, hostile: dict[str, Any]
) -> None:
    token = hostile["victim"] if path.startswith("/v1/agents") else hostile["user"]
    url = _fill(path, job_id=hostile["job_id"])

    @given(
        query=st.dictionaries(
            st.sampled_from(["after", "job", "limit", "tail", "since", "state", "n", "x"]),
            QUERY_VALUES,
            max_size=3,
        )
    )
    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def probe(query: dict[str, str]) -> None:
        response = hostile["client"].request(method, url, headers=_auth(token), params=query)
        assert response.status_code < 500, (query, response.status_code, response.text[:300])
        if response.status_code >= 400:
            assert_clean_refusal(response, hostile["secrets"])

    probe()


DASHBOARD_NAMES = ("jobs", "events", "cost", "markets", "timeline", "nope")
ODD_QUERY = ("9" * 40, "9" * 5000, "²", "-1", "1e308", "NaN", "..", "\x00", "ｊ-🚀", "j" * 5000)


@pytest.mark.parametrize("name", DASHBOARD_NAMES)
@pytest.mark.parametrize("value", ODD_QUERY, ids=range(len(ODD_QUERY)))
def test_the_dashboard_api_answers_odd_queries_without_a_server_error(
    name: str, value: str, hostile: dict[str, Any]
) -> None:
    for key in ("after", "job"):
        response = hostile["client"].get(
            f"/dashboard/api/{name}", headers=_auth(hostile["user"]), params={key: value}
        )
        assert response.status_code < 500, (key, response.status_code, response.text[:300])
        if response.status_code >= 400:
            assert_clean_refusal(response, hostile["secrets"])


@pytest.mark.parametrize("where", ["after", "Last-Event-ID"])
@pytest.mark.parametrize("value", ["²", "9" * 40, "-1", "1e308", "abc"])
def test_the_dashboard_stream_refuses_an_odd_resume_point_before_streaming(
    where: str, value: str, hostile: dict[str, Any]
) -> None:
    query: dict[str, Any] = {"after": value} if where == "after" else {}
    headers: dict[str, Any] = {} if where == "after" else {where: value.encode()}
    response = hostile["client"].get(
        "/dashboard/api/stream", headers={**_auth(hostile["user"]), **headers}, params=query
    )
    body = assert_clean_refusal(response, hostile["secrets"], 400)
    assert where in body["error"]["message"]


def _lease() -> dict[str, Any]:
    return {
        "job": VICTIM_JOB,
        "shard_id": "s-1",
        "token": 1,
        "worker": "w-1",
        "expires_at": 1e9,
        "attempt": 0,
    }


# A body each route takes whole (the victim agent's, or the user's), each field of which the sweep
# below replaces by every hostile value in turn, so the value reaches that field's own check.
VALID_BODIES: dict[str, dict[str, Any]] = {
    "/v1/agents/register": {
        "instance_id": VICTIM_INSTANCE,
        "time_unix_s": 1e9,
        "job_id": VICTIM_JOB,
    },
    "/v1/agents/{instance_id}/heartbeat": {
        "instance_id": VICTIM_INSTANCE,
        "time_unix_s": 1e9,
        "state": "running",
        "worker_pid": 10,
        "worker_restarts": 0,
        "worker_heartbeat_unix_s": 1e9,
        "worker_step": 3,
    },
    "/v1/agents/{instance_id}/events": {
        "events": [
            {
                "kind": "probe",
                "instance_id": VICTIM_INSTANCE,
                "job_id": VICTIM_JOB,
                "time_unix_s": 1e9,
                "event_id": "e-1",
                "schema_version": 1,
                "ran": True,
                "reason": "ok",
            }
        ]
    },
    "/v1/agents/{instance_id}/logs": {
        "instance_id": VICTIM_INSTANCE,
        "attempt_id": "a-1",
        "offset_bytes": 0,
        "data": "aGVsbG8=",
        "node": 0,
    },
    "/v1/agents/{instance_id}/leases/release": {"worker_id": "w-1"},
    "/v1/agents/{instance_id}/queue/claim": {
        "job": VICTIM_JOB,
        "worker": "w-1",
        "n": 1,
        "lease_s": 60,
    },
    "/v1/agents/{instance_id}/queue/heartbeat": {
        "job": VICTIM_JOB,
        "lease": _lease(),
        "lease_s": 60,
    },
    "/v1/agents/{instance_id}/queue/complete": {
        "job": VICTIM_JOB,
        "lease": _lease(),
        "output_ref": "o",
    },
    "/v1/agents/{instance_id}/queue/release": {"job": VICTIM_JOB, "lease": _lease()},
    "/v1/agents/{instance_id}/queue/fail": {"job": VICTIM_JOB, "lease": _lease(), "error": "e"},
    "/v1/agents/{instance_id}/queue/release-worker": {"job": VICTIM_JOB, "worker": "w-1"},
    "/v1/jobs": {"spec": JOB_SPEC.format(name="fieldwise"), "filename": "fieldwise.yaml"},
    "/v1/plans": {"spec": JOB_SPEC.format(name="planned"), "limit": 3, "data_gib": 1.0},
}
HOSTILE_VALUES: dict[str, Any] = {
    "nan": float("nan"),
    "infinity": float("inf"),
    "minus-infinity": float("-inf"),
    "1e308": 1e308,
    "negative": -1,
    "huge-int": 10**30,
    "string-for-number": "12",
    "word": "ten",
    "empty": "",
    "null": None,
    "list": [1, 2],
    "object": {"a": {"b": 1}},
    "bool": True,
    "nul": "a\x00b",
    "long": "x" * 100_000,
    "unicode": "ｉ-实例-🚀\u202e",
}


def _fieldwise() -> list[tuple[str, str]]:
    """(route, dotted field) for every field of every valid body, nested ones included."""
    out = []
    for path, body in VALID_BODIES.items():
        for key, value in body.items():
            out.append((path, key))
            if isinstance(value, dict):
                out.extend((path, f"{key}.{inner}") for inner in value)
            if isinstance(value, list) and value and isinstance(value[0], dict):
                out.extend((path, f"{key}.0.{inner}") for inner in value[0])
    return out


def _replaced(body: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(body))
    *parents, last = dotted.split(".")
    where: Any = copy
    for part in parents:
        where = where[int(part)] if isinstance(where, list) else where[part]
    where[last] = value
    return copy


def test_every_body_route_has_a_valid_body_to_mutate() -> None:
    """A new route with a body fails here until the sweep has a body for it."""
    assert {p for _, p in BODY_ROUTES} - set(VALID_BODIES) == {
        "/v1/agents/{instance_id}/requests/{request_id}/ack"  # an empty body: nothing to mutate
    }


@pytest.mark.parametrize(("path", "field"), _fieldwise())
def test_a_hostile_value_in_any_field_is_refused_or_taken_never_a_server_error(
    path: str, field: str, hostile: dict[str, Any]
) -> None:
    token = hostile["victim"] if path.startswith("/v1/agents") else hostile["user"]
    url = _fill(path)
    for n, (kind, value) in enumerate(HOSTILE_VALUES.items()):
        body = _replaced(VALID_BODIES[path], field, value)
        events = body.get("events")
        if isinstance(events, list) and isinstance(events[0], dict) and "event_id" not in field:
            # each its own event, not a repeat of one stored already
            body["events"][0]["event_id"] = f"e-{field}-{n}"
        content = json.dumps(body, allow_nan=True).encode()
        response = hostile["client"].post(
            url, headers={**_auth(token), "Content-Type": "application/json"}, content=content
        )
        assert response.status_code < 500, (kind, response.status_code, response.text[:300])
        if response.status_code >= 400:
            assert_clean_refusal(response, hostile["secrets"])
        elif kind in ("nan", "infinity", "minus-infinity"):
            raise AssertionError(f"{field}={kind} was taken: {response.text[:200]}")


def test_concurrent_launches_and_cancels_through_the_api_are_one_job_each_and_idempotent(
    hostile: dict[str, Any],
) -> None:
    """Eight launches of one spec at once: eight jobs; then two cancels of each at once: all
    taken (the controller ends each job once: tests/service/test_concurrent_launch_cancel.py)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from fastapi.testclient import TestClient

    headers = _auth(hostile["user"])
    spec = {"spec": JOB_SPEC.format(name="raced"), "filename": "raced.yaml"}
    barrier = threading.Barrier(8)

    def launch(_: int) -> Any:
        client = TestClient(hostile["app"], raise_server_exceptions=False)
        barrier.wait(30)
        return client.post("/v1/jobs", headers=headers, json=spec)

    with ThreadPoolExecutor(8) as pool:
        launched = list(pool.map(launch, range(8)))
    assert [r.status_code for r in launched] == [201] * 8, [r.text for r in launched]
    job_ids = {r.json()["job_id"] for r in launched}
    assert len(job_ids) == 8

    def cancel(job_id: str) -> Any:
        client = TestClient(hostile["app"], raise_server_exceptions=False)
        return client.post(f"/v1/jobs/{job_id}/cancel", headers=headers)

    with ThreadPoolExecutor(8) as pool:
        cancelled = list(pool.map(cancel, [j for j in sorted(job_ids) for _ in range(2)]))
    assert {r.status_code for r in cancelled} == {200}, [r.text for r in cancelled]
    assert {r.json()["job_id"] for r in cancelled} == job_ids
