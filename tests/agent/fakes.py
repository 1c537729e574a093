"""Test doubles the agent loads by ``module:factory`` spec, and the test worker's behaviours."""

from __future__ import annotations

import os
from pathlib import Path

RELEASES_ENV = (
    "SPOTHOP_TEST_RELEASES"  # where FileReleaser appends the worker ids it was asked to release
)


class FileReleaser:
    """A LeaseReleaser that records each call as a line in a file (readable across processes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def release_worker(self, worker_id: str) -> int:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(worker_id + "\n")
        return 1

    def calls(self) -> list[str]:
        return self.path.read_text().split() if self.path.exists() else []


def file_releaser() -> FileReleaser:
    return FileReleaser(Path(os.environ[RELEASES_ENV]))


class ListReleaser:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def release_worker(self, worker_id: str) -> int:
        self.calls.append(worker_id)
        return 2
