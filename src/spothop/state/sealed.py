"""A job's secrets, sealed at rest: the value never in the store in clear text.

- :class:`SecretBox` seals and opens values with a Fernet key (AES-128-CBC with an
  HMAC-SHA256, from ``cryptography``: authenticated, so a token altered in the store is
  refused, never opened to garbage). The key lives in the controller's home,
  ``$SPOTHOP_HOME/secret.key``, mode 0600, created on first use (``O_EXCL``: two processes
  creating it at once agree on one key). A store copied without its home's key holds
  nothing readable.
- :func:`store_secrets` writes a job's sealed values (``job_secrets``: the name in clear,
  the value sealed) in the caller's transaction; :func:`open_secrets` reads them back,
  opened: what the control plane hands the job's agents (:meth:`ControlPlane.secrets`).

Each process that opens a job's secrets (the controller's agent API, ``spothop server``)
must run with the home whose key sealed them; a server and a controller on two machines
share the one file (docs/state.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from spothop.errors import ConfigError

if TYPE_CHECKING:
    from cryptography.fernet import Fernet
    from sqlalchemy.engine import Connection

KEY_FILE = "secret.key"
KEY_MODE = 0o600  # its user's only: whoever reads the key reads every job's secrets


class SecretBox:
    """Seals and opens values with the Fernet key at ``key_path`` (created on first use)."""

    def __init__(self, key_path: Path) -> None:
        self.key_path = key_path
        self._fernet: Fernet | None = None

    @classmethod
    def of_home(cls) -> SecretBox:
        """The box of this process's home (:func:`spothop.paths.spothop_home`)."""
        from spothop.paths import spothop_home

        return cls(spothop_home() / KEY_FILE)

    def seal(self, value: str) -> str:
        return self._key().encrypt(value.encode("utf-8")).decode("ascii")

    def open(self, sealed: str, name: str = "a secret") -> str:
        from cryptography.fernet import InvalidToken

        try:
            return self._key().decrypt(sealed.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError, ValueError):
            raise ConfigError(
                f"{name} was sealed with another key than {self.key_path}; run the controller "
                "and the server with the home that launched the job (its secret.key)"
            ) from None

    def _key(self) -> Fernet:
        from cryptography.fernet import Fernet  # imported on first use: most commands seal nothing

        if self._fernet is None:
            self._fernet = Fernet(_read_or_create_key(self.key_path))
        return self._fernet


def _read_or_create_key(path: Path) -> bytes:
    from cryptography.fernet import Fernet

    if not path.exists():
        from spothop.paths import HOME_MODE

        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True, mode=HOME_MODE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_MODE)
        except FileExistsError:
            pass  # another process made it first: read theirs
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(Fernet.generate_key())
    try:
        key = path.read_bytes().strip()
        Fernet(key)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path}: not a readable secrets key ({exc}); restore it from a backup "
            "(a new one cannot open the secrets already sealed)"
        ) from None
    return key


def store_secrets(conn: Connection, job_id: str, values: Mapping[str, str], box: SecretBox) -> None:
    """Write ``values`` sealed as ``job_id``'s secrets, in the caller's transaction."""
    from sqlalchemy import insert

    from spothop.state.job_tables import job_secrets

    rows = [
        {"job_id": job_id, "name": name, "sealed": box.seal(value)}
        for name, value in sorted(values.items())
    ]
    if rows:
        conn.execute(insert(job_secrets), rows)


def open_secrets(conn: Connection, job_id: str, box: SecretBox) -> dict[str, str]:
    """``job_id``'s secrets, opened (empty for a job with none)."""
    from sqlalchemy import select

    from spothop.state.job_tables import job_secrets as t

    rows = conn.execute(select(t.c.name, t.c.sealed).where(t.c.job_id == job_id)).all()
    return {r.name: box.open(r.sealed, f"the secret {r.name}") for r in rows}
