"""What shipping a job's workdir adds to a launch: pack + store + fetch + unpack against ``tar`` + copy.

A 50 MiB workdir of 2,000 files (half text-like, half random bytes, as code
and small data are) is shipped the way spothop does it
(:func:`spothop.controlplane.archives.store_workdir` at launch, then the
agent's :func:`spothop.agent.code.fetch_code` over HTTP from a local
server), and the same tree is shipped with ``tar cf`` + a copy + ``tar xf``
in the same run. Target (issue N): spothop's way adds at most 2 s to a launch.
The machine is shared and its disk noisy: both ways run ``--rounds`` times
(default 3), in turns, each into fresh folders, and the medians are printed.

    python bench/workdir.py [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from spothop.agent.code import fetch_code
from spothop.controlplane.archives import store_workdir

FILES = 2_000
TOTAL_BYTES = 50 * 1024 * 1024
TARGET_S = 2.0
WORDS = [b"def ", b"return ", b"import ", b"self.", b"value", b"(x, y)", b"\n", b"    ", b"# "]


def make_tree(root: Path) -> None:
    rng = random.Random(7)
    size = TOTAL_BYTES // FILES
    for n in range(FILES):
        path = root / f"pkg{n % 20:02d}" / f"mod{n:04d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        if n % 2:
            path.write_bytes(rng.randbytes(size))
        else:
            path.write_bytes(b"".join(rng.choice(WORDS) for _ in range(size // 5))[:size])


@contextlib.contextmanager
def files_server(folder: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def spothop_way(tree: Path, scratch: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    start = time.perf_counter()
    packed = store_workdir(tree, scratch / "home")
    times["pack + store"] = time.perf_counter() - start
    with files_server(packed.path.parent) as base:
        start = time.perf_counter()
        fetch_code(f"{base}/{packed.path.name}", packed.sha256, scratch / "wd", token=None)
        times["fetch + check + unpack"] = time.perf_counter() - start
    return times


def tar_way(tree: Path, scratch: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    start = time.perf_counter()
    subprocess.run(["tar", "cf", str(scratch / "t.tar"), "-C", str(tree), "."], check=True)
    shutil.copyfile(scratch / "t.tar", scratch / "copy.tar")
    times["tar cf + copy"] = time.perf_counter() - start
    (scratch / "out").mkdir()
    start = time.perf_counter()
    subprocess.run(["tar", "xf", str(scratch / "copy.tar"), "-C", str(scratch / "out")], check=True)
    times["tar xf"] = time.perf_counter() - start
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each way (medians shown)")
    rounds = max(1, parser.parse_args().rounds)
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        make_tree(root / "tree")
        os.sync()
        for n in range(rounds):
            ours = spothop_way(root / "tree", root / f"ours{n}")
            (root / f"theirs{n}").mkdir()
            theirs = tar_way(root / "tree", root / f"theirs{n}")
            for name, seconds in [*ours.items(), *theirs.items()]:
                runs.setdefault(name, []).append(seconds)
            runs.setdefault("spothop total", []).append(sum(ours.values()))
            runs.setdefault("tar + copy total", []).append(sum(theirs.values()))
            shutil.rmtree(root / f"ours{n}")
            shutil.rmtree(root / f"theirs{n}")
    print(f"workdir: {FILES} files, {TOTAL_BYTES / 2**20:.0f} MiB; {rounds} rounds, in turns")
    print(f"{'step':<28}{'median s':>10}{'min s':>8}{'max s':>8}")
    for name, seconds in runs.items():
        print(
            f"{name:<28}{statistics.median(seconds):>10.3f}{min(seconds):>8.3f}{max(seconds):>8.3f}"
        )
    total = statistics.median(runs["spothop total"])
    baseline = statistics.median(runs["tar + copy total"])
    print(
        f"ratio spothop / tar: {total / baseline:.1f}x; added to a launch: {total:.2f} s "
        f"(target at most {TARGET_S:g} s: {'met' if total <= TARGET_S else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
