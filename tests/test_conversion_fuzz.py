"""Property-based fuzzing of the loader: any failure is one CheckpointError line, never a raw exception."""

from __future__ import annotations

import json
import re
import struct
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from flax_posenc.conversion import CheckpointError, PositionTable, load_input_block, load_position_table

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = ["F64", "F32", "F16", "BF16", "I64", "I32", "I8", "U8", "BOOL", "F8_E4M3", "Q4", "", "f32", 7, None]


def _valid_file() -> bytes:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.safetensors"
        save_file(
            {
                "wpe.weight": rng.normal(size=(8, 4)).astype(np.float32),
                "wte.weight": rng.normal(size=(10, 4)).astype(np.float32),
                "h.0.attn.c_attn.weight": rng.normal(size=(4, 12)).astype(np.float32),
            },
            str(path),
            metadata={"format": "pt"},
        )
        return path.read_bytes()


VALID = _valid_file()


def _load_bytes(data: bytes, name: str = "model.safetensors", **kwargs):
    """Write ``data`` and load it; returns the table or the CheckpointError (anything else fails)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        try:
            table = load_position_table(path, **kwargs)
        except CheckpointError as e:
            msg = str(e)
            assert msg and "\n" not in msg, msg
            # the one shape of every loader error: "<the file, or a part of it>: expected <what>, found <what>"
            assert re.fullmatch(rf".*{re.escape(name)}.*?: expected .+, found .+", msg), msg
            return e
        assert isinstance(table, PositionTable)
        assert table.weights.ndim == 2 and np.isfinite(table.weights).all()
        return table


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data):
    _load_bytes(data)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_as_bin(data):
    _load_bytes(data, name="pytorch_model.bin", family="gpt2")


@FUZZ
@given(st.data())
def test_mutated_valid_file(data):
    buf = bytearray(VALID)
    (n,) = struct.unpack("<Q", buf[:8])
    kind = data.draw(st.sampled_from(["flip", "truncate", "length", "append", "splice"]))
    if kind == "flip":  # corrupt bytes, mostly in the header
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, 8 + n + 16))
            buf[i % len(buf)] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        buf = buf[: data.draw(st.integers(0, len(buf) - 1))]
    elif kind == "length":
        buf[:8] = struct.pack("<Q", data.draw(st.integers(0, 2**64 - 1)))
    elif kind == "append":
        buf += data.draw(st.binary(min_size=1, max_size=64))
    else:
        i = data.draw(st.integers(8, 8 + n))
        buf[i:i] = data.draw(st.binary(min_size=1, max_size=16))
    result = _load_bytes(bytes(buf))
    if isinstance(result, PositionTable):
        assert result.weights.shape[1] >= 1


entry = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(DTYPES),
        "shape": st.one_of(
            st.lists(st.integers(-2, 12), max_size=4),
            st.lists(st.integers(0, 2**62), max_size=3),
            st.text(max_size=3),
            st.none(),
        ),
        "data_offsets": st.one_of(st.lists(st.integers(-4, 600), min_size=0, max_size=3), st.none()),
    }
)


@FUZZ
@given(
    st.dictionaries(st.sampled_from(["wpe.weight", "wte.weight", "__metadata__", "x"]), entry, max_size=3),
    st.binary(max_size=600),
    st.booleans(),
)
def test_structured_headers(header, payload, pad):
    blob = json.dumps(header).encode()
    if pad:
        blob += b" " * (-len(blob) % 8)
    _load_bytes(struct.pack("<Q", len(blob)) + blob + payload, family="gpt2")


@FUZZ
@given(
    st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_]),
    st.lists(st.integers(0, 5), max_size=4),
    st.sampled_from([None, np.nan, np.inf]),
)
def test_valid_files_wrong_dtypes_and_shapes(dtype, shape, poison):
    arr = np.ones(shape, dtype=dtype)
    if poison is not None and arr.size and np.issubdtype(dtype, np.floating):
        arr.flat[0] = poison
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.safetensors"
        save_file({"wpe.weight": arr, "wte.weight": np.ones((3, shape[-1] if shape else 1), np.float32)}, str(path))
        for fn in (load_position_table, load_input_block):
            try:
                out = fn(path, family="gpt2")
            except CheckpointError as e:
                assert "\n" not in str(e) and ("wpe.weight" in str(e) or "wte.weight" in str(e)), str(e)
                continue
            table = out if isinstance(out, PositionTable) else out.position
            ok = np.issubdtype(dtype, np.floating) and len(shape) == 2 and 0 not in shape and poison is None
            assert ok, (dtype, shape, poison)
            assert table.weights.shape == tuple(shape)
