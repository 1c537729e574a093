"""``python -m spothop``: the same command line as the ``spothop`` script."""

from __future__ import annotations

import sys

from spothop.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
