"""`spothop events --server`: the server answers a page of a job's events at a time; the CLI
reads page after page, so a job with more events than a page prints every one, once."""

from __future__ import annotations

from typing import Any

import pytest

from spothop.cli import events as cli_events


class _Pages:
    """A server's answers: ``count`` events, ``limit`` at a time, each page's ``next`` after it."""

    def __init__(self, count: int) -> None:
        self.stored = [
            {"time_unix_s": float(n), "source": "agent", "kind": "probe", "n": n}
            for n in range(count)
        ]
        self.calls = 0

    def events(self, job_id: str, after: str | None = None, limit: int | None = None) -> Any:
        self.calls += 1
        start = int(after or 0)
        page = self.stored[start : start + (limit or 1000)]
        return page, str(start + len(page))


@pytest.mark.parametrize("count", [0, 2, 3, 7])
def test_every_page_is_read_and_each_event_printed_once(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_events, "PAGE", 3)
    server = _Pages(count)
    stream = cli_events._RemoteStream(server, "j-1")  # type: ignore[arg-type]
    assert [e["n"] for e in stream.read()] == list(range(count))
    assert server.calls == count // 3 + 1  # the last page is short (or empty): no call after it
    server.stored.append({"time_unix_s": 99.0, "source": "agent", "kind": "probe", "n": 99})
    assert [e["n"] for e in stream.read()] == [99]  # --follow: only what came since
