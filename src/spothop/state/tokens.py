"""API tokens for the control-plane server: users of projects, and agents scoped to one job's instance.

The contract:

1. A token reads ``shp_<kind>_<token_id>_<secret>``: ``kind`` is ``u`` (a
   user) or ``a`` (an agent), ``token_id`` 16 hex characters (the row's key,
   safe to show and log), ``secret`` :func:`secrets.token_urlsafe` of 32 bytes.
   The plain token is returned once, when it is made, and never stored:
   ``api_tokens`` keeps the ``token_id`` and an argon2id hash of the secret
   (a user's with 8 MiB, an agent's with 64 KiB: ``AGENT_ARGON2_MEMORY_KIB``).
2. :meth:`TokenStore.authenticate` answers a :class:`Principal` or ``None``
   (malformed, unknown, revoked, or a wrong secret: the caller cannot tell
   which). It reads the token's row on every call (one lookup by primary key;
   :meth:`TokenStore.authenticate_many` reads a batch's rows in one query), so
   a revocation made by any process on the same store takes effect on the next
   request. The argon2 verify, the expensive part, is skipped when the same
   token was last taken within ``cache_ttl_s`` (30 s by default, at most 30 s,
   counted from its last use: an agent beating every 10 s is verified once,
   and a server slow for a while does not start verifying all over; the cache is
   keyed by the SHA-256 of the whole token, in memory only, and a token found
   revoked leaves it). An unknown token id costs a verify against a dummy
   hash, so timing does not tell which ids exist.
3. An agent token names its job and instance; the server lets it touch those
   and nothing else. :meth:`TokenStore.revoke_agent_tokens` ends them all for
   an instance (or a whole job) when its attempt ends.
3a. A launch's token (:meth:`TokenStore.issue_launch_token`) is made before the
   cloud names the instance: it names the attempt's launch token as its
   instance until it is bound. It is bound once, to the first instance id that
   either side gives: the controller's, when the cloud's launch call returns
   (:meth:`TokenStore.bind_agent_token`), or the instance's own, on the
   token's first use (:meth:`TokenStore.bind_on_first_use`: one conditional
   update, so of two first uses naming different instances exactly one binds).
   The cloud's answer is the truth: when the controller learns the instance and
   the token was first used by another, the controller's id replaces it and
   the instance that used it first is refused from then on (a warning says so).
4. A user belongs to one project (made on first use); its tokens see only that
   project's jobs.

argon2-cffi is a core dependency; it is imported when a hash is made or checked, and its
absence (a broken install) is a :class:`~spothop.errors.ConfigError` that names the package.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, bindparam, insert, select, update

from spothop.errors import ConfigError, NotFoundError
from spothop.state.agent_tokens import AgentTokens
from spothop.state.auth_tables import (
    DEFAULT_PROJECT,
    TOKEN_ID_LENGTH,
    api_tokens,
    job_projects,
    projects,
    users,
)
from spothop.state.principal import Principal as Principal  # re-exported: callers take it from here

if TYPE_CHECKING:
    from argon2 import PasswordHasher

TOKEN_PREFIX = "shp"
KIND_LETTERS = {"user": "u", "agent": "a"}
LETTER_KINDS = {v: k for k, v in KIND_LETTERS.items()}
SECRET_BYTES = 32  # 256 bits from secrets.token_urlsafe: far past any guessing
MAX_TOKEN_LENGTH = 128  # a real token is 64 characters; longer is refused before any work
# How long a verify is trusted after the token's last use. The row is read on every request, so
# this bounds no revocation, only what the cache keeps: 30 s is three beats of an agent's default
# 10 s interval (at 5 s every one of its beats paid a verify).
MAX_CACHE_TTL_S = 30.0
DEFAULT_CACHE_TTL_S = 30.0
MAX_CACHE_ENTRIES = 100_000  # ~500 agents and a few users per replica; bounded against floods
# argon2id, cheap settings on purpose. Password settings (OWASP's m=19 MiB, t=2) make guessing
# a human's password slow; these secrets are 256 random bits, past guessing at any cost, so the
# hash need only be one-way. A verify is then ~4 ms of one core instead of ~22 ms: 500 agents
# re-verified every 5 s cost a replica 0.4 of a core rather than two whole cores.
# (Each hash records its settings: hashes made with other settings still verify.)
ARGON2_TIME_COST = 1
ARGON2_MEMORY_KIB = 8_192
ARGON2_PARALLELISM = 1
# An agent's token is one instance's, made by the launcher and held by a machine, never typed: a
# one-way hash is all its 256-bit secret needs, so it is argon2id at its smallest memory worth
# the name (64 KiB: ~0.05 ms a verify, not ~4 ms). A replica that takes over another's ~250
# agents verifies them all in ~12 ms of CPU rather than a second. User tokens keep the above.
AGENT_ARGON2_MEMORY_KIB = 64
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_TOKEN_PATTERN = re.compile(
    rf"^{TOKEN_PREFIX}_([ua])_([0-9a-f]{{{TOKEN_ID_LENGTH}}})_([A-Za-z0-9_-]{{20,80}})$"
)


@dataclass(frozen=True)
class UserRecord:
    user_id: str
    name: str
    project: str
    created_unix_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TokenRecord:
    """A token's row, without its hash (what ``spothop server tokens list`` shows)."""

    token_id: str
    kind: str
    user: str | None
    project: str | None
    job_id: str | None
    instance_id: str | None
    label: str
    created_unix_s: float
    revoked_unix_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_token(token: str) -> tuple[str, str, str] | None:
    """``(kind, token_id, secret)`` of a well-formed token, else None."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        return None
    match = _TOKEN_PATTERN.match(token)
    if match is None:
        return None
    return LETTER_KINDS[match.group(1)], match.group(2), match.group(3)


def check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigError(
            f"{what} name {name!r} is not valid: use 1-64 lower-case letters, digits, '.', '_' or"
            " '-', starting with a letter or digit"
        )
    return name


def _hasher(memory_kib: int = ARGON2_MEMORY_KIB) -> PasswordHasher:
    try:
        from argon2 import PasswordHasher
    except ImportError as exc:  # the server extra is not installed
        raise ConfigError("API tokens need argon2-cffi: pip install 'spothop[server]'") from exc
    return PasswordHasher(
        time_cost=ARGON2_TIME_COST,
        memory_cost=memory_kib,
        parallelism=ARGON2_PARALLELISM,
    )


# The rows authenticate reads on every request, built once (their token ids a parameter).
_TOKEN_ROWS = (
    select(
        api_tokens.c.token_id,
        api_tokens.c.kind,
        api_tokens.c.secret_hash,
        api_tokens.c.user_id,
        api_tokens.c.project,
        api_tokens.c.job_id,
        api_tokens.c.instance_id,
        api_tokens.c.launch_token,
        api_tokens.c.revoked_unix_s,
        users.c.name,
    )
    .select_from(api_tokens.outerjoin(users, users.c.user_id == api_tokens.c.user_id))
    .where(api_tokens.c.token_id.in_(bindparam("ids", expanding=True)))
)


@dataclass(frozen=True)
class _Presented:
    """A well-formed token, taken apart: its kind, id and secret, and the SHA-256 of the whole."""

    kind: str
    token_id: str
    secret: str
    digest: bytes


def _presented(token: str) -> _Presented | None:
    parsed = parse_token(token)
    if parsed is None:
        return None
    return _Presented(*parsed, hashlib.sha256(token.encode()).digest())


class TokenStore(AgentTokens):
    """Projects, users and tokens in the store behind ``engine_or_url`` (default: the default database)."""

    def __init__(
        self,
        engine_or_url: Engine | str | None = None,
        *,
        cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from spothop.db import default_database_url, shared_engine
        from spothop.state import ensure_schema

        if not 0 <= cache_ttl_s <= MAX_CACHE_TTL_S:
            raise ConfigError(
                f"cache_ttl_s must be between 0 and {MAX_CACHE_TTL_S} s, got {cache_ttl_s!r}"
            )
        if isinstance(engine_or_url, Engine):
            self.engine = engine_or_url
        else:
            self.engine = shared_engine(engine_or_url or default_database_url())
        ensure_schema(self.engine)
        self.cache_ttl_s = cache_ttl_s
        self._clock = clock
        # Each kind's hasher; a verify reads the settings from the hash it checks.
        self._hashers = {"user": _hasher(), "agent": _hasher(AGENT_ARGON2_MEMORY_KIB)}
        self._hasher = self._hashers["user"]
        self._dummy_hashes = {  # an unknown id costs what its kind's real verify costs
            kind: hasher.hash(secrets.token_urlsafe(SECRET_BYTES))
            for kind, hasher in self._hashers.items()
        }
        self._verified: dict[bytes, tuple[str, float]] = {}  # sha256(token) -> (token_id, until)
        self._lock = threading.Lock()

    # -- projects and users -------------------------------------------------------

    def create_user(self, name: str, project: str) -> tuple[UserRecord, str]:
        """A new user of ``project`` (made if new) and its first token, returned this once."""
        check_name("user", name)
        check_name("project", project)
        now = time.time()
        record = UserRecord(uuid.uuid4().hex, name, project, now)
        with self.engine.begin() as conn:
            if conn.execute(select(users.c.user_id).where(users.c.name == name)).first():
                raise ConfigError(
                    f"user {name!r} exists; `spothop server tokens create --user {name}` gives it"
                    " another token"
                )
            if not conn.execute(select(projects.c.name).where(projects.c.name == project)).first():
                conn.execute(insert(projects).values(name=project, created_unix_s=now))
            conn.execute(insert(users).values(**record.to_dict()))
        token = self._issue("user", user_id=record.user_id, project=project, label="first")
        return record, token

    def user(self, name: str) -> UserRecord:
        with self.engine.connect() as conn:
            row = conn.execute(select(users).where(users.c.name == name)).mappings().first()
        if row is None:
            raise NotFoundError(
                f"no user {name!r}; `spothop server users list` shows them, "
                "`spothop server users create` makes one"
            )
        return UserRecord(**dict(row))

    def users(self) -> list[UserRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(users).order_by(users.c.name)).mappings().all()
        return [UserRecord(**dict(r)) for r in rows]

    def create_user_token(self, name: str, label: str = "") -> str:
        """Another token for the user ``name``; the plain token, returned this once."""
        user = self.user(name)
        return self._issue("user", user_id=user.user_id, project=user.project, label=label[:64])

    # -- which project a job is in ---------------------------------------------------

    def assign_job(self, job_id: str, project: str, user_id: str | None = None) -> None:
        """Record that ``job_id`` belongs to ``project`` (launched by ``user_id``)."""
        with self.engine.begin() as conn:
            conn.execute(
                insert(job_projects).values(job_id=job_id, project=project, user_id=user_id)
            )

    def job_project(self, job_id: str) -> str:
        """The project of ``job_id``; :data:`DEFAULT_PROJECT` for a job the server did not launch."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(job_projects.c.project).where(job_projects.c.job_id == job_id)
            ).first()
        return DEFAULT_PROJECT if row is None else str(row[0])

    def project_jobs(self, project: str, job_ids: Iterable[str] | None = None) -> set[str]:
        """The jobs of ``project`` (those of ``job_ids`` when given), by one query of the job store."""
        from sqlalchemy import func

        from spothop.state.job_tables import jobs

        owner = func.coalesce(job_projects.c.project, DEFAULT_PROJECT)
        query = (
            select(jobs.c.job_id)
            .select_from(jobs.outerjoin(job_projects, job_projects.c.job_id == jobs.c.job_id))
            .where(owner == project)
        )
        with self.engine.connect() as conn:
            found = {str(r[0]) for r in conn.execute(query)}
        return found if job_ids is None else found & set(job_ids)

    # -- any token ----------------------------------------------------------------

    def revoke(self, token_id: str) -> bool:
        """Revoke the token ``token_id``; False when there is no such live token."""
        c = api_tokens.c
        with self.engine.begin() as conn:
            result = conn.execute(
                update(api_tokens)
                .where(c.token_id == token_id, c.revoked_unix_s.is_(None))
                .values(revoked_unix_s=time.time())
            )
        return result.rowcount == 1

    def tokens(self, *, user: str | None = None, kind: str | None = None) -> list[TokenRecord]:
        c = api_tokens.c
        query = (
            select(api_tokens, users.c.name.label("user_name"))
            .select_from(api_tokens.outerjoin(users, users.c.user_id == c.user_id))
            .order_by(c.created_unix_s)
        )
        if user is not None:
            query = query.where(users.c.name == user)
        if kind is not None:
            query = query.where(c.kind == kind)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            TokenRecord(
                r["token_id"],
                r["kind"],
                r["user_name"],
                r["project"],
                r["job_id"],
                r["instance_id"],
                r["label"],
                r["created_unix_s"],
                r["revoked_unix_s"],
            )
            for r in rows
        ]

    def authenticate(
        self, token: str, *, cached_only: bool = False, conn: Connection | None = None
    ) -> Principal | None:
        """Who ``token`` speaks for, or None (see the module's contract, point 2).

        ``cached_only``: answer only for a token verified within the cache's TTL, never
        paying a verify (what a server does for a caller refused too often lately).
        ``conn``: read the token's row in that transaction (the server's heartbeat reads it and
        writes the beat in one), else in one of its own.
        """
        if conn is None:
            with self.engine.connect() as own:
                return self.authenticate_many(own, [token], cached_only=cached_only)[0]
        return self.authenticate_many(conn, [token], cached_only=cached_only)[0]

    def authenticate_many(
        self, conn: Connection, tokens: Sequence[str], *, cached_only: bool = False
    ) -> list[Principal | None]:
        """:meth:`authenticate` for each of ``tokens``, their rows read in one query in ``conn``'s
        transaction (the server's batch of heartbeats: every token's revocation checked, once)."""
        presented = [_presented(t) for t in tokens]
        wanted = [p for p in presented if p is not None]
        if cached_only:
            wanted = [p for p in wanted if self._cached(p.digest, p.token_id)]
        ids = sorted({p.token_id for p in wanted})
        found = {r.token_id: r for r in conn.execute(_TOKEN_ROWS, {"ids": ids})} if ids else {}
        out: list[Principal | None] = []
        for p in presented:
            if p is None or (cached_only and not self._cached(p.digest, p.token_id)):
                out.append(None)
            else:
                out.append(self._judge(p, found.get(p.token_id)))
        return out

    def cached(self, token: str) -> bool:
        """Whether ``token`` verified lately (its next :meth:`authenticate` pays no verify)."""
        p = _presented(token)
        return p is not None and self._cached(p.digest, p.token_id)

    # -- inside -------------------------------------------------------------------

    def _judge(self, p: _Presented, row: Any) -> Principal | None:
        """The principal of token ``p`` given its row (None: no row), verifying unless cached."""
        if row is None or row.revoked_unix_s is not None or row.kind != p.kind:
            with self._lock:
                self._verified.pop(p.digest, None)
            if row is None:
                self._verify(self._dummy_hashes[p.kind], p.secret)  # as slow as a real miss
            return None
        if not self._cached(p.digest, p.token_id) and not self._verify(row.secret_hash, p.secret):
            return None
        self._remember(p.digest, p.token_id)  # the TTL runs from the token's last use
        return Principal(
            kind=p.kind,
            token_id=p.token_id,
            user=row.name,
            user_id=row.user_id,
            project=row.project,
            job_id=row.job_id,
            instance_id=row.instance_id,
            launch_token=row.launch_token,
        )

    def _issue(self, kind: str, **row: Any) -> str:
        token_id = secrets.token_hex(TOKEN_ID_LENGTH // 2)
        secret = secrets.token_urlsafe(SECRET_BYTES)
        values = {"label": "", **row}
        with self.engine.begin() as conn:
            conn.execute(
                insert(api_tokens).values(
                    token_id=token_id,
                    kind=kind,
                    secret_hash=self._hashers[kind].hash(secret),
                    created_unix_s=time.time(),
                    **values,
                )
            )
        return f"{TOKEN_PREFIX}_{KIND_LETTERS[kind]}_{token_id}_{secret}"

    def _verify(self, secret_hash: str, secret: str) -> bool:
        from argon2.exceptions import InvalidHashError, VerificationError

        try:
            return self._hasher.verify(secret_hash, secret)
        except (VerificationError, InvalidHashError):
            return False

    def _cached(self, digest: bytes, token_id: str) -> bool:
        with self._lock:
            hit = self._verified.get(digest)
        return hit is not None and hit[0] == token_id and self._clock() < hit[1]

    def _remember(self, digest: bytes, token_id: str) -> None:
        if self.cache_ttl_s <= 0:
            return
        now = self._clock()
        with self._lock:
            if len(self._verified) >= MAX_CACHE_ENTRIES:
                self._verified = {k: v for k, v in self._verified.items() if v[1] > now}
                if len(self._verified) >= MAX_CACHE_ENTRIES:
                    self._verified.clear()
            self._verified[digest] = (token_id, now + self.cache_ttl_s)
