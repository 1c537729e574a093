"""schemathesis fuzzes every operation of the server's OpenAPI document (in process, over ASGI):
whatever it sends, with a user's or an agent's valid token, the server never answers 5xx and every
answer conforms to the document (status codes, content types, bodies). Bounded: a few examples per
operation, so the module takes well under a minute."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.server.conftest import JOB_SPEC  # noqa: E402

EXAMPLES_PER_OPERATION = 15
AGENT_JOB, AGENT_INSTANCE = "j-fuzz00", "i-fuzz"


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    home: Path = tmp_path_factory.mktemp("fuzz-home")
    monkey = pytest.MonkeyPatch()
    monkey.setenv("SPOTHOP_HOME", str(home))
    app = create_app(
        Settings(db_url=f"sqlite:///{home / 'server.db'}", auth_failures_per_window=10**6)
    )
    _, user = app.state.tokens.create_user("fuzzer", "fuzz")
    agent = app.state.tokens.issue_agent_token(AGENT_JOB, AGENT_INSTANCE)
    from fastapi.testclient import TestClient

    client = TestClient(app)
    made = client.post(
        "/v1/jobs",
        headers={"Authorization": f"Bearer {user}"},
        json={"spec": JOB_SPEC.format(name="fuzzed"), "filename": "fuzzed.yaml"},
    )
    assert made.status_code == 201, made.text
    yield {"app": app, "user": user, "agent": agent, "job_id": made.json()["job_id"]}
    monkey.undo()


def _operations() -> list[str]:
    """Every operation of the document, by label (``POST /v1/jobs``): one test each."""
    import tempfile

    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    with tempfile.TemporaryDirectory() as folder:
        monkey = pytest.MonkeyPatch()
        monkey.setenv("SPOTHOP_HOME", folder)
        try:
            document = create_app(Settings(db_url=f"sqlite:///{folder}/doc.db")).openapi()
        finally:
            monkey.undo()
    return sorted(
        f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item
    )


@pytest.mark.parametrize("label", _operations())
def test_no_input_makes_the_server_fail_or_break_its_document(
    label: str, fuzzed: dict[str, Any]
) -> None:
    from hypothesis import given

    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzzed["app"])
    operation = schema.find_operation_by_label(label)
    agent_api = operation.path.startswith("/v1/agents")
    token = fuzzed["agent"] if agent_api else fuzzed["user"]
    turn = itertools.count()

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def fuzz(case: Any) -> None:
        # Every other case reaches past the scoping checks: the token's own instance (in the path
        # and the body), a job that exists.
        if next(turn) % 2 == 0:
            params = case.path_parameters or {}
            if "instance_id" in params:
                params["instance_id"] = AGENT_INSTANCE
            if "job_id" in params:
                params["job_id"] = fuzzed["job_id"]
            body = case.body if isinstance(case.body, dict) else {}
            if agent_api and "instance_id" in body:
                body["instance_id"] = AGENT_INSTANCE
            for event in body.get("events") or [] if agent_api else []:
                if isinstance(event, dict):
                    event["instance_id"], event["job_id"] = AGENT_INSTANCE, AGENT_JOB
        case.call_and_validate(
            headers={"Authorization": f"Bearer {token}"},
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
            ],
        )

    fuzz()
