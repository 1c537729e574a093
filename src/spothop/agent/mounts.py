"""The job's ``file_mounts`` on the node: fetched or copied before ``setup``.

Standard library only at import (the light agent loads it). The agent's
``--mounts`` is a JSON list (:func:`spothop.jobs.launcher.agent_mounts` writes it),
applied in order by :func:`apply_mounts` after the job's code is unpacked:

- ``{"dest", "fetch": URL, "sha256", "file"}``: an upload. Fetched with the
  agent's token and checked against its sha256 as the job's code is
  (:func:`spothop.agent.code.download_to`), then unpacked into ``dest`` (a
  folder), or its one file written at ``dest`` (``"file": true``).
- ``{"dest", "copy": SOURCE}``: a plain path (a bucket the node shares) is
  copied with :mod:`shutil`; a URL (``s3://``, ``gs://``, any fsspec scheme)
  is copied by a child process, ``python -m spothop.agent.mounts copy URL DEST``,
  so that the agent itself never loads fsspec or a cloud SDK (it stays small
  while it watches).

``dest``: absolute, ``~/…`` (this user's home), or relative to ``workdir``. A
folder's contents land in ``dest`` (SkyPilot's meaning); a file is ``dest``.
Each mount is logged ``mount: DEST ← SOURCE (N files, X MiB)``; the first that
fails raises :class:`MountError` (one line, naming the mount) and the agent ends
the attempt before the worker starts: a worker never runs without its files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spothop.agent.code import CodeFetchError, download_to, unpack_file

MIB = 1024 * 1024
COPY_TIMEOUT_S = 3600.0  # one bucket copy; a boot that needs longer should read from the bucket


class MountError(Exception):
    """A file mount could not be put on the node (one line: which, and why)."""


@dataclass(frozen=True)
class Mounted:
    dest: Path
    source: str
    files: int
    size_bytes: int

    def line(self) -> str:
        """What the agent's log says."""
        return (
            f"mount: {self.dest} \u2190 {self.source} "
            f"({self.files} files, {self.size_bytes / MIB:.1f} MiB)"
        )


def parse_mounts(text: str) -> list[dict[str, Any]]:
    """``--mounts`` read (ValueError, one line, for anything but a list of mount objects)."""
    try:
        mounts = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"--mounts is not JSON: {err}") from None
    if not isinstance(mounts, list) or not all(
        isinstance(m, dict) and isinstance(m.get("dest"), str) and ("fetch" in m or "copy" in m)
        for m in mounts
    ):
        raise ValueError('--mounts is a JSON list of {"dest", "fetch"|"copy", …} objects')
    return mounts


def destination(dest: str, workdir: Path) -> Path:
    """Where ``dest`` is on this node: absolute, the home's (``~``), else ``workdir``'s."""
    if dest == "~" or dest.startswith("~/"):
        return Path(os.path.expanduser(dest))
    return Path(dest) if os.path.isabs(dest) else workdir / dest


def _counted(path: Path) -> tuple[int, int]:
    if path.is_file():
        return 1, path.stat().st_size
    files = size = 0
    for folder, _dirs, names in os.walk(path):
        for name in names:
            entry = os.path.join(folder, name)
            if os.path.isfile(entry) and not os.path.islink(entry):
                files += 1
                size += os.path.getsize(entry)
    return files, size


def _fetch(mount: dict[str, Any], dest: Path, token: str | None, instance_id: str) -> str:
    url = str(mount["fetch"]).replace("{instance_id}", instance_id)
    sha256 = str(mount["sha256"])
    with tempfile.TemporaryFile() as packed:
        try:
            got, size = download_to(url, token, packed)
        except CodeFetchError as err:
            raise MountError(str(err).replace("the job's code", "the mount")) from None
        if got != sha256:
            raise MountError(f"the download has sha256 {got} ({size} bytes), expected {sha256}")
        if not mount.get("file"):
            unpack_file(packed, dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=dest.parent) as holder:
                unpack_file(packed, Path(holder))
                (name,) = os.listdir(holder)
                os.replace(os.path.join(holder, name), dest)
    return f"upload {sha256[:12]}"


def _copy_path(source: str, dest: Path) -> None:
    path = Path(source.removeprefix("file://"))
    if not path.exists():
        raise MountError(f"the source {source} does not exist on this node")
    if path.is_dir():
        shutil.copytree(path, dest, symlinks=True, dirs_exist_ok=True)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)


def _copy_url(source: str, dest: Path) -> None:
    command = [sys.executable, "-m", "spothop.agent.mounts", "copy", source, str(dest)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COPY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MountError(f"copying {source} took over {COPY_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise MountError(lines[-1] if lines else f"the copy exited {done.returncode}")


def apply_one(
    mount: dict[str, Any], workdir: Path, *, token: str | None = None, instance_id: str = ""
) -> Mounted:
    """Put one mount on the node (module docstring); :class:`MountError` naming it."""
    dest = destination(str(mount["dest"]), workdir)
    try:
        if "fetch" in mount:
            source = _fetch(mount, dest, token, instance_id)
        else:
            source = str(mount["copy"])
            is_url = "://" in source and not source.startswith("file://")
            (_copy_url if is_url else _copy_path)(source, dest)
    except MountError as err:
        raise MountError(f"mount {mount['dest']}: {err}") from None
    except (OSError, CodeFetchError, ValueError) as err:
        raise MountError(f"mount {mount['dest']}: {err}") from None
    files, size = _counted(dest)
    return Mounted(dest, source, files, size)


def apply_mounts(
    mounts: Sequence[dict[str, Any]],
    workdir: Path,
    *,
    token: str | None = None,
    instance_id: str = "",
    log: Callable[[str], None] = lambda _line: None,
) -> list[Mounted]:
    """Every mount in order, each logged; the first failure raises :class:`MountError`."""
    done = []
    for mount in mounts:
        mounted = apply_one(mount, workdir, token=token, instance_id=instance_id)
        log(mounted.line())
        done.append(mounted)
    return done


def copy_url(source: str, dest: Path) -> None:
    """Copy the object or folder at the fsspec URL ``source`` to ``dest`` (the child's work):
    a folder's files under ``dest`` by their path below ``source``, a single object at ``dest``."""
    import fsspec  # the child process only: the agent itself never loads it

    fs, root = fsspec.core.url_to_fs(source)
    root = str(root).rstrip("/")
    if not fs.exists(root):
        raise MountError(f"the source {source} does not exist")
    if not fs.isdir(root):
        dest.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(root, str(dest))
        return
    for found in sorted(fs.find(root)):
        relative = str(found)[len(root) :].lstrip("/")
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(found, str(target))
    dest.mkdir(parents=True, exist_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spothop.agent.mounts copy URL DEST``: exit 0, or 1 with one line on stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[0] != "copy":
        print("usage: python -m spothop.agent.mounts copy URL DEST", file=sys.stderr)
        return 2
    try:
        copy_url(args[1], Path(args[2]))
    except ImportError as err:
        print(
            f"copying {args[1]} needs a package that is not installed ({err.name})", file=sys.stderr
        )
        return 1
    except Exception as err:  # every storage library fails in its own words
        text = str(err).strip().splitlines()
        print(f"cannot copy {args[1]}: {text[0] if text else type(err).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
