"""Where a local instance's boot script runs: its own root, sharing nothing with the controller but the network.

Isolated (Linux, the default): the host starts the boot script as
``unshare --mount --propagation private [--user --map-root-user] -- bash
isolate.sh``; that setup script builds the instance's root in ``root/`` of
the instance's folder (its writable disk) and ends in ``chroot root env -i …
/bin/bash /user-data``. Inside:

- ``/usr`` bound read-only; ``/bin``, ``/lib``, ``/lib64``, ``/sbin`` (and
  ``/lib32``, ``/libx32``) as the host has them: a symlink is copied, a real
  folder bound read-only;
- ``/etc`` an overlay (the host's ``/etc`` below, ``etc-upper/`` of the
  instance folder above), so the boot script writes ``/etc/spothop`` and
  ``/etc/systemd/system`` without touching the host's;
- ``/dev``, ``/proc``, ``/sys`` the host's (recursive binds);
- ``/tmp``, ``/opt``, ``/var``, ``/root``, ``/home``, ``/run`` the
  instance's own (empty at boot);
- each path of the world's machine image (``image:``) read-only at its own
  absolute path, each bucket (``buckets:``) read-write at its own path.

Nothing else exists there: not the controller's ``SPOTHOP_HOME``, not the
project's source tree, the user's home, a job's workdir or another
instance. The environment is clean: ``PATH`` is the image's ``bin`` folders,
then the ``systemctl`` shim's folder (:data:`SHIM_DIR`), then the system's;
``HOME=/root``, ``LANG=C.UTF-8``; nothing else of the controller's.

The ``systemctl`` shim (:data:`SHIM`) does what the boot script asks of
systemd: ``daemon-reload`` (nothing), ``is-active --quiet UNIT.service`` (its
pid file names a live process), ``start --no-block UNIT.service`` (the
unit's ``ExecStart=`` in a session of its own, cwd ``/``, output appended to
``/var/log/UNIT.log``, pid in ``/run/UNIT.pid``). The host hard-links the
agent unit's log to the instance's ``console.log``, so the console holds the
boot script's output and the unit's.

Unisolated (not Linux, ``unshare`` refused, or ``isolation: off``): the
same boot script runs directly as the host's user, with the controller's
environment, its absolute paths of the instance's own disk
(:data:`ROOTED_PATHS`: ``/etc/spothop``, ``/etc/systemd/system``,
``/opt/spothop``, ``/var/log``, ``/run``) moved under ``root/`` of the
instance folder, the shim first on ``PATH`` and the unit's cwd the instance
folder. Such an instance sees the whole machine; the local cloud says so
once per process (a warning naming why). ``isolation: required`` refuses a
launch where isolation is unavailable instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spothop.errors import ConfigError

ISOLATION_ENV = "SPOTHOP_LOCAL_ISOLATION"  # the mode for a world file that does not say
MODES = ("auto", "required", "off")
ROOT_DIR = "root"
SHIM_DIR = "/opt/.local-cloud/bin"
USER_DATA = "user-data"
UNIT_LOG = "/var/log/spothop-agent.log"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOTED_PATHS = ("/etc/spothop", "/etc/systemd/system", "/opt/spothop", "/var/log/", "/run/")
_ROOTED = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(p) for p in ROOTED_PATHS) + ")")
_HOST_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_OWN_DIRS = ("tmp", "opt", "var/log", "root", "home", "run", "etc", "usr", "dev", "proc", "sys")
_PROBE_TIMEOUT_S = 10.0

SHIM = r"""#!/bin/bash
# systemctl of the local cloud: what spothop's boot script asks of systemd, nothing more.
root="${LOCAL_CLOUD_ROOT:-}"
unit() { local u="${1%.service}"; echo "$u"; }
case "${1:-}" in
  daemon-reload) exit 0 ;;
  is-active)
    shift; [ "${1:-}" = --quiet ] && shift
    u=$(unit "${1:-}"); pid=$(cat "$root/run/$u.pid" 2>/dev/null) || exit 3
    kill -0 "$pid" 2>/dev/null && exit 0; exit 3 ;;
  start)
    shift; [ "${1:-}" = --no-block ] && shift
    u=$(unit "${1:-}"); file="$root/etc/systemd/system/$u.service"
    [ -f "$file" ] || { echo "systemctl: unit $u.service not found" >&2; exit 5; }
    exec_start=$(sed -n 's/^ExecStart=//p' "$file" | head -n 1)
    [ -n "$exec_start" ] || { echo "systemctl: $u.service has no ExecStart=" >&2; exit 1; }
    mkdir -p "$root/var/log" "$root/run"
    cd "${LOCAL_CLOUD_CWD:-/}"
    setsid /bin/bash -c "exec $exec_start" >>"$root/var/log/$u.log" 2>&1 </dev/null &
    echo $! > "$root/run/$u.pid"
    exit 0 ;;
  *) echo "systemctl: '${1:-}' is not something the local cloud's instances do" >&2; exit 1 ;;
esac
"""


@dataclass(frozen=True)
class Boot:
    """How the host starts one instance's boot script: the command, its env, its cwd."""

    command: list[str]
    env: dict[str, str]
    cwd: Path
    root: Path  # where the instance's /run, /var/log… are, as the host sees them


def mode_of(world_mode: str | None) -> str:
    """The isolation mode: the world's, else ``$SPOTHOP_LOCAL_ISOLATION``, else ``auto``."""
    mode = world_mode or os.environ.get(ISOLATION_ENV) or "auto"
    if mode not in MODES:
        raise ConfigError(
            f"${ISOLATION_ENV}={mode!r} is not an isolation mode; use one of {', '.join(MODES)}"
        )
    return mode


def _unshare_flags() -> list[str]:
    flags = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        flags += ["--user", "--map-root-user"]
    return flags


@functools.cache
def unavailable() -> str | None:
    """Why isolation cannot run on this machine (one sentence), or None where it can."""
    if not sys.platform.startswith("linux"):
        return f"isolation needs Linux's mount namespaces; this is {sys.platform}"
    for tool in ("unshare", "chroot", "mount"):
        if shutil.which(tool) is None:
            return (
                f"isolation needs the '{tool}' command (util-linux, coreutils), not found on PATH"
            )
    try:
        done = subprocess.run(
            ["unshare", *_unshare_flags(), "--", "mount", "-t", "tmpfs", "none", "/mnt"],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare could not run: {exc}"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"unshare was refused ({said}); unprivileged user namespaces may be off"
    return None


@functools.cache
def warn_unisolated(reason: str) -> None:
    """Say once per process that local instances run unisolated, and why."""
    warnings.warn(
        f"the local cloud runs its instances unisolated: {reason}; they see this machine's "
        "whole disk (set 'isolation: required' in the world file to refuse instead)",
        RuntimeWarning,
        stacklevel=3,
    )


def _bound(paths: Sequence[Path]) -> list[Path]:
    """The paths to bind, outermost first, leaving out those /usr already shows."""
    return sorted(
        {p for p in paths if p != Path("/usr") and Path("/usr") not in p.parents},
        key=lambda p: len(p.parts),
    )


def setup_script(
    root: Path, upper: Path, work: Path, image: Sequence[Path], buckets: Sequence[Path]
) -> str:
    """The shell run in the new mount namespace: build ``root`` and chroot into it (module docstring)."""
    q = shlex.quote
    r = q(str(root))
    lines = ["set -eu", f"R={r}", "mount --bind /usr $R/usr && mount -o remount,bind,ro $R/usr"]
    for name in _HOST_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            lines.append(f"ln -sfn {q(os.readlink(host))} $R/{name}")
        elif host.is_dir():
            lines.append(
                f"mkdir -p $R/{name} && mount --bind /{name} $R/{name} && mount -o remount,bind,ro $R/{name}"
            )
    lines += [
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={q(str(upper))},workdir={q(str(work))} $R/etc",
        "mount --rbind /dev $R/dev",
        "mount --rbind /proc $R/proc",
        "mount --rbind /sys $R/sys",
    ]
    for folder in _bound(image):
        src, dst = q(str(folder)), '"$R"' + q(str(folder))
        lines.append(
            f"mkdir -p {dst} && mount --rbind {src} {dst} && mount -o remount,bind,ro {dst}"
        )
    for folder in sorted(buckets, key=lambda p: len(p.parts)):
        src, dst = q(str(folder)), '"$R"' + q(str(folder))
        lines.append(f"mkdir -p {dst} && mount --rbind {src} {dst}")
    search = ":".join([*(str(p / "bin") for p in image), SHIM_DIR, SYSTEM_PATH])
    lines.append(
        f'exec chroot "$R" /usr/bin/env -i PATH={q(search)} HOME=/root LANG=C.UTF-8 /bin/bash /{USER_DATA}'
    )
    return "\n".join(lines) + "\n"


def _rooted(user_data: str, root: Path) -> str:
    """The boot script with the instance-disk paths it writes moved under ``root`` (unisolated)."""
    return _ROOTED.sub(lambda m: f"{root}{m.group(1)}", user_data)


def prepare(
    directory: Path,
    user_data: str,
    *,
    isolated: bool,
    image: Sequence[Path],
    buckets: Sequence[Path],
    console: Path,
) -> Boot:
    """Make the instance's root in ``directory`` and say how to start ``user_data`` in it."""
    root = directory / ROOT_DIR
    for name in _OWN_DIRS:
        (root / name).mkdir(parents=True, exist_ok=True)
    shim = root / SHIM_DIR.lstrip("/") / "systemctl"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(SHIM)
    shim.chmod(0o755)
    unit_log = root / UNIT_LOG.lstrip("/")
    if not unit_log.exists():
        # One console: the boot script's output and the unit's (else console_text reads both).
        with contextlib.suppress(OSError):
            os.link(console, unit_log)
    if isolated:
        # The units' folder exists as on a systemd host, even where this machine's /etc has none.
        (directory / "etc-upper" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
        (directory / "etc-work").mkdir(exist_ok=True)
        (root / USER_DATA).write_text(user_data)
        (root / USER_DATA).chmod(0o600)  # it holds the agent's token, as user-data does
        script = directory / "isolate.sh"
        script.write_text(
            setup_script(root, directory / "etc-upper", directory / "etc-work", image, buckets)
        )
        command = ["unshare", *_unshare_flags(), "--", "/bin/bash", str(script)]
        return Boot(command, {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}, directory, root)
    (root / "etc" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
    (directory / "boot.sh").write_text(_rooted(user_data, root))
    env = {
        **os.environ,
        "PATH": f"{shim.parent}:{os.environ.get('PATH', SYSTEM_PATH)}",
        "LOCAL_CLOUD_ROOT": str(root),
        "LOCAL_CLOUD_CWD": str(directory),
    }
    return Boot(["/bin/bash", str(directory / "boot.sh")], env, directory, root)


def console_text(directory: Path) -> str:
    """The instance's console: ``console.log`` (with the unit's log where it is not the same file)."""
    console = directory / "console.log"
    unit_log = directory / ROOT_DIR / UNIT_LOG.lstrip("/")
    text = console.read_text(errors="replace") if console.exists() else ""
    if unit_log.exists() and console.exists() and not os.path.samefile(console, unit_log):
        text += unit_log.read_text(errors="replace")
    return text
