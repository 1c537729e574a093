"""The CLI tests here reuse the shared in-process ``cli`` fixture."""

from tests.cli.conftest import cli  # noqa: F401
