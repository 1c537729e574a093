"""A resumable task for the deadline test: ``WORK_WALL_S`` seconds of wall-clock work in steps,
the total so far kept in ``PROGRESS_FILE`` (a relaunch resumes it); exits 0 when done, 75 on
SIGTERM (preempted, resumable)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

STEP_S = 0.1


def main() -> int:
    progress = Path(os.environ["PROGRESS_FILE"])
    total_s = float(os.environ["WORK_WALL_S"])
    done = float(progress.read_text()) if progress.exists() else 0.0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))
    while done < total_s:
        time.sleep(STEP_S)
        done += STEP_S
        tmp = progress.with_suffix(f".{os.getpid()}.tmp")  # two instances may overlap (switch)
        tmp.write_text(f"{done:.3f}")
        tmp.replace(progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
