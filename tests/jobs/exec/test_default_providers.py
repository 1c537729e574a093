"""The controller's providers: the local world always, real clouds only when named, none fatal."""

from __future__ import annotations

import pytest

from spothop.providers.registry import PROVIDERS_ENV, default_providers, members


def test_the_local_world_is_the_default_and_no_real_cloud_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PROVIDERS_ENV, raising=False)
    assert list(default_providers()) == members("local")


def test_a_provider_that_cannot_be_made_is_left_out_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(PROVIDERS_ENV, "no-such-cloud, fake")
    providers = default_providers()
    assert "fake" in providers and "no-such-cloud" not in providers
    assert set(members("local")) <= set(providers)
    assert "no-such-cloud" in caplog.text and "unknown provider" in caplog.text
