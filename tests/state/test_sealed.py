"""A job's secrets sealed at rest (state/sealed.py): a key of the home's own, 0600, made on
first use; a value sealed is not in the token, opens only with that key, and a token altered
in the store is refused rather than opened to something else."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import select, update

from spothop.db import make_engine
from spothop.errors import ConfigError
from spothop.state.job_tables import job_secrets
from spothop.state.migrate import ensure_schema
from spothop.state.sealed import KEY_FILE, SecretBox, open_secrets, store_secrets

VALUE = "sk-live-0123456789abcdef"


def test_the_key_is_made_on_first_use_private_and_then_kept(tmp_path: Path) -> None:
    home = Path(os.environ["SPOTHOP_HOME"])
    assert not (home / KEY_FILE).exists()
    token = SecretBox.of_home().seal(VALUE)
    assert VALUE not in token
    assert stat.S_IMODE((home / KEY_FILE).stat().st_mode) == 0o600
    key = (home / KEY_FILE).read_bytes()
    assert SecretBox.of_home().open(token) == VALUE  # a second box reads the same key
    assert (home / KEY_FILE).read_bytes() == key


def test_a_value_opens_only_with_its_key_and_a_changed_token_is_refused(tmp_path: Path) -> None:
    box, other = SecretBox(tmp_path / "a.key"), SecretBox(tmp_path / "b.key")
    token = box.seal(VALUE)
    with pytest.raises(ConfigError, match="another key") as caught:
        other.open(token, "the secret T")
    assert "the secret T" in str(caught.value) and VALUE not in str(caught.value)
    tampered = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
    with pytest.raises(ConfigError):
        box.open(tampered)


def test_a_damaged_key_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.key").write_text("not a key")
    with pytest.raises(ConfigError, match="not a readable secrets key"):
        SecretBox(tmp_path / "bad.key").seal(VALUE)


def test_a_jobs_secrets_are_stored_sealed_and_opened_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    ensure_schema(engine)
    box = SecretBox(tmp_path / "k.key")
    with engine.begin() as conn:
        store_secrets(conn, "j-1", {"API": VALUE, "B": "b"}, box)
    with engine.connect() as conn:
        rows = conn.execute(select(job_secrets.c.name, job_secrets.c.sealed)).all()
        assert sorted(r.name for r in rows) == ["API", "B"]
        assert all(VALUE not in r.sealed for r in rows)
        assert open_secrets(conn, "j-1", box) == {"API": VALUE, "B": "b"}
        assert open_secrets(conn, "j-2", box) == {}
    with engine.begin() as conn:
        conn.execute(update(job_secrets).values(sealed="gAAAA-not-a-token"))
    with engine.connect() as conn, pytest.raises(ConfigError, match="the secret"):
        open_secrets(conn, "j-1", box)
    engine.dispose()
