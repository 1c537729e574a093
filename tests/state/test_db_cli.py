"""``spothop db status`` and ``spothop db upgrade``: what they print, what they change, how they fail."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from spothop.errors import EXIT_BAD_INPUT, EXIT_NOT_FOUND, StoreTooNew
from spothop.state.migrate import VERSION_TABLE, head_revision
from tests.cli.conftest import Result
from tests.cli.conftest import cli as cli  # the fixture: `spothop ARGS` in-process
from tests.state.conftest import RELEASE_0_1_SQLITE

Cli = Callable[..., Result]


def _release_store(path: Path) -> str:
    conn = sqlite3.connect(path)
    conn.executescript(RELEASE_0_1_SQLITE.read_text())
    conn.close()
    return f"sqlite:///{path}"


def test_status_then_upgrade_a_previous_release_store(cli: Cli, tmp_path: Path) -> None:
    url = _release_store(tmp_path / "old.db")
    before = cli("db", "status", "--url", url, "--json")
    assert before.code == 0, before.err
    assert before.json()["current"] is None and before.json()["previous_release"] is True
    assert before.json()["pending"][-1]["revision"] == head_revision()
    text = cli("db", "status", "--url", url)
    assert "a store of spothop 0.1.0" in text.out and "pending" in text.out

    upgraded = cli("db", "upgrade", "--url", url, "--json")
    assert upgraded.code == 0, upgraded.err
    assert upgraded.json()["before"] is None and upgraded.json()["after"] == head_revision()
    assert [a["revision"] for a in upgraded.json()["applied"]] == [
        p["revision"] for p in before.json()["pending"]
    ]
    after = cli("db", "status", "--url", url, "--json").json()
    assert after["current"] == head_revision() and after["up_to_date"] and after["pending"] == []
    again = cli("db", "upgrade", "--url", url)
    assert again.code == 0 and "nothing to do" in again.out


def test_upgrade_creates_the_default_store_and_status_says_when_there_is_none(
    cli: Cli, spothop_home: Path
) -> None:
    missing = cli("db", "status")
    assert (
        missing.code == EXIT_NOT_FOUND
        and "no store at" in missing.err
        and "spothop db upgrade" in missing.err
    )
    assert not (spothop_home / "spothop.db").exists()
    made = cli("db", "upgrade")
    assert made.code == 0 and head_revision() in made.out
    assert (spothop_home / "spothop.db").exists()


def test_a_newer_store_and_an_unreachable_one_are_clear_errors(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert cli("db", "upgrade", "--url", url).code == 0
    conn = sqlite3.connect(tmp_path / "new.db")
    with conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9001'")
    conn.close()
    for command in ("status", "upgrade"):
        refused = cli("db", command, "--url", url)
        assert (
            refused.code == StoreTooNew.exit_code
            and "9001" in refused.err
            and "Upgrade spothop" in refused.err
        )
        assert "Traceback" not in refused.err
    down = cli("db", "status", "--url", "postgresql://nobody@127.0.0.1:1/none")
    assert (
        down.code == EXIT_BAD_INPUT
        and "cannot open the store" in down.err
        and "Traceback" not in down.err
    )
    schema_on_sqlite = cli("db", "upgrade", "--url", url, "--schema", "x")
    assert schema_on_sqlite.code == EXIT_BAD_INPUT and "PostgreSQL" in schema_on_sqlite.err


def test_every_db_command_has_help(cli: Cli) -> None:
    for args in (("db", "--help"), ("db", "status", "--help"), ("db", "upgrade", "--help")):
        shown = cli(*args)
        assert shown.code == 0 and "Usage" in shown.out
    assert "--url" in cli("db", "upgrade", "--help").out
