"""Where spothop keeps its files on this machine.

Everything lives under one folder, ``$SPOTHOP_HOME`` (default ``~/.spothop``),
so a test, a CI run or a second user can point spothop elsewhere with one
variable.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

from spothop.errors import ConfigError

PLAIN_NAME_MAX_CHARS = 128  # well under every file system's 255-byte name limit, even in UTF-8
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def spothop_home() -> Path:
    """The folder spothop writes to: ``$SPOTHOP_HOME``, else ``~/.spothop``.

    It need not exist yet (writers create it); a ``$SPOTHOP_HOME`` that exists
    and is not a folder is a :class:`ConfigError`, since nothing could be kept in it.
    """
    configured = os.environ.get("SPOTHOP_HOME")
    # Absolute: a relative home names another folder in every process started elsewhere (the
    # controller, an instance's host), and a job under it never got past its first launch.
    home = (Path(configured).expanduser() if configured else Path.home() / ".spothop").absolute()
    if home.exists() and not home.is_dir():
        variable = "SPOTHOP_HOME" if configured else "the default spothop home"
        raise ConfigError(
            f"{variable} {str(home)!r} is a file, not a folder; "
            "point SPOTHOP_HOME at a folder (it is created if missing)"
        )
    return home


HOME_MODE = 0o700  # the home holds every job's envs and the agents' tokens: its user's only
FILE_MODE = 0o600  # every file spothop keeps in its home
# The umask of spothop's own background processes (the controller, the agent API): everything
# they create (their logs, the wheel they serve, the local cloud's instances and their disks,
# which hold the jobs' envs) is its user's only, whatever the umask of the shell that started
# them.
PRIVATE_UMASK = 0o077
_warned_homes: set[str] = set()


def ensure_home() -> Path:
    """:func:`spothop_home`, created (with its parents) if missing, private to its user (0700).

    A home that exists keeps its mode: its user made it, and may have shared it on purpose;
    spothop never changes it, but says once per process, on stderr, that others can read it
    (:func:`warn_if_shared`). Files spothop keeps there are its user's only whatever the home's
    mode (the store: :func:`spothop.db.make_engine`; the others: :func:`private_dir`,
    :func:`open_private`, :data:`PRIVATE_UMASK`).
    """
    home = spothop_home()
    if not home.is_dir():
        home.mkdir(parents=True, exist_ok=True, mode=HOME_MODE)
        home.chmod(HOME_MODE)  # mkdir's mode passes through the umask; this does not
    else:
        warn_if_shared(home)
    return home


def warn_if_shared(home: Path) -> None:
    """One line on stderr, once per process and home, when other users may open ``home``
    (group or other bits set): it holds every job's envs. Its mode is left as it is."""
    key = str(home)
    if key in _warned_homes:
        return
    _warned_homes.add(key)
    try:
        mode = stat.S_IMODE(home.stat().st_mode)
    except OSError:
        return
    if mode & 0o077:
        sys.stderr.write(
            f"warning: spothop's home {home} is open to other users (mode {mode:04o}); it holds "
            f"every job's envs and the agents' tokens: chmod 700 {home}\n"
        )
        sys.stderr.flush()


def private_dir(path: Path) -> Path:
    """``path`` as a folder, created if missing with each missing parent its user's only (0700,
    whatever the umask); a folder that exists keeps its mode."""
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=HOME_MODE)
        except FileExistsError:
            continue  # another process made it first: its mode is its maker's
        folder.chmod(HOME_MODE)
    return path


def open_private(path: Path, mode: str = "ab") -> IO[Any]:
    """``open(path, mode)`` for appending (``"a"``, ``"ab"``, ``"a+"``), the file created its
    user's only (0600) if missing; one that exists keeps its mode."""
    if not mode.startswith("a"):
        raise ValueError(f"open_private appends only, not {mode!r}")
    flags = os.O_CREAT | os.O_APPEND | (os.O_RDWR if "+" in mode else os.O_WRONLY)
    fd = os.open(path, flags, FILE_MODE)
    try:
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def plain_name(value: str, what: str) -> str:
    """``value`` if it can be one file name: letters, digits, ``.``, ``_`` and ``-``,
    not starting with ``.`` or ``-``, at most :data:`PLAIN_NAME_MAX_CHARS` characters.

    Names taken from users that become paths (a provider, an instance id) go
    through here, so that ``../x``, ``a/b``, an absolute path, ``.`` or a name
    with a NUL or a newline is refused with a :class:`ConfigError` naming
    ``what`` rather than writing somewhere else.
    """
    if (
        not isinstance(value, str)
        or not _PLAIN_NAME.fullmatch(value)
        or len(value) > PLAIN_NAME_MAX_CHARS
    ):
        raise ConfigError(
            f"{what} {value!r} is not a plain name: use letters, digits, '.', '_' and '-' "
            f"(not first), at most {PLAIN_NAME_MAX_CHARS} characters, no '/'"
        )
    return value


def path_under(root: Path, *names: str) -> Path:
    """``root / names[0] / names[1] ...``, each name a :func:`plain_name`, checked to stay under ``root``.

    The check is made on resolved paths too, so a symbolic link inside ``root``
    that points outside it is refused (:class:`ConfigError`) like a ``..``.
    """
    path = root
    for name in names:
        path = path / plain_name(name, "name")
    resolved_root = root.resolve()
    if not path.resolve().is_relative_to(resolved_root):
        raise ConfigError(
            f"{str(path)!r} leads outside {str(root)!r}; use a plain name that stays under it"
        )
    return path


def user_catalog_dir() -> Path:
    """Imported catalogs (``spothop catalog import``) live here, one CSV per provider."""
    return spothop_home() / "catalog"


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new, never half.

    The one atomic write in spothop. The data goes to a temporary file in the
    same folder and is renamed over the target (rename is atomic on POSIX).
    ``durable`` also flushes it to disk first, so a crash cannot leave an empty
    file behind the new name; files only another process on this machine
    reads, never after a crash (the agent's control folder), skip that cost.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
