"""The fault tests' fixtures: the CLI run in-process (tests/cli's)."""

from tests.cli.conftest import cli

__all__ = ["cli"]
