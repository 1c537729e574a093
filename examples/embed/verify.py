"""Prove a finished embedding job exact: every input id has exactly one embedding, equal to an uninterrupted run's.

``python verify.py [JOB.yaml] [--output URL] [--reference-shards N|all] [--json]``

Checks, in order (each one's count is reported; any failure exits 1):

1. **coverage**: every ``id`` of the job's inputs (``batch.inputs`` of the job
   file, globs relative to it) appears in exactly one published output row:
   none missing, none twice, none that is not an input;
2. **shape**: every output file is Parquet with the columns ``id`` and
   ``embedding``, each embedding 384 finite float32; each file's ids are a
   contiguous run of the input, at most ``records_per_shard`` long (a shard);
3. **no leftovers**: no temporary object of a losing or unfinished attempt is
   left in the output store;
4. **equal to a run without preemptions**: for every shard (or an evenly
   spread sample of ``--reference-shards``), the model is run again in this
   process on the shard's passages with the job's batch size
   (``envs.BATCH_SIZE``) and thread count (``envs.EMBED_THREADS``), exactly as
   one uninterrupted worker would (:func:`embed.embed_records`), and the
   published embeddings must be bit-identical (``--atol`` loosens it, for
   outputs made on other hardware).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embed import (
    DEFAULT_BATCH_SIZE,
    EMBEDDING_DIM,
    embed_records,
    load_model,
    read_parquet,
)

HERE = Path(__file__).resolve().parent


@dataclass
class Report:
    inputs: int = 0
    outputs: int = 0
    output_files: int = 0
    missing: int = 0
    duplicated: int = 0
    unknown: int = 0
    malformed_files: list[str] = field(default_factory=list)
    temporaries_left: int = 0
    reference_shards: int = 0
    reference_mismatches: list[str] = field(default_factory=list)
    max_abs_diff: float = 0.0
    output_url: str = ""

    @property
    def ok(self) -> bool:
        return not (
            self.missing
            or self.duplicated
            or self.unknown
            or self.malformed_files
            or self.temporaries_left
            or self.reference_mismatches
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class JobFiles:
    inputs: list[str]
    output: str
    records_per_shard: int
    batch_size: int
    threads: str | None


def read_job(path: Path) -> JobFiles:
    """What verify needs from a job file: inputs, output, shard size, batch size, threads."""
    import yaml

    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    base = path.resolve().parent
    batch = spec["batch"]
    inputs: list[str] = []
    for pattern in batch["inputs"]:
        full = pattern if Path(pattern).is_absolute() else str(base / pattern)
        inputs.extend(sorted(glob.glob(full)))
    output = str(batch["output"])
    if "://" not in output and not Path(output).is_absolute():
        output = str((base / output).resolve())
    envs = spec.get("envs") or {}
    return JobFiles(
        inputs=inputs,
        output=output,
        records_per_shard=int(batch.get("records_per_shard", 1000)),
        batch_size=int(envs.get("BATCH_SIZE", DEFAULT_BATCH_SIZE)),
        threads=str(envs["EMBED_THREADS"]) if "EMBED_THREADS" in envs else None,
    )


def input_records(paths: list[str]) -> Iterator[dict[str, Any]]:
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)


def _spread(items: list[str], count: int | None) -> list[str]:
    """``count`` items evenly spread over ``items`` (all when None or more than there are)."""
    if count is None or count >= len(items):
        return items
    if count <= 0:
        return []
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def verify(
    job: JobFiles,
    *,
    output_url: str | None = None,
    reference_shards: int | None = None,
    atol: float = 0.0,
    model: Any = None,
) -> Report:
    """Run every check of the module docstring; the report says what failed."""
    from spothop.queue import OutputStore

    store = OutputStore(output_url or job.output)
    report = Report(output_url=store.url)
    texts: dict[str, str] = {}
    position: dict[str, int] = {}
    for index, record in enumerate(input_records(job.inputs)):
        texts[str(record["id"])] = str(record["text"])
        position[str(record["id"])] = index
    report.inputs = len(texts)
    seen: dict[str, int] = {}
    shards: dict[str, tuple[list[str], np.ndarray]] = {}
    for name in store.published():
        report.output_files += 1
        try:
            ids, vectors = read_parquet(store.read(name))
        except Exception as exc:  # any unreadable file is a failed check, named
            report.malformed_files.append(f"{name}: not an embedding Parquet file: {exc}")
            continue
        if vectors.shape != (len(ids), EMBEDDING_DIM) or not np.isfinite(vectors).all():
            report.malformed_files.append(
                f"{name}: embeddings are not {EMBEDDING_DIM} finite floats"
            )
        places = [position.get(i, -1) for i in ids]
        contiguous = places == list(range(places[0], places[0] + len(places))) if places else False
        if not contiguous or len(ids) > job.records_per_shard:
            report.malformed_files.append(f"{name}: its ids are not one shard of the input")
        for i in ids:
            seen[i] = seen.get(i, 0) + 1
        report.outputs += len(ids)
        shards[name] = (ids, vectors)
    report.missing = sum(1 for i in texts if i not in seen)
    report.duplicated = sum(1 for i, n in seen.items() if n > 1 and i in texts)
    report.unknown = sum(1 for i in seen if i not in texts)
    report.temporaries_left = len(store.temporaries())
    picked = _spread(sorted(shards), reference_shards)
    if picked:
        if job.threads:
            os.environ.setdefault("EMBED_THREADS", job.threads)
        model = model if model is not None else load_model(device="cpu")
    for name in picked:
        ids, published = shards[name]
        if any(i not in texts for i in ids):
            continue  # already counted as unknown
        expected = embed_records(model, [texts[i] for i in ids], job.batch_size)
        assert expected is not None  # no stop was asked for
        diff = float(np.max(np.abs(expected - published))) if len(ids) else 0.0
        report.max_abs_diff = max(report.max_abs_diff, diff)
        report.reference_shards += 1
        if diff > atol or (atol == 0.0 and expected.tobytes() != published.tobytes()):
            report.reference_mismatches.append(f"{name}: max |diff| {diff:.3g}")
    return report


def _count(value: str) -> int | None:
    return None if value == "all" else int(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", nargs="?", type=Path, default=HERE / "job.yaml")
    parser.add_argument("--output", help="the outputs' URL (default: the job file's batch.output)")
    parser.add_argument(
        "--reference-shards",
        type=_count,
        default=None,
        metavar="N|all",
        help="shards recomputed without preemptions and compared (default all; 0 skips)",
    )
    parser.add_argument(
        "--atol", type=float, default=0.0, help="allowed |difference| (default 0: bit-identical)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if not args.job.is_file():
        parser.error(f"{args.job}: no such job file")
    report = verify(
        read_job(args.job),
        output_url=args.output,
        reference_shards=args.reference_shards,
        atol=args.atol,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)
    return 0 if report.ok else 1


def _print(report: Report) -> None:
    verdict = "OK" if report.ok else "FAILED"
    print(f"verify {verdict}: {report.output_url}")
    print(
        f"  {report.inputs} input ids, {report.outputs} embeddings in {report.output_files} files: "
        f"{report.missing} missing, {report.duplicated} duplicated, {report.unknown} unknown"
    )
    print(f"  temporaries left: {report.temporaries_left}")
    for problem in report.malformed_files:
        print(f"  malformed: {problem}")
    identical = (
        "bit-identical" if report.max_abs_diff == 0.0 else f"max |diff| {report.max_abs_diff:.3g}"
    )
    print(
        f"  {report.reference_shards} shards recomputed without preemptions: "
        f"{len(report.reference_mismatches)} differ ({identical})"
    )
    for problem in report.reference_mismatches:
        print(f"  differs: {problem}")


if __name__ == "__main__":
    sys.exit(main())
