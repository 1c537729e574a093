"""The in-process CLI fixture of tests/cli, for the simulate command's tests."""

from tests.cli.conftest import cli

__all__ = ["cli"]
