"""A job's code: its ``workdir`` packed into one tar.gz, stored once by its sha256.

The contract:

1. :func:`pack` walks ``workdir`` and leaves out ``.git/`` and what its
   ``.gitignore`` and ``.spothopignore`` files say (gitignore syntax, each
   file's patterns relative to its own folder, deeper files and later lines
   deciding; a folder left out is not entered, as git does).
2. The archive is deterministic: members sorted, every time, owner and name
   fixed, modes ``0644``/``0755`` by the executable bit, gzip without a name
   or a time: the same tree gives the same sha256. Each file is read once,
   straight into the archive; what does not shrink (judged on a sample of
   each chunk) goes into stored gzip members, the rest is deflated at level
   1, so packing costs little more than copying (any gzip reader reads it).
3. Refused, each with one line (:class:`~spothop.errors.JobSpecError`): a
   ``workdir`` that is missing or a file; a file or folder that cannot be
   read (named); a bad ignore pattern (file and line named); a symbolic link
   that leads out of the ``workdir`` (named); more than the limit
   (:data:`MAX_BYTES_ENV`, default :data:`DEFAULT_MAX_MIB` MiB of files after
   the ignore rules, checked before anything is compressed), naming the
   limit and the largest files. A link inside the ``workdir`` is kept as a
   relative link.
4. :func:`store_workdir` keeps it under ``<home>/files/code/<sha256>.tar.gz``,
   written atomically, once per content (a second job with the same code
   reuses it). :func:`store_mount` packs a ``file_mounts`` source the same way
   (a folder as a workdir, a file as an archive of that one file), stored
   beside. The agent fetches it with its token
   (``GET /v1/agents/{instance_id}/code/{sha256}``) and unpacks it
   (:mod:`spothop.agent.code`).
5. An archive uploaded to a server (``PUT /v1/code/{sha256}``) lives in the store
   every replica shares (:mod:`spothop.state.code_archives`), the home file a
   cache of it: :func:`materialize` gives the home file, written from the store
   first when this home lacks it (so any replica serves any upload).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pathspec

from spothop.errors import JobSpecError
from spothop.paths import FILE_MODE, private_dir, spothop_home

if TYPE_CHECKING:
    from spothop.state.code_archives import CodeArchives

DEFAULT_MAX_MIB = 100
MAX_BYTES_ENV = "SPOTHOP_WORKDIR_MAX_MIB"
IGNORE_FILES = (".gitignore", ".spothopignore")
ALWAYS_LEFT_OUT = frozenset({".git"})
MIB = 1024 * 1024
# Level 1: a workdir is mostly code and data already compressed; level 6 costs ~3x the time
# for a few percent less, and the pack is on the launch's path.
GZIP_LEVEL = 1
# A chunk is deflated when its first _SAMPLE_BYTES shrink to at most _PAYS_RATIO of their size
# (deflating random bytes at level 1 costs ~4x deflating code, for nothing); chunks shorter
# than the sample stay in the member that is open.
_SAMPLE_BYTES = 2048
_PAYS_RATIO = 0.9
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, time 0, OS unknown
LARGEST_NAMED = 3
_SHA256 = re.compile(r"[0-9a-f]{64}")
_READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class CodeArchive:
    """A packed ``workdir``: its sha256, where it is stored, its files and sizes."""

    sha256: str
    path: Path
    files: int
    files_bytes: int
    archive_bytes: int


@dataclass(frozen=True)
class _Entry:
    name: str  # relative, POSIX
    path: Path
    kind: str  # "dir", "file" or "link"
    size_bytes: int = 0
    executable: bool = False
    link: str = ""


class _Rules:
    """The ignore files met on the way down: ``(folder, spec)``, the root's first."""

    def __init__(self, specs: tuple[tuple[str, pathspec.GitIgnoreSpec], ...] = ()) -> None:
        self.specs = specs

    def below(self, root: Path, folder: str) -> _Rules:
        added = [(folder, spec) for spec in _read_ignores(root, folder)]
        return _Rules((*self.specs, *added)) if added else self

    def ignored(self, name: str, is_dir: bool) -> bool:
        decided = False
        for folder, spec in self.specs:
            relative = name[len(folder) + 1 :] if folder else name
            result = spec.check_file(relative + "/" if is_dir else relative)
            if result.include is not None:
                decided = result.include
        return decided


def _read_ignores(root: Path, folder: str) -> list[pathspec.GitIgnoreSpec]:
    specs = []
    for ignore in IGNORE_FILES:
        path = root / folder / ignore
        if not path.is_file():
            continue
        shown = f"{folder}/{ignore}" if folder else ignore
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise JobSpecError(f"workdir: cannot read {shown}: {_reason(err)}") from None
        for number, line in enumerate(lines, 1):
            try:
                pathspec.GitIgnoreSpec.from_lines([line])
            except (ValueError, re.error) as err:  # pathspec's errors, and a bad [range]'s
                raise JobSpecError(
                    f"workdir: {shown} line {number}: {line!r} is not a valid ignore pattern "
                    f"({err}); fix or remove it (gitignore syntax)"
                ) from None
        specs.append(pathspec.GitIgnoreSpec.from_lines(lines))
    return specs


def _reason(err: BaseException) -> str:
    return err.strerror if isinstance(err, OSError) and err.strerror else str(err)


def max_bytes_setting() -> int:
    """The size limit: ``$SPOTHOP_WORKDIR_MAX_MIB`` MiB, else :data:`DEFAULT_MAX_MIB`."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_MIB * MIB
    try:
        mib = float(text)
    except ValueError:
        mib = -1.0
    if not mib > 0:
        raise JobSpecError(f"{MAX_BYTES_ENV}={text!r} is not a positive number of MiB")
    return int(mib * MIB)


def _check_workdir(workdir: Path) -> Path:
    if not workdir.exists():
        raise JobSpecError(f"workdir {str(workdir)!r} does not exist; give an existing folder")
    if not workdir.is_dir():
        raise JobSpecError(f"workdir {str(workdir)!r} is a file; workdir must be a folder")
    if not os.access(workdir, os.R_OK | os.X_OK):
        raise JobSpecError(f"workdir {str(workdir)!r} cannot be read; check its permissions")
    return workdir.resolve()


def collect(workdir: Path) -> list[_Entry]:
    """The entries to pack, sorted by name (see the module docstring for what is refused)."""
    root = _check_workdir(workdir)
    entries: list[_Entry] = []
    _walk(root, "", _Rules().below(root, ""), entries)
    return sorted(entries, key=lambda e: e.name)


def _walk(root: Path, folder: str, rules: _Rules, out: list[_Entry]) -> None:
    try:
        names = sorted(os.listdir(root / folder))
    except OSError as err:
        raise JobSpecError(
            f"workdir: cannot read folder {folder or '.'}: {_reason(err)}; "
            "fix its permissions or leave it out in .spothopignore"
        ) from None
    for base in names:
        name = f"{folder}/{base}" if folder else base
        path = root / name
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            if not rules.ignored(name, path.is_dir()):
                out.append(_link(root, name, path))
        elif stat.S_ISDIR(info.st_mode):
            if base in ALWAYS_LEFT_OUT or rules.ignored(name, True):
                continue
            out.append(_Entry(name, path, "dir"))
            _walk(root, name, rules.below(root, name), out)
        elif stat.S_ISREG(info.st_mode) and not rules.ignored(name, False):
            if not os.access(path, os.R_OK):
                raise JobSpecError(
                    f"workdir: cannot read {name}: permission denied; "
                    "fix its permissions or leave it out in .spothopignore"
                )
            executable = bool(info.st_mode & stat.S_IXUSR)
            out.append(_Entry(name, path, "file", info.st_size, executable))


def _link(root: Path, name: str, path: Path) -> _Entry:
    target = path.resolve()
    if not target.is_relative_to(root):
        raise JobSpecError(
            f"workdir: the link {name} points out of the workdir (to {os.readlink(path)!r}); "
            "an instance would not have its target: copy the file in or leave the link out"
        )
    relative = os.path.relpath(target, (root / name).parent.resolve())
    return _Entry(name, path, "link", link=Path(relative).as_posix())


def check_size(entries: list[_Entry], max_bytes: int) -> int:
    """The files' total size; JobSpecError naming the limit and the largest files when over it."""
    total = sum(e.size_bytes for e in entries)
    if total > max_bytes:
        largest = sorted(entries, key=lambda e: -e.size_bytes)[:LARGEST_NAMED]
        named = ", ".join(f"{e.name} ({e.size_bytes / MIB:.1f} MiB)" for e in largest)
        raise JobSpecError(
            f"workdir is {total / MIB:.1f} MiB after its ignore rules, over the limit of "
            f"{max_bytes / MIB:g} MiB ({MAX_BYTES_ENV}); the largest files: {named}; "
            "leave them out in .spothopignore (put data in a bucket) or raise the limit"
        )
    return total


class _Gzip:
    """A gzip file written as members (RFC 1952 allows several, every reader joins them): a run
    of data that compresses is deflated at :data:`GZIP_LEVEL`, a run that does not (random bytes,
    data already compressed) is stored, so no time goes into compressing what does not shrink.
    The sha256 and size of what is written are kept; every member has no name and no time."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.count = 0
        self.deflating: bool | None = None  # None: no member open
        self.zipper: Any = None
        self.crc = 0
        self.size = 0

    def _put(self, data: bytes) -> None:
        if data:
            self.digest.update(data)
            self.count += len(data)
            self.out.write(data)

    def write(self, data: bytes | memoryview, deflate: bool | None = None) -> None:
        """Write ``data`` deflated or stored (``None``: in the open member, whichever it is)."""
        if deflate is None:
            deflate = True if self.deflating is None else self.deflating
        if deflate != self.deflating:
            self._end()
            self._put(_GZIP_HEADER)
            level = GZIP_LEVEL if deflate else 0
            self.zipper = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
            self.deflating, self.crc, self.size = deflate, 0, 0
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        self._put(self.zipper.compress(data))

    def _end(self) -> None:
        if self.deflating is not None:
            self._put(self.zipper.flush())
            self._put(struct.pack("<II", self.crc, self.size & 0xFFFFFFFF))
            self.deflating = None

    def close(self) -> None:
        if self.deflating is None:
            self.write(b"")
        self._end()


def _pays(chunk: bytes) -> bool | None:
    """Whether deflating ``chunk`` pays, judged on a sample (``None``: too small to matter)."""
    if len(chunk) < _SAMPLE_BYTES:
        return None
    sample = chunk[:_SAMPLE_BYTES]
    zipper = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return len(zipper.compress(sample) + zipper.flush()) <= _PAYS_RATIO * len(sample)


def _member(entry: _Entry) -> tarfile.TarInfo:
    member = tarfile.TarInfo(entry.name)
    member.mtime = 0
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    if entry.kind == "dir":
        member.type, member.mode = tarfile.DIRTYPE, 0o755
    elif entry.kind == "link":
        member.type, member.mode, member.linkname = tarfile.SYMTYPE, 0o777, entry.link
    else:
        member.size, member.mode = entry.size_bytes, 0o755 if entry.executable else 0o644
    return member


def _copy_file(entry: _Entry, gz: _Gzip) -> None:
    """Each file is read once, in chunks, straight into the archive (its size as listed)."""
    left = entry.size_bytes
    try:
        with open(entry.path, "rb", buffering=0) as data:
            while left:
                chunk = data.read(min(left, _READ_CHUNK))
                if not chunk:
                    raise JobSpecError(
                        f"workdir: {entry.name} changed while it was packed (it shrank); "
                        "launch again once it is written"
                    )
                gz.write(chunk, _pays(chunk))
                left -= len(chunk)
    except OSError as err:
        raise JobSpecError(f"workdir: cannot read {entry.name}: {_reason(err)}") from None
    if entry.size_bytes % tarfile.BLOCKSIZE:
        gz.write(bytes(tarfile.BLOCKSIZE - entry.size_bytes % tarfile.BLOCKSIZE))


def write_archive(entries: list[_Entry], out: BinaryIO) -> tuple[str, int]:
    """Write the tar.gz of ``entries`` to ``out`` (a POSIX pax tar, as :mod:`tarfile` writes it,
    in gzip members: see :class:`_Gzip`); returns its sha256 and size in bytes."""
    gz = _Gzip(out)
    written = 0
    for entry in entries:
        header = _member(entry).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        gz.write(header)
        written += len(header)
        if entry.kind == "file":
            _copy_file(entry, gz)
            written += -(-entry.size_bytes // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    end = 2 * tarfile.BLOCKSIZE
    end += -(written + end) % tarfile.RECORDSIZE
    gz.write(bytes(end))
    gz.close()
    return gz.digest.hexdigest(), gz.count


def code_dir(home: Path) -> Path:
    """Where packed workdirs are kept: ``<home>/files/code``."""
    return home / "files" / "code"


def archive_path(home: Path, sha256: str) -> Path:
    """The stored archive of ``sha256`` (ValueError for anything but 64 lower-case hex digits)."""
    if not _SHA256.fullmatch(sha256):
        raise ValueError(f"{sha256!r:.80} is not a sha256 (64 lower-case hex digits)")
    return code_dir(home) / f"{sha256}.tar.gz"


def store_workdir(
    workdir: Path | str, home: Path | None = None, *, max_bytes: int | None = None
) -> CodeArchive:
    """Pack ``workdir`` and keep it under ``<home>/files/code/<sha256>.tar.gz`` (see the module)."""
    entries = collect(Path(workdir))
    total = check_size(entries, max_bytes_setting() if max_bytes is None else max_bytes)
    return _store(entries, total, home)


def store_mount(
    source: Path | str, label: str, home: Path | None = None, *, max_bytes: int | None = None
) -> CodeArchive:
    """Pack a ``file_mounts`` source and store it as :func:`store_workdir` does: a folder as a
    workdir is (its ignore files honoured), a file as an archive of that one file under its own
    name. Every refusal reads as the workdir's with ``label`` (``file_mounts '/data'``) in its
    place; a source that does not exist is named as a mount's."""
    path = Path(source)
    if not path.exists():
        raise JobSpecError(f"{label}: the source {str(path)!r} does not exist; fix the path")
    try:
        if path.is_dir():
            entries = collect(path)
        else:
            if not os.access(path, os.R_OK):
                raise JobSpecError(f"workdir: cannot read {path.name}: permission denied")
            size = path.stat().st_size
            executable = bool(path.stat().st_mode & stat.S_IXUSR)
            entries = [_Entry(path.name, path, "file", size, executable)]
        total = check_size(entries, max_bytes_setting() if max_bytes is None else max_bytes)
    except JobSpecError as err:
        text = str(err)
        raise JobSpecError(
            label + text.removeprefix("workdir")
            if text.startswith("workdir")
            else f"{label}: {text}"
        ) from None
    return _store(entries, total, home)


def _store(entries: list[_Entry], total: int, home: Path | None) -> CodeArchive:
    folder = private_dir(code_dir(home or spothop_home()))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".packing-", suffix=".tar.gz")
    try:
        with os.fdopen(fd, "wb") as out:
            sha256, size = write_archive(entries, out)
        final = archive_path(folder.parent.parent, sha256)
        if final.is_file():
            os.unlink(tmp)
            os.utime(final)  # packed again: not old code that no job needs (.prune)
        else:
            os.chmod(tmp, FILE_MODE)  # a job's code: its user's only
            os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    files = sum(1 for e in entries if e.kind == "file")
    return CodeArchive(sha256, final, files, total, size)


def materialize(home: Path, sha256: str, archives: CodeArchives) -> Path | None:
    """The home file of archive ``sha256``, written from the store first when this home lacks
    it (another replica took the upload, or this one's cache was cleared): to a temporary file
    beside it, checked against the sha256 on the way, ``0600``, then renamed into place, so a
    reader never sees a partial file. None when the store does not hold it either;
    :class:`~spothop.state.code_archives.CodeArchiveDamaged` when what it holds is not the
    archive (nothing is left here)."""
    final = archive_path(home, sha256)
    if final.is_file():
        return final
    folder = private_dir(code_dir(home))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fetching-", suffix=".tar.gz")
    try:
        with os.fdopen(fd, "wb") as out:
            found = archives.read_into(sha256, out)
        if not found:
            os.unlink(tmp)
            return None
        os.chmod(tmp, FILE_MODE)  # a job's code: its user's only
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def code_url(base_url: str, sha256: str) -> str:
    """The agent's ``--code-url`` for a control plane's base URL (``{instance_id}`` left for the
    agent to fill in: the command is written before the instance has an id)."""
    return f"{base_url.rstrip('/')}/v1/agents/{{instance_id}}/code/{sha256}"
