"""The user API against `spothop server run`: a user launches into its project and sees only that
project's jobs; the answers are the CLI's --json objects; lists, bodies and queries are bounded; every
error is {"error": {"type", "message"}}; tokens are stored as argon2id hashes and a revoked one is 401
at once (revoked through the CLI, in another process)."""

from __future__ import annotations

import json
import subprocess
import sys

from sqlalchemy import select

from spothop.jobs.store import JobStore
from spothop.service.jobs import job_status, list_jobs
from spothop.state.auth_tables import api_tokens
from spothop.state.tokens import parse_token
from tests.conftest import unique
from tests.server.conftest import Served, launch


def _user(served: Served, project: str) -> str:
    _, token = served.tokens.create_user(unique("user").lower(), project)
    return token


def test_a_user_sees_its_projects_jobs_only(served: Served) -> None:
    vision, nlp = _user(served, "vision"), _user(served, "nlp")
    mine = launch(served, vision, "resnet")
    theirs = launch(served, nlp, "bert")
    server = served.server
    _, listed, _ = server.call("GET", "/v1/jobs", token=vision)
    assert [j["job_id"] for j in listed["jobs"]] == [mine]
    for path in (
        f"/v1/jobs/{theirs}",
        f"/v1/jobs/{theirs}/events",
        f"/v1/jobs/{theirs}/logs",
        f"/v1/jobs/{theirs}/report",
        f"/v1/jobs/{theirs}/checkpoints",
        f"/v1/instances?job_id={theirs}",
    ):
        status, body, _ = server.call("GET", path, token=vision)
        assert status == 403 and body["error"]["type"] == "Forbidden", (path, body)
    status, _, _ = server.call("POST", f"/v1/jobs/{theirs}/cancel", token=vision, body={})
    assert status == 403
    status, answer, _ = server.call("POST", f"/v1/jobs/{mine}/cancel", token=vision, body={})
    assert (status, answer) == (200, {"job_id": mine, "cancel_requested": True})
    _, dash, _ = server.call("GET", f"/dashboard/api/jobs?token={vision}")
    assert [j["job_id"] for j in dash] == [mine]


def test_the_answers_are_the_clis_json(served: Served) -> None:
    token = _user(served, "answers")
    job_id = launch(served, token, "same-json")
    store = JobStore(served.db_url)
    try:
        _, listed, _ = served.server.call("GET", "/v1/jobs", token=token)
        assert listed["jobs"] == [j for j in list_jobs(store).to_list() if j["job_id"] == job_id]
        _, status, _ = served.server.call("GET", f"/v1/jobs/{job_id}", token=token)
        local = job_status(store, job_id, queue_url=served.queue_url).to_dict()
        assert json.loads(json.dumps(local, default=str)) == status
    finally:
        store.close()
    _, offers, _ = served.server.call("GET", "/v1/offers?gpu=T4&limit=3", token=token)
    assert 1 <= len(offers["offers"]) <= 3 and all(o["gpu"] == "T4" for o in offers["offers"])


def test_a_jobs_events_are_read_page_by_page_each_once(served: Served) -> None:
    from spothop.controlplane.store import StoreControlPlane
    from spothop.wire.events import Probe

    token = _user(served, "pages")
    job_id = launch(served, token, "paged")
    sent = [Probe(instance_id="i-paged", job_id=job_id, reason=f"r{n}") for n in range(7)]
    StoreControlPlane(served.db_url, "i-paged").record_many(sent)
    _, whole, _ = served.server.call("GET", f"/v1/jobs/{job_id}/events", token=token)
    assert len(whole["events"]) >= len(sent)  # the launch's own events, then the agent's
    pages, after = [], ""
    for _ in range(len(whole["events"]) + 2):
        query = f"limit=3&after_id={after}" if after else "limit=3"
        status, page, _ = served.server.call(
            "GET", f"/v1/jobs/{job_id}/events?{query}", token=token
        )
        assert status == 200 and len(page["events"]) <= 3
        if not page["events"]:
            break
        pages += page["events"]
        after = page["next"]
    # Every event once, none skipped (pages follow the store's order, each page in time order).
    assert sorted(map(_key, pages)) == sorted(map(_key, whole["events"]))
    assert len({_key(e) for e in pages}) == len(pages)


def _key(event: dict[str, object]) -> str:
    return json.dumps(event, sort_keys=True)


def test_bad_input_is_a_clear_error_never_a_500(served: Served) -> None:
    token = _user(served, "bad-input")
    server = served.server
    cases = [
        (
            server.call("POST", "/v1/jobs", token=token, body={"spec": "run: [unclosed"}),
            422,
            "JobSpecError",
        ),
        (
            server.call("POST", "/v1/jobs", token=token, body={"spec": "name: x\n"}),
            422,
            "JobSpecError",
        ),
        (
            server.call("POST", "/v1/jobs", token=token, body={"spec": "run: x", "extra": 1}),
            422,
            "ValidationError",
        ),
        (
            server.call(
                "POST",
                "/v1/jobs",
                token=token,
                raw=b"{not json",
                headers={"Content-Type": "application/json"},
            ),
            422,
            "ValidationError",
        ),
        (server.call("GET", "/v1/jobs?limit=100000", token=token), 422, "ValidationError"),
        (server.call("GET", "/v1/jobs?state=exploded", token=token), 400, "ConfigError"),
        (server.call("GET", "/v1/jobs/j-000000", token=token), 403, "Forbidden"),
        (server.call("GET", "/v1/nowhere", token=token), 404, "NotFound"),
        (server.call("DELETE", "/v1/jobs", token=token), 405, "MethodNotAllowed"),
        (
            server.call(
                "POST",
                "/v1/jobs",
                token=token,
                raw=b"x" * (1024 * 1024 + 1),
                headers={"Content-Type": "application/json"},
            ),
            413,
            "PayloadTooLarge",
        ),
    ]
    for (status, body, _), want_status, want_type in cases:
        assert (status, body["error"]["type"]) == (want_status, want_type), body
        assert body["error"]["message"]


def test_a_body_sent_without_a_length_is_bounded_too(served: Served) -> None:
    import http.client
    from urllib.parse import urlparse

    token = _user(served, "chunked")
    url = urlparse(served.server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    chunks = (b"x" * 65536 for _ in range(24))  # 1.5 MiB, no Content-Length
    conn.request(
        "POST",
        "/v1/jobs",
        body=chunks,
        encode_chunked=True,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["error"]["type"] == "PayloadTooLarge"
    conn.close()


def test_tokens_are_hashed_and_a_revoked_one_is_refused_at_once(served: Served) -> None:
    token = _user(served, "revoke")
    parsed = parse_token(token)
    assert parsed is not None
    _, token_id, secret = parsed
    assert served.server.call("GET", "/v1/whoami", token=token)[0] == 200
    with served.tokens.engine.connect() as conn:
        row = (
            conn.execute(select(api_tokens).where(api_tokens.c.token_id == token_id))
            .mappings()
            .one()
        )
    assert row["secret_hash"].startswith("$argon2id$") and secret not in json.dumps(dict(row))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spothop.cli.main",
            "server",
            "tokens",
            "revoke",
            token_id,
            "--db",
            served.db_url,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"token_id": token_id, "revoked": True}
    status, body, _ = served.server.call("GET", "/v1/whoami", token=token)  # within the cache's TTL
    assert status == 401 and body["error"]["type"] == "Unauthorized"


def test_health_readiness_openapi_and_metrics_need_no_token(served: Served) -> None:
    server = served.server
    assert server.call("GET", "/healthz")[:2] == (200, {"status": "ok"})
    assert server.call("GET", "/readyz")[:2] == (
        200,
        {"status": "ready", "db": "ok", "queue": "ok"},
    )
    status, document, _ = server.call("GET", "/openapi.json")
    assert status == 200 and "/v1/agents/{instance_id}/heartbeat" in document["paths"]
    status, text, headers = server.call("GET", "/metrics")
    assert status == 200 and "spothop_" in text and headers["content-type"].startswith("text/plain")


def test_the_dashboard_is_served_for_the_users_project(served: Served) -> None:
    vision, nlp = _user(served, "dash-vision"), _user(served, "dash-nlp")
    mine, theirs = launch(served, vision, "dash-mine"), launch(served, nlp, "dash-theirs")
    server = served.server
    assert server.call("GET", "/dashboard/")[0] == 401
    status, page, headers = server.call("GET", f"/dashboard/?token={vision}")
    assert status == 200 and "static/dashboard.js" in page
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "Path=/dashboard" in cookie and "SameSite=strict" in cookie
    jar = {"Cookie": cookie.split(";", 1)[0]}
    status, script, _ = server.call("GET", "/dashboard/static/dashboard.js", headers=jar)
    assert status == 200 and "api/jobs" in script
    _, timeline, _ = server.call("GET", f"/dashboard/api/timeline?job={mine}", headers=jar)
    assert timeline["job_id"] == mine
    status, body, _ = server.call("GET", f"/dashboard/api/timeline?job={theirs}", headers=jar)
    assert status == 404 and body["error"]["type"] == "JobNotFound"
    _, events, _ = server.call("GET", "/dashboard/api/events", headers=jar)
    assert {e["job_id"] for e in events} == {mine}


def test_the_dashboards_event_stream_carries_the_projects_events_only(served: Served) -> None:
    import http.client
    from urllib.parse import urlparse

    token = _user(served, "stream-vision")
    other = _user(served, "stream-nlp")
    launch(served, other, "not-streamed")  # first: its event's seq is at least 1, mine's past it
    mine = launch(served, token, "streamed")
    url = urlparse(served.server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", f"/dashboard/api/stream?after=1&token={token}")
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type").startswith(
        "text/event-stream"
    )
    seen: list[str] = []
    while not any(line.startswith("event: tick") for line in seen):
        seen.append(response.readline().decode().strip())
    conn.close()
    jobs = {json.loads(line[6:])["job_id"] for line in seen if line.startswith("data: {")}
    assert jobs == {mine}  # its "created" event; not the other project's


def test_a_spec_of_several_documents_is_named_as_such_not_as_bad_yaml(served: Served) -> None:
    token = _user(served, "chain")
    chain = "name: a\nrun: echo a\n---\nname: b\nrun: echo b\n"
    status, body, _ = served.server.call("POST", "/v1/jobs", token=token, body={"spec": chain})
    assert (status, body["error"]["type"]) == (422, "JobSpecError"), body
    message = body["error"]["message"]
    assert "holds 2 YAML documents" in message and "not valid YAML" not in message
