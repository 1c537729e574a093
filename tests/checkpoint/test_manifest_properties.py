"""Any text as a checkpoint manifest: a checked Manifest, or CheckpointCorrupt naming the checkpoint."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spothop.checkpoint.errors import CheckpointCorrupt, FormatVersionError
from spothop.checkpoint.manifest import (
    ChunkRef,
    Codec,
    FileEntry,
    LeafEntry,
    Manifest,
    Tier,
    _digest,
    manifest_from_json,
)
from tests.hostile_text import FAST_PARSER_SETTINGS, hostile

CKPT = "step-000000000007-durable-abc123"
_PACK = f"{CKPT}/data-00000.pack"
SAMPLE = Manifest(
    checkpoint_id=CKPT,
    step=7,
    wall_time_unix_s=1_764_000_000.5,
    tier=Tier.DURABLE,
    parent=None,
    files=(FileEntry(_PACK, "ab" * 32, 96, (64, 32)),),
    leaves={
        "/w": LeafEntry(
            "numpy", "float64", (8,), (ChunkRef(_PACK, 0, 64, 64, "cd" * 32, Codec.RAW),)
        ),
        "/b": LeafEntry(
            "torch", "bfloat16", (4, 2), (ChunkRef(_PACK, 64, 32, 16, "ef" * 32, Codec.ZSTD),)
        ),
    },
    tree={"w": {"$leaf": "/w"}, "b": {"$leaf": "/b"}},
    rng={"python": [3, [1, 2], None]},
    data_position={"epoch": 1},
    user_metadata={"run": "r1"},
)
MANIFEST_TEXT = SAMPLE.to_json()
BODY_TEXT = json.dumps(json.loads(MANIFEST_TEXT)["manifest"])


def _check(manifest: Manifest) -> None:
    assert manifest.checkpoint_id == str(manifest.checkpoint_id) and manifest.step >= 0
    assert math.isfinite(manifest.wall_time_unix_s)
    assert 0 <= manifest.world.rank < manifest.world.world_size
    assert all(f.size_bytes >= 0 for f in manifest.files)
    for leaf in manifest.leaves.values():
        assert all(d >= 0 for d in leaf.shape)
        assert all(c.offset >= 0 and c.stored_bytes >= 0 and c.raw_bytes >= 0 for c in leaf.chunks)


def _parse(text: str) -> None:
    try:
        _check(manifest_from_json(text, CKPT))
    except (CheckpointCorrupt, FormatVersionError) as exc:
        assert exc.checkpoint_id == CKPT and CKPT in str(exc)


@FAST_PARSER_SETTINGS
@given(hostile([MANIFEST_TEXT]))
def test_any_manifest_text_is_checked_or_refused_naming_the_checkpoint(text: str) -> None:
    _parse(text)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(
        [math.inf, -math.inf, math.nan, 10**30, -1, 2**63, "", "0", "raw", "durable"]
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _places(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON document, depth first."""
    found: list[tuple[Any, Any]] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in items:
        found.append((value, key))
        found += _places(child)
    return found


@st.composite
def altered_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """The sample's body with one to three values replaced by any JSON value, or removed."""
    body: dict[str, Any] = json.loads(BODY_TEXT)
    for _ in range(draw(st.integers(1, 3))):
        container, key = draw(st.sampled_from(_places(body)))
        if draw(st.booleans()) and isinstance(container, dict):
            del container[key]
        else:
            container[key] = draw(JSON_VALUES)
    return body


@FAST_PARSER_SETTINGS
@given(altered_bodies())
def test_a_damaged_body_with_a_matching_checksum_is_still_checked_field_by_field(
    body: dict[str, Any],
) -> None:
    """Past the checksum (a manifest written by a buggy or hostile writer): every field is still checked."""
    _parse(json.dumps({"sha256": _digest(body), "manifest": body}))


def test_the_sample_manifest_reads_back() -> None:
    assert manifest_from_json(MANIFEST_TEXT, CKPT) == SAMPLE


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("step", math.inf),
        ("format_version", math.inf),
        ("wall_time_unix_s", math.nan),
        ("step", -3),
        ("leaves", []),
        ("chunk_files", []),
        ("world", {"world_size": 1, "rank": 5, "local_world_size": 1}),
        ("files", [[_PACK, "ab" * 32, -96]]),
    ],
)
def test_each_field_a_damaged_writer_got_wrong_is_refused(field: str, value: Any) -> None:
    body = json.loads(BODY_TEXT)
    body[field] = value
    with pytest.raises(CheckpointCorrupt, match=CKPT):
        manifest_from_json(json.dumps({"sha256": _digest(body), "manifest": body}), CKPT)
