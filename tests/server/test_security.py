"""No cloud credential from the server's environment and no token secret reaches a response
body or the server's log, even where a request echoes it back."""

from __future__ import annotations

import json

from spothop.state.tokens import parse_token
from tests.conftest import unique
from tests.server.conftest import FAKE_CREDENTIALS, Served, launch


def test_no_credential_or_token_secret_reaches_a_response_or_the_log(served: Served) -> None:
    server = served.server
    _, token = served.tokens.create_user(unique("careful").lower(), "secrets")
    secret_value = FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    bodies = []
    job_id = launch(served, token, "careful-job")
    for method, path, body in [
        ("GET", f"/v1/jobs/{job_id}", None),
        ("GET", f"/v1/jobs/{job_id}/events", None),
        ("GET", f"/v1/jobs/{job_id}/logs", None),
        ("GET", f"/v1/jobs/{job_id}/report", None),
        ("GET", "/v1/costs", None),
        ("GET", "/v1/instances", None),
        ("GET", "/v1/offers?gpu=T4", None),
        ("GET", f"/v1/offers?gpu={secret_value}", None),  # echoed in "unknown GPU ..."
        ("POST", "/v1/plans", {"spec": "run: x\nresources: {accelerators: T4}\n"}),
        ("POST", "/v1/jobs", {"spec": f"run: x\nresources: {{accelerators: '{secret_value}'}}\n"}),
        ("POST", "/v1/jobs", {"spec": f"name: '{secret_value}'\nrun: x\n"}),
        ("GET", "/readyz", None),
        ("GET", "/metrics", None),
        ("GET", "/openapi.json", None),
        ("GET", f"/dashboard/?token={token}", None),
        ("GET", f"/dashboard/api/jobs?token={token}", None),
    ]:
        status, answer, _ = server.call(method, path, token=token, body=body)
        assert status < 500, (path, answer)
        bodies.append(answer if isinstance(answer, str) else json.dumps(answer))
    text = "\n".join(bodies)
    assert "***" in text  # the echoed GPU name came back masked
    log = server.log()
    assert job_id in log  # the access log has the requests...
    parsed = parse_token(token)
    assert parsed is not None
    for value in [*FAKE_CREDENTIALS.values(), parsed[2]]:
        assert value not in text, value
        assert value not in log, value  # ...but neither a credential nor the token's secret
