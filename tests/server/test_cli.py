"""`spothop server users|tokens`: a user made with its token printed once, tokens listed without their
secrets, revoked by id (or by the whole token, never echoed), bad names refused with a clear message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.state.tokens import TokenStore, parse_token


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_users_and_tokens_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'server.db'}"
    code, out, _ = _run(
        capsys, "server", "users", "create", "ada", "--project", "vision", "--db", db, "--json"
    )
    assert code == 0
    made = json.loads(out)
    assert (made["name"], made["project"]) == ("ada", "vision")
    first = TokenStore(db).authenticate(made["token"])
    assert first is not None and first.user == "ada"

    code, out, _ = _run(
        capsys, "server", "tokens", "create", "--user", "ada", "--label", "ci", "--db", db, "--json"
    )
    second = json.loads(out)["token"]
    assert code == 0 and second != made["token"]

    code, out, _ = _run(capsys, "server", "tokens", "list", "--db", db, "--json")
    listed = json.loads(out)
    assert [(t["user"], t["label"], t["revoked_unix_s"]) for t in listed] == [
        ("ada", "first", None),
        ("ada", "ci", None),
    ]
    assert made["token"] not in out and second not in out  # ids only, never the tokens

    code, out, _ = _run(capsys, "server", "tokens", "revoke", second, "--db", db)  # the whole token
    parsed = parse_token(second)
    assert code == 0 and parsed is not None and parsed[1] in out and parsed[2] not in out
    assert TokenStore(db).authenticate(second) is None
    code, _, _ = _run(capsys, "server", "tokens", "revoke", parsed[1], "--db", db)
    assert code == 1  # no live token of that id any more

    code, out, _ = _run(capsys, "server", "users", "list", "--db", db, "--json")
    assert [u["name"] for u in json.loads(out)] == ["ada"]


def test_bad_names_and_unknown_users_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'server.db'}"
    code, _, err = _run(
        capsys, "server", "users", "create", "Ada Lovelace", "--project", "x", "--db", db
    )
    assert code == 2 and "not valid" in err and "Traceback" not in err
    code, _, err = _run(capsys, "server", "tokens", "create", "--user", "nobody", "--db", db)
    assert code == 3 and "no user 'nobody'" in err
    code, _, err = _run(capsys, "server", "tokens", "list", "--kind", "robot", "--db", db)
    assert code == 2 and "--kind" in err
