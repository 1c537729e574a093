"""Bad answers never crash a watcher, and the worst case is "notice now", never "no notice"."""

from __future__ import annotations

import time

import pytest

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.model import Notice, NoticeKind
from spothop.agent.notices import make_watcher
from spothop.agent.notices.aws import AWS_SPOT_NOTICE_S, AwsWatcher
from spothop.agent.watch import ENDPOINT_LOST_POLLS, ERROR_BACKOFF_MAX_S, WatcherThread, WatchLoop
from tests.agent.stubs import MiniImdsV2, StubServer, canned

TOKEN = {"/latest/api/token": (200, "tok")}
ACTION = "/latest/meta-data/spot/instance-action"
TERMINATION = "/latest/meta-data/spot/termination-time"


def _loop(watcher: object) -> tuple[WatchLoop, list[Notice]]:
    got: list[Notice] = []
    return WatchLoop(watcher, got.append, poll_interval_s=0.5), got  # type: ignore[arg-type]


def test_the_aws_watcher_works_against_an_independent_imdsv2() -> None:
    imds = MiniImdsV2()
    with StubServer(imds) as server:
        watcher = AwsWatcher(server.url)
        assert watcher.self_check().instance_id == "i-0mini"
        assert watcher.poll() == []
        imds.interrupt(time.time() + 100)
        [notice] = watcher.poll()
        assert notice.kind is NoticeKind.FINAL and notice.cause == "instance-action:terminate"
        assert notice.lead_time_s == pytest.approx(100, abs=1.5)
        imds.tokens.clear()  # every token revoked: the watcher gets a new one and carries on
        assert len(watcher.poll()) == 1


def test_garbage_on_a_notice_path_is_a_notice_now() -> None:
    with StubServer(
        canned({**TOKEN, ACTION: (200, "{not json"), TERMINATION: (200, "yesterday-ish")})
    ) as server:
        [notice] = AwsWatcher(server.url).poll()
    assert notice.kind is NoticeKind.FINAL and notice.lead_time_s == 0.0


def test_unparseable_action_time_falls_back_to_termination_time() -> None:
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    with StubServer(
        canned({**TOKEN, ACTION: (200, '{"action":"stop"}'), TERMINATION: (200, soon)})
    ) as server:
        [notice] = AwsWatcher(server.url).poll()
    assert notice.cause == "instance-action:stop" and notice.lead_time_s == pytest.approx(
        60, abs=1.5
    )


def test_a_notice_time_in_the_past_is_now_and_clock_skew_is_capped() -> None:
    past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    for stamp, lead in ((past, 0.0), (future, AWS_SPOT_NOTICE_S)):
        body = f'{{"action":"terminate","time":"{stamp}"}}'
        with StubServer(canned({**TOKEN, ACTION: (200, body)})) as server:
            [notice] = AwsWatcher(server.url).poll()
        assert notice.lead_time_s == lead


@pytest.mark.parametrize("protocol", ["gcp", "azure"])
def test_garbage_values_are_bad_answers_not_silence(protocol: str) -> None:
    answers = {
        "/computeMetadata/v1/instance/preempted": (200, "MAYBE"),
        "/metadata/scheduledevents": (200, "<html>proxy error</html>"),
    }
    with StubServer(canned(answers)) as server, pytest.raises(NoticeEndpointError):
        make_watcher(protocol, server.url).poll()


def test_5xx_and_timeouts_back_off_and_never_escape() -> None:
    with StubServer(canned({**TOKEN, ACTION: (500, "oops")})) as server:
        loop, got = _loop(AwsWatcher(server.url))
        delays = [loop.step() for _ in range(4)]
    assert (
        delays == [0.5, 1.0, 2.0, 4.0] and got == []
    )  # never worked: not a notice (the self-check says blind)
    assert loop.step() <= ERROR_BACKOFF_MAX_S
    with StubServer(canned({**TOKEN, ACTION: (200, "sleep:1")})) as server:
        loop, got = _loop(AwsWatcher(server.url, timeout_s=0.2))
        assert loop.step() == 0.5 and loop.failures == 1 and "timed out" in (loop.last_error or "")


def test_an_endpoint_that_vanishes_after_working_is_a_final_notice_now() -> None:
    with StubServer(canned(TOKEN)) as server:
        loop, got = _loop(AwsWatcher(server.url, timeout_s=0.5))
        loop.step()
        url = server.url
    assert loop.worked and got == []
    for _ in range(ENDPOINT_LOST_POLLS):
        loop.step()
    [notice] = got
    assert notice.cause == "endpoint-lost" and notice.lead_time_s == 0.0 and url


def test_each_notice_is_emitted_once() -> None:
    body = '{"action":"terminate","time":"2000-01-01T00:00:00Z"}'
    with StubServer(canned({**TOKEN, ACTION: (200, body)})) as server:
        loop, got = _loop(AwsWatcher(server.url))
        loop.step()
        loop.step()
    assert len(got) == 1


class _ThreadKiller(BaseException):
    """Not an Exception: the watch loop lets it through, so the thread dies."""


class _Dies:
    """A watcher whose first poll kills its thread (an exception the loop does not catch)."""

    protocol = "test"
    long_poll = False
    documented_lead_s = None

    def __init__(self, notice: Notice) -> None:
        self.polls = 0
        self.notice = notice
        self.clock = time.time

    def poll(self) -> list[Notice]:
        self.polls += 1
        if self.polls == 1:
            raise _ThreadKiller
        return [self.notice]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_watchdog_restarts_a_dead_watcher_thread() -> None:
    notice = Notice(NoticeKind.FINAL, "test", "x", 0.0, 0.0, 0.0)
    got: list[Notice] = []
    thread = WatcherThread(WatchLoop(_Dies(notice), got.append, poll_interval_s=0.01))  # type: ignore[arg-type]
    thread.start()
    thread._thread.join(5)  # type: ignore[union-attr]
    assert got == [] and thread.ensure_alive()
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    thread.close()
    assert got == [notice] and thread.restarts == 1
