"""What isolation adds to a local instance's start: isolated against unisolated, N starts each.

``.venv/bin/python -P bench/isolation.py [--instances 10]``

One world (launch delay 0, one bucket), run once with ``isolation: required``
and once with ``isolation: off``, each in a fresh local cloud folder. A start
is timed from ``launch()`` until the instance's unit (started by the rendered
boot script through the systemctl shim) has written its marker into the
bucket; each instance is then terminated. Prints per-mode median, mean and
worst start, and the isolation overhead per start (difference of medians) with
the ratio; the issue's target is an overhead of at most 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local import isolation
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import load_world

TARGET_OVERHEAD_S = 0.3
START_TIMEOUT_S = 30.0
WORLD = """\
isolation: {mode}
buckets: [{bucket}]
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    launch_delay_s: 0
    terminate_grace_s: 1
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {{mean_time_between_preemptions_s: 864000, mean_outage_s: 600}}
"""


def starts(mode: str, count: int, folder: Path) -> list[float]:
    """Wall seconds from launch to the unit running, for ``count`` instances started one by one."""
    bucket = folder / "bucket"
    bucket.mkdir(parents=True)
    world_path = folder / "world.yaml"
    world_path.write_text(WORLD.format(mode=f'"{mode}"', bucket=bucket))
    store = CloudStore(folder / "cloud")
    provider = LocalProvider(
        "aws-sim", world=load_world(world_path), world_path=world_path, store=store
    )
    out = []
    for i in range(count):
        marker = bucket / f"started-{i}"
        t0 = time.monotonic()
        instance = provider.launch(
            LaunchRequest(
                instance_type="g5.xlarge",
                region="us-east-1",
                zone="us-east-1a",
                bootstrap_command=["bash", "-c", f"touch {marker}; exec sleep 300"],
            )
        )
        while not marker.exists():
            if time.monotonic() - t0 > START_TIMEOUT_S:
                sys.exit(
                    f"{mode}: instance {instance.instance_id} did not start in {START_TIMEOUT_S} s:\n"
                    f"{provider.console_output(instance.instance_id)}"
                )
            time.sleep(0.005)
        out.append(time.monotonic() - t0)
        provider.terminate(instance.instance_id)
        provider.wait(instance.instance_id, [InstanceState.TERMINATED], START_TIMEOUT_S)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10, help="starts per mode (default 10)")
    args = parser.parse_args()
    reason = isolation.unavailable()
    if reason is not None:
        print(f"isolation is unavailable here: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="spothop-bench-isolation-") as tmp:
        os.environ["SPOTHOP_HOME"] = str(Path(tmp) / "home")
        results = {
            mode: starts(mode, args.instances, Path(tmp) / mode) for mode in ("off", "required")
        }
    print(f"{'mode':<12}{'starts':>8}{'median s':>11}{'mean s':>9}{'worst s':>9}")
    for mode, times in results.items():
        name = "isolated" if mode == "required" else "unisolated"
        print(
            f"{name:<12}{len(times):>8}{statistics.median(times):>11.3f}"
            f"{statistics.mean(times):>9.3f}{max(times):>9.3f}"
        )
    plain, isolated = (statistics.median(results[m]) for m in ("off", "required"))
    overhead = isolated - plain
    verdict = "within" if overhead <= TARGET_OVERHEAD_S else "OVER"
    print(
        f"isolation overhead per start: {overhead:+.3f} s (ratio {isolated / plain:.2f}x); "
        f"{verdict} the {TARGET_OVERHEAD_S} s target"
    )
    return 0 if overhead <= TARGET_OVERHEAD_S else 1


if __name__ == "__main__":
    sys.exit(main())
