"""The server's POST /v1/jobs refuses what ``spothop launch`` refuses before anything is stored:
a cloud credential in ``envs`` (named, never echoed), a deadline shorter than the work."""

from __future__ import annotations

from pathlib import Path

import pytest

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (
            f"name: s\nrun: 'true'\nenvs: {{AWS_SECRET_ACCESS_KEY: {SECRET}}}\n",
            "AWS_SECRET_ACCESS_KEY",
        ),
        ("name: d\nrun: 'true'\ndeadline: 1s\nwork: 1h\n", "deadline"),
    ],
)
def test_the_api_refuses_a_spec_launch_refuses_and_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, named: str
) -> None:
    from fastapi.testclient import TestClient

    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 'server.db'}"))
    _, user = app.state.tokens.create_user("u", "p")
    client = TestClient(app)
    headers = {"Authorization": f"Bearer {user}"}
    answer = client.post("/v1/jobs", headers=headers, json={"spec": spec, "filename": "j.yaml"})
    assert answer.status_code in (400, 422), answer.text
    assert named in answer.text and SECRET not in answer.text
    assert client.get("/v1/jobs", headers=headers).json()["jobs"] == []
