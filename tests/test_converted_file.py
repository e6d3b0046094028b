"""The converted-file format (conversion/converted_file.py): version 3 safetensors, versions 1-2 msgpack.

The references are independent of our reader: flax's own ``flax.serialization`` (the writer of
versions 1-2), ``safetensors.numpy`` (any reader of version 3) and the checkpoint itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx, serialization
from safetensors.numpy import load_file, save_file

import flax_posenc as fp
from flax_posenc.conversion import converted_file as cf
from flax_posenc.conversion import inspect_source
from flax_posenc.errors import CheckpointError
from flax_posenc.pretrained import load_pretrained, save_converted
from flax_posenc.report import cli
from flax_posenc.spec import InputSpec, PositionSpec

VOCAB, DIM, ROWS = 13, 4, 9
KEY = "embeddings.position_embeddings.weight"


@pytest.fixture
def bert(tmp_path) -> Path:
    """A tiny BERT-like checkpoint (a token-type table and a LayerNorm)."""
    rng = np.random.default_rng(1)
    shapes = {"word_embeddings": (VOCAB, DIM), "position_embeddings": (ROWS, DIM), "token_type_embeddings": (2, DIM)}
    tensors = {f"embeddings.{k}.weight": rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    tensors |= {f"embeddings.LayerNorm.{k}": rng.standard_normal(DIM).astype(np.float32) for k in ("weight", "bias")}
    folder = tmp_path / "bert"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    config = {"model_type": "bert", "max_position_embeddings": ROWS, "hidden_size": DIM, "vocab_size": VOCAB}
    (folder / "config.json").write_text(json.dumps(config | {"type_vocab_size": 2, "layer_norm_eps": 1e-12}))
    return folder


def _flax_v2(path: Path, spec: InputSpec, params: dict) -> Path:
    """Version 2 as the flax-based writer of earlier releases wrote it."""
    blob = {"format": "flax-posenc/input-spec", "version": 2, "spec": spec.to_dict(), "params": params}
    path.write_bytes(serialization.msgpack_serialize(blob))
    return path


def _same(a, b):
    jax.tree.map(lambda x, y: (np.testing.assert_array_equal(x, y), x.dtype == y.dtype or pytest.fail("dtype")), a, b)


def test_version_3_is_a_safetensors_file_with_the_spec_and_origin_as_metadata(bert, tmp_path):
    out = save_converted(bert, tmp_path / "b.safetensors")
    spec, params = load_pretrained(bert)
    tensors = load_file(str(out))  # any safetensors reader: flat names
    assert sorted(tensors) == sorted(cf.PARAM_NAMES)
    np.testing.assert_array_equal(tensors["layer_norm/scale"], params["layer_norm"]["scale"])
    np.testing.assert_array_equal(tensors["position_embeddings"], params["position_embeddings"])
    header = json.loads(out.read_bytes()[8 : 8 + int.from_bytes(out.read_bytes()[:8], "little")])
    meta = header["__metadata__"]
    assert (meta["format"], meta["version"]) == ("flax-posenc/input-spec", "3")
    assert InputSpec.from_dict(json.loads(meta["spec"])) == spec
    assert json.loads(meta["origin"]) == {"family": "bert", "key": KEY, "source": str(bert)}

    back = cf.read_converted(out)
    assert (back.spec, back.version, back.origin) == (spec, 3, cf.Origin("bert", KEY, str(bert)))
    _same(back.params, params)
    ids = jnp.asarray([[0, 5, 12, 3]], jnp.int32)
    direct = nnx.jit(lambda m, i: m(i))(fp.nnx.TransformerInput.from_pretrained(bert), ids)
    np.testing.assert_array_equal(nnx.jit(lambda m, i: m(i))(fp.nnx.TransformerInput.from_pretrained(out), ids), direct)
    module, variables = fp.linen.TransformerInput.from_pretrained(out)
    np.testing.assert_array_equal(jax.jit(module.apply)(variables, ids), direct)


def test_the_origin_is_stored_not_parsed_from_the_table_name(tmp_path):
    spec = InputSpec(3, PositionSpec(dim=2, num_positions=4, name="my table (not a key)"))
    params = {"word_embeddings": np.zeros((3, 2), np.float32), "position_embeddings": np.ones((4, 2), np.float32)}
    out = cf.write_converted(tmp_path / "x.safetensors", spec, params, origin=cf.Origin("gpt2", "wpe.weight", "src"))
    record = inspect_source(out).to_dict()
    assert (record["family"], record["key"]) == ("gpt2", "wpe.weight")
    bare = cf.write_converted(tmp_path / "y.safetensors", spec, params)  # no origin: says so, guesses nothing
    assert cf.read_converted(bare).origin is None
    assert (inspect_source(bare).to_dict()["family"], inspect_source(bare).to_dict()["key"]) == (
        "converted",
        "position_embeddings",
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_a_v2_file_of_the_flax_writer_reads_back_identically(bert, tmp_path, dtype):
    spec, params = load_pretrained(bert)
    params = jax.tree.map(lambda x: np.asarray(x).astype(dtype), params)
    path = _flax_v2(tmp_path / "old.msgpack", spec, params)
    back = cf.read_converted(path)
    assert (back.spec, back.version, back.origin) == (spec, 2, cf.Origin("bert", KEY))
    _same(back.params, params)
    # and our own v2 writer writes flax's bytes exactly
    ours = cf.write_converted(tmp_path / "new.msgpack", spec, params)
    assert ours.read_bytes() == path.read_bytes()


def test_chunked_arrays_read_and_write_as_flax_does(monkeypatch, tmp_path):
    monkeypatch.setattr(serialization, "MAX_CHUNK_SIZE", 24)  # every table split into chunks of 24 bytes
    monkeypatch.setattr(cf, "_MAX_CHUNK_BYTES", 24)
    spec = InputSpec(5, PositionSpec(dim=3, num_positions=7))
    rng = np.random.default_rng(2)
    params = {"word_embeddings": rng.standard_normal((5, 3)), "position_embeddings": rng.standard_normal((7, 3))}
    path = _flax_v2(tmp_path / "chunked.msgpack", spec, params)
    assert b"__msgpack_chunked_array__" in path.read_bytes()
    _same(cf.read_converted(path).params, params)
    assert cf.write_converted(tmp_path / "ours.msgpack", spec, params).read_bytes() == path.read_bytes()


def test_reading_imports_neither_jax_nor_flax(bert, tmp_path):
    v3 = save_converted(bert, tmp_path / "b.safetensors")
    v2 = save_converted(bert, tmp_path / "b.msgpack")
    code = textwrap.dedent(
        f"""
        import sys
        from flax_posenc.conversion import inspect_source
        from flax_posenc.conversion.converted_file import read_converted
        assert read_converted({str(v2)!r}).spec == read_converted({str(v3)!r}).spec
        assert inspect_source({str(v3)!r}).limit == {ROWS}
        print("HEAVY", sorted(m for m in ("jax", "flax", "torch", "transformers") if m in sys.modules))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout


def test_a_checkpoint_safetensors_file_is_not_a_converted_file(bert, tmp_path):
    assert not cf.is_converted_file(bert / "model.safetensors")
    assert cf.is_converted_file(save_converted(bert, tmp_path / "b.safetensors"))
    assert not cf.is_converted_file(tmp_path / "missing.safetensors") and not cf.is_converted_file(3)


def _rewrite(path: Path, meta: dict | None = None, tensors: dict | None = None) -> None:
    """``path`` written again with some metadata fields or tensors replaced (None: removed)."""
    header = json.loads(path.read_bytes()[8 : 8 + int.from_bytes(path.read_bytes()[:8], "little")])
    metadata = {k: v for k, v in {**header["__metadata__"], **(meta or {})}.items() if v is not None}
    stored = {k: v for k, v in {**load_file(str(path)), **(tensors or {})}.items() if v is not None}
    path.unlink()
    save_file(stored, str(path), metadata=metadata)


HOSTILE = [
    ({"format": "other"}, None, "expected a safetensors file with metadata format 'flax-posenc/input-spec'"),
    ({"version": "4"}, None, "expected a flax-posenc safetensors file of version 3 (versions 1-2 are .msgpack)"),
    ({"spec": "{not json"}, None, "the 'spec' JSON"),
    ({"spec": None}, None, "expected a 'spec' dict (version 3), found NoneType"),
    ({"spec": json.dumps({"vocab_size": VOCAB})}, None, "expected a valid 'spec' (version 3)"),
    ({"origin": json.dumps({"family": 1})}, None, 'expected an origin {"family": str'),
    (None, {"evil": np.zeros((2, DIM), np.float32)}, "expected tensors among"),
    (None, {"word_embeddings": None}, "missing ['word_embeddings']"),
    (None, {"word_embeddings": np.zeros((VOCAB, DIM), np.int32)}, "expected word_embeddings as a float array"),
    (None, {"position_embeddings": np.full((ROWS, DIM), np.nan, np.float32)}, "finite values in position_embeddings"),
    (None, {"position_embeddings": np.zeros((ROWS + 1, DIM), np.float32)}, "a spec that matches the parameters"),
]


@pytest.mark.parametrize("meta, tensors, found", HOSTILE)
def test_a_hostile_v3_file_is_one_checkpoint_error_line(bert, tmp_path, capsys, meta, tensors, found):
    out = save_converted(bert, tmp_path / "b.safetensors")
    _rewrite(out, meta, tensors)
    with pytest.raises(CheckpointError) as info:
        cf.read_converted(out)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{out}") and found in message, message
    if meta and "format" in meta:
        return  # no longer a converted file: read as a checkpoint (no config.json beside it)
    assert cli.main(["inspect", str(out)]) == 2
    assert found in capsys.readouterr().err


def test_a_failed_write_leaves_nothing_behind(bert, tmp_path, monkeypatch):
    def full(tmp, out, *, overwrite):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cf, "publish_file", full)
    with pytest.raises(CheckpointError, match=r"b.safetensors: expected a writable output file, found OSError"):
        save_converted(bert, tmp_path / "b.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert"]


def test_format_and_suffix_must_agree(bert, tmp_path):
    with pytest.raises(CheckpointError, match=r"x.msgpack: expected an output file name ending in .safetensors, found"):
        save_converted(bert, tmp_path / "x.msgpack", format="safetensors")
    with pytest.raises(CheckpointError, match=r"expected an output file name ending in .safetensors or .msgpack"):
        save_converted(bert, tmp_path / "x.bin")
    with pytest.raises(ValueError, match=r"^format: expected one of safetensors, msgpack, orbax or None, got 'npz'"):
        save_converted(bert, tmp_path / "x.safetensors", format="npz")
    assert cf.read_converted(save_converted(bert, tmp_path / "y.msgpack", format="msgpack")).version == 2


def test_an_orbax_directory_stores_the_origin_too(bert, tmp_path):
    from flax_posenc.orbax_io import METADATA_FILE, read_orbax_origin

    out = save_converted(bert, tmp_path / "b-orbax", format="orbax")
    assert read_orbax_origin(out) == cf.Origin("bert", KEY, str(bert))
    assert (inspect_source(out).to_dict()["family"], inspect_source(out).to_dict()["key"]) == ("bert", KEY)
    again = save_converted(out, tmp_path / "again.safetensors")  # an orbax SOURCE passes its origin on
    assert cf.read_converted(again).origin == cf.Origin("bert", KEY, str(bert))
    spec, params = load_pretrained(bert)
    bare = fp.save_orbax(tmp_path / "bare", spec.replace(position_name="mine"), params)  # no origin, no old name
    assert read_orbax_origin(bare) is None and inspect_source(bare).to_dict()["family"] == "converted"
    meta = json.loads((out / METADATA_FILE).read_text())
    (out / METADATA_FILE).write_text(json.dumps(meta | {"origin": {"family": "bert"}}))
    with pytest.raises(CheckpointError, match=r'expected an origin \{"family": str, "key": str'):
        read_orbax_origin(out)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, ml_dtypes.bfloat16])
def test_v3_keeps_every_float_dtype(bert, tmp_path, dtype):
    spec, params = load_pretrained(bert)
    params = jax.tree.map(lambda x: np.asarray(x).astype(dtype), params)
    out = cf.write_converted(tmp_path / "b.safetensors", spec, params)
    _same(cf.read_converted(out).params, params)  # bfloat16 stays bfloat16, not upcast
