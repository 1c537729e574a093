"""The test worker: ``python worker.py OUT_DIR MODE``.

``save`` (default): on SIGTERM, write ``OUT_DIR/emergency.ckpt``, call
``sdk.saved()`` and exit 75. ``ignore``: ignore SIGTERM and run on.
``callback``: register ``sdk.on_stop`` and save from the callback.
It writes ``OUT_DIR/started`` with its worker id once it runs.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from spothop.worker import sdk

out = Path(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "save"


def save(*_args: object) -> None:
    (out / "emergency.ckpt").write_text(f"step=42 left={sdk.seconds_left():.1f}")
    sdk.saved(step=42)
    os._exit(75)


if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "callback":
    sdk.on_stop(save)
else:
    signal.signal(signal.SIGTERM, save)
(out / "started").write_text(sdk.worker_id() or "")
while True:
    sdk.heartbeat()
    time.sleep(0.2)
