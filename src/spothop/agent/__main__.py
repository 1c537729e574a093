"""``python -m spothop.agent``: see :mod:`spothop.agent.cli`."""

import sys

from spothop.agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
