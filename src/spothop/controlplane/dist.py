"""The distribution the control plane serves: a wheel of the spothop it runs, built from the installed package.

An instance installs spothop from its control plane (``GET /v1/dist/{sha256}/{filename}``),
never from the package index, so it runs exactly the code the controller runs.
The contract:

1. :func:`build_wheel` packs the imported ``spothop`` package's folder (every
   file but ``__pycache__`` and compiled ``.pyc``) and a ``.dist-info``
   (``METADATA`` with the name, version, ``Requires-Dist`` and extras of the
   installed metadata; ``WHEEL``; ``entry_points.txt`` when installed;
   ``RECORD`` with every file's sha256). It works the same for an editable
   install (the source tree) and a site-packages install.
2. The wheel is deterministic: sorted entries, fixed timestamps and modes, so
   the same tree gives the same bytes and the same sha256.
3. It is cached under ``<home>/dist/<key>/``, ``key`` a hash of the package's
   files and metadata: it is rebuilt only when the code changed; the file is
   written atomically, so a reader never sees half a wheel.
4. :func:`distribution_for` is the :class:`~spothop.providers.base.Distribution`
   a launch carries: the wheel's URL under a control plane's base URL, its
   sha256 and its file name.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import spothop
from spothop.paths import FILE_MODE, private_dir
from spothop.providers.base import Distribution
from spothop.wire.routes import dist_url

NAME = "spothop"
# Raised when the wheel's layout changes, so a cache built by an older spothop is not reused.
FORMAT = "1"
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build time in the bytes
_FILE_MODE = 0o644 << 16
_SKIPPED_DIRS = frozenset({"__pycache__"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
# The installed metadata's fields the wheel keeps (the description and the rest are left out).
_KEPT_FIELDS = ("Summary", "License-Expression", "Requires-Python", "Provides-Extra")


@dataclass(frozen=True)
class Wheel:
    """A built wheel: where it lies, its sha256 (hex) and its file name."""

    path: Path
    sha256: str
    filename: str


def package_dir() -> Path:
    """The folder the running spothop was imported from (a source tree or site-packages)."""
    return Path(spothop.__file__).resolve().parent


def package_files(root: Path) -> list[tuple[str, Path]]:
    """``(name in the wheel, file)`` for every file of the package under ``root``, sorted."""
    found: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in files:
            if name.endswith(_SKIPPED_SUFFIXES):
                continue
            path = Path(folder, name)
            found.append((f"{NAME}/{path.relative_to(root).as_posix()}", path))
    return sorted(found)


def _installed() -> metadata.Distribution | None:
    try:
        return metadata.distribution(NAME)
    except metadata.PackageNotFoundError:
        return None


def version() -> str:
    """The version the wheel carries: the installed metadata's, else the package's own."""
    installed = _installed()
    return installed.version if installed is not None else spothop.__version__


def metadata_text() -> str:
    """The wheel's ``METADATA``: name, version, and the installed dependencies and extras."""
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version()}"]
    installed = _installed()
    if installed is not None:
        meta = installed.metadata
        for field in _KEPT_FIELDS:
            lines += [f"{field}: {value}" for value in meta.get_all(field) or ()]
        lines += [f"Requires-Dist: {req}" for req in installed.requires or ()]
    return "\n".join(lines) + "\n"


def _entry_points() -> str | None:
    installed = _installed()
    return installed.read_text("entry_points.txt") if installed is not None else None


def wheel_filename() -> str:
    """``spothop-VERSION-py3-none-any.whl`` (the version's ``-`` made ``_``, as wheels spell it)."""
    return f"{NAME}-{version().replace('-', '_')}-py3-none-any.whl"


def _dist_info_files() -> dict[str, bytes]:
    info = f"{NAME}-{version().replace('-', '_')}.dist-info"
    files = {
        f"{info}/METADATA": metadata_text().encode(),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\n"
            f"Generator: spothop ({version()})\n"
            "Root-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ).encode(),
    }
    entry_points = _entry_points()
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    return files


def content_key(files: list[tuple[str, Path]]) -> str:
    """A hash of the package's names, bytes and metadata: the wheel's cache key."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    for name, data in _entries(files):
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _entries(files: list[tuple[str, Path]]) -> Iterator[tuple[str, bytes]]:
    for name, path in files:
        yield name, path.read_bytes()
    yield from sorted(_dist_info_files().items())


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def wheel_bytes(files: list[tuple[str, Path]]) -> bytes:
    """The wheel of ``files`` and the dist-info, byte for byte the same for the same tree."""
    buffer = io.BytesIO()
    record: list[str] = []
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in _entries(files):
            _write(archive, name, data)
            record.append(f"{name},{_record_hash(data)},{len(data)}")
        info = f"{NAME}-{version().replace('-', '_')}.dist-info"
        record.append(f"{info}/RECORD,,")
        _write(archive, f"{info}/RECORD", ("\n".join(record) + "\n").encode())
    return buffer.getvalue()


def _write(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    entry = zipfile.ZipInfo(name, date_time=ZIP_DATE_TIME)
    entry.external_attr = _FILE_MODE
    entry.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(entry, data)


def build_wheel(home: Path, root: Path | None = None) -> Wheel:
    """The wheel of the running spothop (see the module docstring), built once per content.

    ``root`` is the package's folder (default :func:`package_dir`).
    """
    files = package_files(root or package_dir())
    folder = home / "dist" / content_key(files)[:32]
    filename = wheel_filename()
    path, digest_file = folder / filename, folder / f"{filename}.sha256"
    if path.is_file() and digest_file.is_file():
        return Wheel(path, digest_file.read_text().strip(), filename)
    data = wheel_bytes(files)
    sha256 = hashlib.sha256(data).hexdigest()
    private_dir(folder)
    _atomic_write(path, data)
    _atomic_write(digest_file, f"{sha256}\n".encode())  # after the wheel: its presence says done
    return Wheel(path, sha256, filename)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def find_wheel(home: Path, sha256: str, filename: str) -> Path | None:
    """The wheel ``filename`` built under ``home`` whose bytes hash to ``sha256`` (this code's or
    an earlier one's: the cache keeps each), or None."""
    for digest_file in sorted((home / "dist").glob(f"*/{filename}.sha256")):
        try:
            if digest_file.read_text().strip() == sha256:
                return digest_file.with_name(filename)
        except OSError:
            continue
    return None


def distribution_for(base_url: str, home: Path) -> Distribution:
    """The :class:`Distribution` a launch carries: the wheel at ``base_url``'s ``/v1/dist/``."""
    wheel = build_wheel(home)
    return Distribution(
        url=dist_url(base_url, wheel.sha256, wheel.filename),
        sha256=wheel.sha256,
        filename=wheel.filename,
    )
