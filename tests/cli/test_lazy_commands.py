"""The root command imports a command's module only when that command runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import spothop.cli
from spothop.cli.main import COMMANDS, _command, _commands_of


def test_the_table_names_every_command_each_module_registers() -> None:
    for module in set(COMMANDS.values()):
        named = [name for name, owner in COMMANDS.items() if owner == module]
        assert sorted(_commands_of(module)) == sorted(named), module


def test_every_module_with_a_register_is_in_the_table() -> None:
    folder = Path(spothop.cli.__file__).parent
    registering = {
        path.stem for path in folder.glob("*.py") if "\ndef register(" in path.read_text()
    }
    assert registering == set(COMMANDS.values())


def test_the_root_lists_and_finds_every_command() -> None:
    """What ``spothop --help`` lists, in its order, and what a command line can name."""
    root = _command()
    with root.make_context("spothop", ["--help"], resilient_parsing=True) as ctx:
        assert root.list_commands(ctx) == list(COMMANDS)
        assert [root.get_command(ctx, name).name for name in COMMANDS] == list(COMMANDS)
        assert root.get_command(ctx, "no-such-command") is None


def test_a_command_imports_its_own_module_only() -> None:
    code = (
        "import json, sys\n"
        "from spothop.cli.main import main\n"
        "main(['controller', 'run', '--help'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('spothop.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "spothop.cli.jobs" in loaded
    assert not loaded & {"spothop.cli.advise", "spothop.cli.dashboard", "spothop.dashboard.app"}


def test_python_m_spothop_is_the_command_line() -> None:
    # ``python -m spothop`` once said "No module named spothop.__main__"
    done = subprocess.run(
        [sys.executable, "-m", "spothop", "ckpt", "verify", "no-such-checkpoint-folder"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3 and done.stderr.startswith("error: "), done.stderr
