"""The boot script every cloud adapter gives its instances: install spothop, start the agent.

One bash script, run as root by the image's boot machinery, that:

1. writes :data:`ENV_FILE` (mode 0600): the metadata protocol and URL the
   agent reads (:data:`~spothop.providers.local.metadata.METADATA_PROTOCOL_ENV`,
   :data:`~spothop.providers.local.metadata.METADATA_URL_ENV`) and the launch's
   ``env`` (the per-instance agent token, the control-plane URL, the job's
   variables), each value shell-quoted inside a here-document whose end no
   value can contain;
2. installs spothop: ``install`` when given; else, with a ``distribution``
   (the control plane's wheel), :func:`install_step` — download it, check its
   sha256 (a mismatch: one line on stderr, which the boot log shows, and the
   agent is not started), install it into a fresh venv in ``/opt/spothop``
   and say in the boot log which spothop came from where; else
   :data:`DEFAULT_INSTALL`, a venv pinned to this spothop's version from the
   package index;
3. starts the bootstrap command as the systemd unit :data:`UNIT`, after the
   adapter's ``instance_id_lines`` (shell that exports ``SPOTHOP_INSTANCE_ID``
   from the cloud's metadata service). With ``image``, the worker part of the
   command runs in that container (:func:`~spothop.providers.container.in_container`)
   and the script first checks the host has docker.

What never goes in: a cloud credential. :class:`CredentialRule` says what one
looks like for a cloud (its variable names, a value pattern, the messages);
:func:`refuse_credentials` refuses a launch that carries one before any call,
naming the variable, never showing the value. Each adapter keeps only what
differs: its credential rule, metadata URL and instance-id lines, size limit.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spothop import __version__
from spothop.errors import ConfigError
from spothop.providers.base import Distribution
from spothop.providers.container import docker_check, in_container
from spothop.providers.local.metadata import METADATA_PROTOCOL_ENV, METADATA_URL_ENV

ENV_FILE = "/etc/spothop/agent.env"
RUN_FILE = "/etc/spothop/run.sh"
STARTED_FILE = "/etc/spothop/started"
UNIT = "spothop-agent"
DEFAULT_INSTALL = (
    "if ! /opt/spothop/bin/python -c 'import spothop' 2>/dev/null; then\n"
    "  python3 -m venv /opt/spothop\n"
    f"  /opt/spothop/bin/pip install --quiet 'spothop=={__version__}'\n"
    "fi"
)
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+-]+\.whl")
# Downloads and installs retry this often: an instance may boot before its network is fully up.
DOWNLOAD_RETRIES = 5
# The image's site-packages, read by the venv through a .pth (the without-dependencies install).
_IMAGE_SITE = "python3 -c 'import site;print(*site.getsitepackages(),sep=chr(10))'"
_VENV_SITE = "/opt/spothop/bin/python -c 'import sysconfig;print(sysconfig.get_path(\"purelib\"))'"
_VERSION = (
    "/opt/spothop/bin/python -c 'import importlib.metadata as m;print(m.version(\"spothop\"))'"
)


def install_step(dist: Distribution, *, with_dependencies: bool) -> str:
    """Shell that installs spothop from ``dist`` into ``/opt/spothop`` (ConfigError for a bad ``dist``).

    1. download the wheel with curl (retried; python3's urllib where there is no curl);
    2. check its sha256: a mismatch prints ``spothop: the wheel from URL has
       sha256 X, expected Y; not starting the agent`` on stderr and exits 1;
    3. ``with_dependencies`` (a real cloud): a fresh venv, the wheel installed
       by its pip with its dependencies from the package index; without (an
       image that has them, like the local cloud's): a venv without pip whose
       site-packages reads the image python's through a ``.pth``, the
       pure-python wheel unpacked into it (what pip does for such a wheel,
       ``.dist-info`` included, in a tenth of the time);
    4. print ``spothop: installed spothop VERSION from URL (sha256 HEX)``.
    """
    if not _SHA256.fullmatch(dist.sha256):
        raise ConfigError(
            f"the distribution's sha256 {dist.sha256!r:.80} is not 64 lower-case hex digits"
        )
    if not _WHEEL_NAME.fullmatch(dist.filename):
        raise ConfigError(
            f"the distribution's filename {dist.filename!r:.80} is not a wheel's file name"
        )
    url, wheel = shlex.quote(dist.url), f'"$w"/{dist.filename}'
    fetch = (
        f'curl -fsSL --retry {DOWNLOAD_RETRIES} --retry-connrefused -o {wheel} "$u" 2>/dev/null'
        " || python3 -c 'import sys,urllib.request as r;r.urlretrieve(*sys.argv[1:])'"
        f' "$u" {wheel} || {{ echo "spothop: could not download the wheel from $u;'
        ' not starting the agent" >&2; exit 1; }'
    )
    check = (
        f'echo "{dist.sha256}  $w/{dist.filename}" | sha256sum -c --status'
        ' || { echo "spothop: the wheel from $u has sha256'
        f' $(sha256sum {wheel} | cut -c1-64), expected {dist.sha256}; not starting the agent"'
        " >&2; exit 1; }"
    )
    if with_dependencies:
        install = (
            "python3 -m venv /opt/spothop\n"
            f"/opt/spothop/bin/pip install --quiet --retries {DOWNLOAD_RETRIES} {wheel}"
        )
    else:
        install = (
            "python3 -m venv --without-pip /opt/spothop\n"
            f"p=$({_VENV_SITE})\n"
            f'{_IMAGE_SITE} > "$p"/spothop-image.pth\n'
            f'python3 -m zipfile -e {wheel} "$p"'
        )
    return (
        f"u={url}\nw=$(mktemp -d)\n{fetch}\n{check}\n{install}\n"
        f'echo "spothop: installed spothop $({_VERSION}) from $u (sha256 {dist.sha256})"\n'
        'rm -rf "$w"'
    )


@dataclass(frozen=True)
class CredentialRule:
    """What a cloud credential looks like on a launch, and what to say when one is found.

    A key is a credential if its upper-cased name is in ``keys`` or contains
    one of ``key_parts``; a value (or a command part) is one if ``value``
    matches it. ``key_error`` and ``value_error`` are formatted with ``key=``;
    ``command_error`` is said as it is. Messages name, never show, the secret.
    """

    keys: frozenset[str]
    value: re.Pattern[str]
    key_error: str
    value_error: str
    command_error: str
    key_parts: tuple[str, ...] = ()


def refuse_credentials(
    rule: CredentialRule, env: Mapping[str, str], command: Sequence[str]
) -> None:
    """Raise ConfigError if ``env`` or ``command`` carries a credential by ``rule``."""
    for key, value in env.items():
        upper = key.upper()
        if upper in rule.keys or any(part in upper for part in rule.key_parts):
            raise ConfigError(rule.key_error.format(key=key))
        if rule.value.search(value):
            raise ConfigError(rule.value_error.format(key=key))
    if any(rule.value.search(part) for part in command):
        raise ConfigError(rule.command_error)


def check_launch(
    rule: CredentialRule, command: Sequence[str], env: Mapping[str, str], *, launch: str
) -> None:
    """ConfigError unless the launch is bootable: no credential, env keys shell names, a command.

    ``launch`` names the cloud's kind of launch in the message ("an X launch").
    """
    refuse_credentials(rule, env, command)
    for key in env:
        if not _ENV_KEY.fullmatch(key):
            raise ConfigError(
                f"env key {key!r} is not a shell variable name (letters, digits and _, not first a digit)"
            )
    if not command:
        raise ConfigError(f"{launch} needs a bootstrap command (the agent's); none was given")


@dataclass(frozen=True)
class BootScript:
    """One cloud's shape of the boot script (the parts that differ between clouds).

    ``protocol`` and ``metadata_url`` go in the env file for the agent;
    ``instance_id_lines`` is shell exporting ``SPOTHOP_INSTANCE_ID``;
    ``writer`` names the provider in the script's first comment (``note``
    ends it); ``every_boot``: the cloud runs the script at every boot, so it
    exits at once when the agent was started before; ``stop_timeout_s``: how
    long systemd waits for the agent on stop. :meth:`render` also checks the
    launch by ``credentials`` (``launch`` names the cloud's launch in the
    message) and refuses a script over ``max_bytes`` with ``too_large``
    (formatted with ``size=`` and ``max_bytes=``).
    """

    protocol: str
    metadata_url: str
    instance_id_lines: str
    writer: str
    credentials: CredentialRule
    launch: str
    max_bytes: int
    too_large: str
    note: str = "no cloud credential in here"
    every_boot: bool = False
    stop_timeout_s: int = 150

    def render(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        install: str | None = None,
        image: str | None = None,
        distribution: Distribution | None = None,
        with_dependencies: bool = True,
    ) -> str:
        """The boot script for one launch (see the module docstring); ConfigError if it cannot be.

        ``install`` wins over ``distribution`` (installed with its dependencies
        unless ``with_dependencies`` is false: an image that holds them,
        :func:`install_step`), which wins over :data:`DEFAULT_INSTALL`.
        """
        check_launch(self.credentials, command, env, launch=self.launch)
        if install is None and distribution is not None:
            install = install_step(distribution, with_dependencies=with_dependencies)
        script = render_boot_script(self, command, env, install=install, image=image)
        size = script_size(script)
        if size > self.max_bytes:
            raise ConfigError(self.too_large.format(size=size, max_bytes=self.max_bytes))
        return script


def render_boot_script(
    shape: BootScript,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    install: str | None = None,
    image: str | None = None,
) -> str:
    """The boot script (see the module docstring); the caller has run :func:`check_launch`."""
    if image is not None:  # the worker runs in the image, the agent on the host
        command = in_container(command, image, [*env, METADATA_PROTOCOL_ENV, METADATA_URL_ENV])
    docker = docker_check(image) + "\n" if image is not None else ""
    env_lines = "\n".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    end = f"SPOTHOP_END_{secrets.token_hex(8)}"  # a here-document's end no value can contain
    guard = (
        f"if systemctl is-active --quiet {UNIT}.service || [ -f {STARTED_FILE} ]; then exit 0; fi\n"
        if shape.every_boot
        else ""
    )
    mark = f"touch {STARTED_FILE}\n" if shape.every_boot else ""
    return f"""#!/bin/bash
# spothop: install and start the agent (written by spothop's {shape.writer} provider; {shape.note}).
set -euo pipefail
{guard}umask 077
mkdir -p /etc/spothop
cat > {ENV_FILE} <<'{end}'
{METADATA_PROTOCOL_ENV}={shape.protocol}
{METADATA_URL_ENV}={shape.metadata_url}
{env_lines}
{end}
{docker}{install if install is not None else DEFAULT_INSTALL}
cat > {RUN_FILE} <<'{end}'
#!/bin/bash
set -euo pipefail
set -a; . {ENV_FILE}; set +a
export PATH=/opt/spothop/bin:$PATH
{shape.instance_id_lines}
export SPOTHOP_INSTANCE_ID
exec {shlex.join(command)}
{end}
chmod 700 {RUN_FILE}
cat > /etc/systemd/system/{UNIT}.service <<'{end}'
[Unit]
Description=spothop agent
Wants=network-online.target
After=network-online.target
[Service]
ExecStart=/bin/bash {RUN_FILE}
Restart=no
KillMode=mixed
TimeoutStopSec={shape.stop_timeout_s}
[Install]
WantedBy=multi-user.target
{end}
systemctl daemon-reload
{mark}systemctl start --no-block {UNIT}.service
"""


def script_size(script: str) -> int:
    """The script's size in bytes (UTF-8), what a cloud's user-data limit counts."""
    return len(script.encode("utf-8"))
