"""The control plane's wheel: the same tree gives the same bytes, and the boot script's install step
puts it into a fresh venv (the image's packages through a .pth) where spothop imports at its version;
a wheel whose hash does not match is refused in one line and the agent is not started."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import spothop
from spothop.controlplane import dist
from spothop.errors import ConfigError
from spothop.providers import bootstrap
from spothop.providers.aliyun.userdata import SHAPE as ALIYUN
from spothop.providers.aws.userdata import SHAPE as AWS
from spothop.providers.base import Distribution
from spothop.providers.gcp.userdata import SHAPE as GCP


@contextlib.contextmanager
def files_server(folder: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_same_tree_gives_the_same_wheel_and_a_change_gives_another(tmp_path: Path) -> None:
    first = dist.build_wheel(tmp_path / "a")
    again = dist.build_wheel(tmp_path / "b")
    assert (first.sha256, first.filename) == (again.sha256, again.filename)
    assert first.path.read_bytes() == again.path.read_bytes()
    assert dist.build_wheel(tmp_path / "a") == first  # cached: not rebuilt
    copy = tmp_path / "tree" / "spothop"
    shutil.copytree(dist.package_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "added.py").write_text("X = 1\n")
    changed = dist.build_wheel(tmp_path / "a", copy)
    assert changed.sha256 != first.sha256 and changed.path.parent != first.path.parent


def test_the_wheel_holds_the_package_and_its_metadata(tmp_path: Path) -> None:
    wheel = dist.build_wheel(tmp_path)
    with zipfile.ZipFile(wheel.path) as archive:
        names = archive.namelist()
        info = f"spothop-{dist.version()}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        record = archive.read(f"{info}/RECORD").decode()
    assert names == sorted(n for n in names if not n.startswith(info)) + [
        n for n in names if n.startswith(info)
    ]
    assert "spothop/__init__.py" in names and not any("__pycache__" in n for n in names)
    assert f"Version: {dist.version()}" in metadata and "Requires-Dist: pydantic" in metadata
    assert "spothop/__init__.py,sha256=" in record and f"{info}/RECORD,," in record


def _clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH: the instance sees only what it installed."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _step_script(tmp_path: Path, url: str, sha256: str, filename: str) -> Path:
    """The install step, with its venv under ``tmp_path`` and the test's python as the image's."""
    step = bootstrap.install_step(Distribution(url, sha256, filename), with_dependencies=False)
    venv = tmp_path / "opt-spothop"
    image_bin = tmp_path / "image-bin"
    image_bin.mkdir(exist_ok=True)
    (image_bin / "python3").unlink(missing_ok=True)
    (image_bin / "python3").symlink_to(sys.executable)
    script = tmp_path / "install.sh"
    script.write_text(
        f"set -euo pipefail\nexport PATH={image_bin}:$PATH\n"
        + step.replace("/opt/spothop", str(venv))
    )
    return script


def test_the_install_step_installs_the_wheel_into_a_fresh_venv(tmp_path: Path) -> None:
    wheel = dist.build_wheel(tmp_path / "home")
    with files_server(wheel.path.parent) as base:
        url = f"{base}/{wheel.filename}"
        script = _step_script(tmp_path, url, wheel.sha256, wheel.filename)
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=120, env=_clean_env()
        )
    assert done.returncode == 0, done.stderr
    assert f"spothop: installed spothop {dist.version()} from {url} (sha256 {wheel.sha256})" in (
        done.stdout
    )
    python = tmp_path / "opt-spothop" / "bin" / "python"
    probe = (
        "import importlib.metadata as m, spothop, pydantic, spothop.agent.cli;"
        "print(m.version('spothop'), spothop.__file__)"
    )
    shown = subprocess.run(
        [str(python), "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=_clean_env(),
    )
    assert shown.returncode == 0, shown.stderr
    version, where = shown.stdout.split()
    assert version == dist.version() == spothop.__version__
    assert Path(where).is_relative_to(tmp_path / "opt-spothop")


def test_a_wheel_whose_hash_does_not_match_is_refused_in_one_line(tmp_path: Path) -> None:
    wheel = dist.build_wheel(tmp_path / "home")
    with files_server(wheel.path.parent) as base:
        url = f"{base}/{wheel.filename}"
        script = _step_script(tmp_path, url, "0" * 64, wheel.filename)
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=120, env=_clean_env()
        )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"spothop: the wheel from {url} has sha256 {wheel.sha256}, expected {'0' * 64}; "
        "not starting the agent"
    )
    assert not (tmp_path / "opt-spothop").exists()


@pytest.mark.parametrize("shape", [AWS, GCP, ALIYUN], ids=["aws", "gcp", "aliyun"])
def test_a_launch_with_a_distribution_installs_from_it_within_the_clouds_limit(
    shape: bootstrap.BootScript,
) -> None:
    wheel = Distribution(
        f"https://cp.example.com/v1/dist/{'a' * 64}/spothop-0.1.0-py3-none-any.whl",
        "a" * 64,
        "spothop-0.1.0-py3-none-any.whl",
    )
    command = ["python", "-m", "spothop.agent", "run", "--", "python", "train.py"]
    script = shape.render(command, {"SPOTHOP_JOB_ID": "j-1"}, distribution=wheel)
    assert "sha256sum -c" in script and wheel.url in script and "spothop-0.1.0" in script
    assert "pip install --quiet 'spothop==" not in script  # not the package index
    assert bootstrap.script_size(script) < shape.max_bytes // 4
    own = shape.render(command, {}, install="echo mine", distribution=wheel)
    assert "echo mine" in own and wheel.url not in own  # install wins


def test_a_distribution_with_a_bad_hash_or_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="64 lower-case hex"):
        bootstrap.install_step(Distribution("u", "xyz", "a.whl"), with_dependencies=True)
    with pytest.raises(ConfigError, match="wheel's file name"):
        bootstrap.install_step(Distribution("u", "a" * 64, "../a.whl"), with_dependencies=True)


def test_distribution_for_names_the_route_under_the_base_url(tmp_path: Path) -> None:
    got = dist.distribution_for("http://127.0.0.1:8123/", tmp_path)
    assert got.url == f"http://127.0.0.1:8123/v1/dist/{got.sha256}/{got.filename}"
    assert len(got.sha256) == 64
