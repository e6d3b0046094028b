"""GGUF files (llama.cpp's format), read through the gguf package.

Every file here is written by ``gguf.GGUFWriter`` (llama.cpp's own writer); the reference is
transformers 5.24.0's GGUF loader (``AutoConfig.from_pretrained(dir, gguf_file=...)`` and
``load_gguf_checkpoint``) and its own ``LlamaRotaryEmbedding`` / ``Qwen2RotaryEmbedding``.
Hostile files are written byte by byte.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import gguf
import jax
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

import flax_posenc as fp
from flax_posenc.conversion import inspect_source, load_position_table, rope_for_layer
from flax_posenc.conversion.gguf_source import GGUF_EXTRA_HINT, MAX_METADATA_ITEMS, open_gguf, read_tensor
from flax_posenc.errors import CheckpointError
from flax_posenc.report.cli import main
from flax_posenc.rope_config import rope_inverse_frequencies

Q = gguf.GGMLQuantizationType
HIDDEN, HEADS, KV_HEADS, CONTEXT, THETA = 64, 4, 2, 256, 50000.0
VOCAB = 32
#: only names matter: transformers' loader maps GGUF tensor names onto this model's parameters
TINY_GPT2 = GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=VOCAB, n_positions=64)


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    same_as_gguf_reader(Path(w.path))  # every file written here: the bounded scan reads what GGUFReader reads


def _finish_unchecked(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def same_as_gguf_reader(path: Path) -> None:
    """The bounded scan's metadata and tensors equal ``gguf.GGUFReader``'s (the reference) for ``path``:
    every key, its GGUF type, every scalar and string value, every array's item type and length,
    and every tensor (F32/F16 as stored, quantized ones dequantized by gguf)."""
    g = open_gguf(path)
    reader = gguf.GGUFReader(path)
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}  # the reader's header pseudo-keys
    assert list(g.header.metadata) == list(fields)
    assert g.header.version == reader.fields["GGUF.version"].contents()
    for key, field in fields.items():
        vtype = int(field.types[0])
        assert g.header.types[key] == vtype, key
        if vtype == 9:  # an array: skipped by the scan, only its item type and length kept
            assert g.header.metadata[key] == ("array", int(field.types[1]), len(field.data)), key
        else:
            assert g.header.metadata[key] == field.contents(), key
    assert sorted(g.header.tensors) == sorted(t.name for t in reader.tensors)
    for t in reader.tensors:
        kind = Q(t.tensor_type)
        expected = np.array(t.data) if kind in (Q.F32, Q.F16, Q.F64) else gguf.quants.dequantize(t.data, kind)
        got = read_tensor(g, t.name)
        assert got.dtype == expected.dtype and got.shape == expected.shape, t.name
        np.testing.assert_array_equal(got, expected)


def _tokenizer(w: gguf.GGUFWriter, model: str) -> None:
    """The tokenizer metadata transformers' loader reads to find vocab_size."""
    w.add_tokenizer_model(model)
    w.add_token_list([f"t{i}".encode() for i in range(VOCAB)])
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types([1] * VOCAB)


def write_rope(
    path: Path,
    arch: str = "llama",
    *,
    scaling: dict | None = None,
    dims: int | None = 16,
    extra: dict | None = None,
    extra_kv: dict | None = None,
) -> Path:
    """A tiny Llama/Qwen2-style GGUF: metadata and the token embeddings only."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(2)
    w.add_feed_forward_length(128)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    if dims is not None:
        w.add_rope_dimension_count(dims)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(1e-5)
    for key, value in (extra_kv or {}).items():
        w.add_uint32(key, value)
    for key, value in (scaling or {}).items():
        if key == "type":
            w.add_rope_scaling_type(gguf.RopeScalingType(value))
        elif key == "factor":
            w.add_rope_scaling_factor(value)
        elif key == "original_context_length":
            w.add_rope_scaling_orig_ctx_len(value)
        else:
            w.add_float32(f"{arch}.rope.scaling.{key}", value)
    _tokenizer(w, "llama")
    w.add_tensor("token_embd.weight", np.zeros((VOCAB, HIDDEN), np.float32))
    for name, value in (extra or {}).items():
        w.add_tensor(name, value)
    _finish(w)
    return path


def gpt2_table(rows: int = 64, dim: int = 32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)


def write_gpt2(path: Path, qtype=Q.F32, *, table: np.ndarray | None = None, context: int | None = None) -> Path:
    """A tiny GPT-2-style GGUF with its position table stored as ``qtype``."""
    table = gpt2_table() if table is None else table
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_context_length(table.shape[0] if context is None else context)
    w.add_embedding_length(table.shape[1])
    w.add_block_count(1)
    w.add_head_count(2)
    w.add_feed_forward_length(4 * table.shape[1])
    w.add_layer_norm_eps(1e-5)
    _tokenizer(w, "gpt2")
    w.add_tensor("position_embd.weight", gguf.quants.quantize(table, qtype), raw_dtype=qtype)
    w.add_tensor("token_embd.weight", np.zeros((VOCAB, table.shape[1]), np.float32))
    _finish(w)
    return path


def transformers_config(path: Path):
    return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)


def hf_inv_freq(config) -> tuple[np.ndarray, float]:
    rotary = (Qwen2RotaryEmbedding if config.model_type == "qwen2" else LlamaRotaryEmbedding)(config)
    return rotary.inv_freq.double().numpy(), float(rotary.attention_scaling)


def one_line(excinfo, *fragments: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ----------------------------------------------------------------------------- RoPE parity


@pytest.mark.parametrize(
    "arch,dims,key_length",
    [("llama", 16, None), ("llama", None, None), ("llama", 32, 32), ("qwen2", 16, None), ("qwen2", None, None)],
)
def test_unscaled_rope_equals_transformers_gguf_loader(tmp_path, arch, dims, key_length):
    extra_kv = {f"{arch}.attention.key_length": key_length} if key_length else {}
    path = write_rope(tmp_path / f"{arch}.gguf", arch, dims=dims, extra_kv=extra_kv)
    head_dim = key_length or HIDDEN // HEADS
    record = inspect_source(path)
    assert record.model_type == arch and [m.kind for m in record.mechanisms] == ["rope"]
    ours = record.mechanisms[0].rope
    config = transformers_config(path)  # transformers' own GGUF loader
    assert config.model_type == arch
    inv, scale = rope_inverse_frequencies(ours)
    inv_hf, scale_hf = hf_inv_freq(config)
    np.testing.assert_allclose(inv, inv_hf, rtol=1e-6, atol=0)  # theirs is float32
    assert scale == scale_hf
    assert record.limit == ours.limit == config.max_position_embeddings == CONTEXT
    assert ours.rope_theta == config.rope_parameters["rope_theta"] == THETA
    assert ours.head_dim == ours.rotary_dim == head_dim == getattr(config, "head_dim", head_dim)


@pytest.mark.parametrize(
    "scaling,limit",
    [
        ({"type": "linear", "factor": 4.0}, 4 * CONTEXT),
        ({"type": "yarn", "factor": 4.0, "original_context_length": 64}, CONTEXT),
        ({"type": "yarn", "factor": 8.0, "original_context_length": 64, "yarn_beta_fast": 16.0}, 512),
    ],
    ids=["linear", "yarn", "yarn-beta"],
)
def test_scaled_rope_equals_transformers_given_the_file_scaling(tmp_path, scaling, limit):
    path = write_rope(tmp_path / "scaled.gguf", scaling=scaling)
    ours = inspect_source(path).mechanisms[0].rope
    loaded = transformers_config(path)
    # transformers 5.24.0's GGUF loader drops llama.rope.scaling.* (it reads it for gpt-oss only);
    # llama.cpp applies it, and so do we: the reference is transformers given the file's scaling
    assert loaded.rope_parameters == {"rope_theta": THETA, "rope_type": "default"}
    hf_scaling = {"rope_type": scaling["type"], "factor": scaling["factor"]}
    if "original_context_length" in scaling:
        hf_scaling["original_max_position_embeddings"] = scaling["original_context_length"]
    if "yarn_beta_fast" in scaling:
        hf_scaling["beta_fast"] = scaling["yarn_beta_fast"]
    reference = LlamaConfig(**{**loaded.to_dict(), "rope_parameters": {"rope_theta": THETA, **hf_scaling}})
    inv, scale = rope_inverse_frequencies(ours)
    inv_hf, scale_hf = hf_inv_freq(reference)
    np.testing.assert_allclose(inv, inv_hf, rtol=1e-6, atol=0)
    np.testing.assert_allclose(scale, scale_hf, rtol=1e-6)
    assert ours.rope_type == scaling["type"] and ours.limit == limit
    # and the unscaled part is what transformers' loader read
    assert ours.rope_theta == loaded.rope_parameters["rope_theta"]
    assert ours.max_position_embeddings == loaded.max_position_embeddings


def test_partial_rotary_from_dimension_count(tmp_path):
    path = write_rope(tmp_path / "partial.gguf", dims=8)
    ours = inspect_source(path).mechanisms[0].rope
    assert (ours.head_dim, ours.rotary_dim) == (16, 8)
    # float64 numpy reference: llama.cpp's theta_i = base^(-2i/n_rot) over the n_rot rotated dims
    expected = THETA ** (-np.arange(0, 8, 2, dtype=np.float64) / 8)
    np.testing.assert_allclose(rope_inverse_frequencies(ours)[0], expected, rtol=1e-12)


def test_rotary_embedding_from_a_gguf_under_jit(tmp_path):
    """What users call: RotaryEmbedding.from_pretrained(x.gguf) under jax.jit, against transformers' rotation."""
    path = write_rope(tmp_path / "llama.gguf")
    rope = fp.nnx.RotaryEmbedding.from_pretrained(path, layer=1, seq_axis=-2)
    assert rope.config == rope_for_layer(path, 1) == inspect_source(path).mechanisms[0].rope
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, HEADS, 12, 16)).astype(np.float32)
    positions = np.arange(100, 112)
    ours = np.asarray(jax.jit(lambda x, p: rope(x, p))(q, positions))
    config = transformers_config(path)
    cos, sin = LlamaRotaryEmbedding(config)(torch.zeros(1, 12, HIDDEN), torch.from_numpy(positions)[None])
    ref, _ = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(q), cos, sin)
    np.testing.assert_allclose(ours, ref.numpy(), atol=1e-5, rtol=0)
    with pytest.raises(CheckpointError) as e:
        rope_for_layer(path, 2)  # llama.block_count = 2
    one_line(e, "0..1", "2 layers")


def test_the_limit_sentence_names_the_files_key_at_the_command_line_and_at_run_time(tmp_path, capsys):
    """One limit, one sentence: ``check`` and the run-time error both name ``llama.context_length``
    (the file's key), not config.json's ``max_position_embeddings``, and agree word for word."""
    path = write_rope(tmp_path / "llama.gguf")
    assert main(["check", str(path), "--length", str(CONTEXT + 3)]) == 1
    cli = "".join(capsys.readouterr())
    rope = fp.nnx.RotaryEmbedding.from_pretrained(path, layer=0, seq_axis=-2)
    q = np.zeros((1, HEADS, 1, 16), np.float32)
    with pytest.raises(fp.PositionLimitError) as e:
        rope(q, np.array([CONTEXT + 2]))
    runtime = str(e.value)
    phrase = f"(llama.context_length {CONTEXT})"
    assert phrase in cli and phrase in runtime, (cli, runtime)
    assert "max_position_embeddings" not in cli + runtime
    assert rope.config == rope_for_layer(path, 0)  # the label is not part of the config's identity
    assert rope.config.length_field == "llama.context_length"


# ----------------------------------------------------------------------------- GPT-2 tables


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0], ids=lambda q: q.name)
def test_gpt2_table_equals_transformers_gguf_loader(tmp_path, qtype):
    path = write_gpt2(tmp_path / f"gpt2-{qtype.name}.gguf", qtype)
    table = load_position_table(path)
    assert (table.family, table.key, table.offset, table.num_positions) == ("gpt2", "position_embd.weight", 0, 64)
    config = transformers_config(path)
    parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=GPT2LMHeadModel(TINY_GPT2))
    theirs = parsed["tensors"]["transformer.wpe.weight"].numpy()
    np.testing.assert_array_equal(table.weights.astype(np.float32), theirs)  # the same dequantization
    assert table.weights.dtype == (np.float16 if qtype == Q.F16 else np.float32)
    assert config.n_ctx == table.num_positions  # transformers reads context_length as n_ctx
    error = {Q.F32: 0, Q.F16: 1e-3, Q.BF16: 1e-2, Q.Q8_0: 3e-2, Q.Q4_0: 0.5}[qtype]
    assert np.abs(table.weights.astype(np.float64) - gpt2_table()).max() <= error  # still the written table


def test_gpt2_inspect_check_plot_cli(tmp_path, capsys):
    path = write_gpt2(tmp_path / "gpt2.gguf", Q.Q8_0)
    record = inspect_source(path)
    assert record.limit == 64 and record.key == "position_embd.weight" and record.model_type == "gpt2"
    assert main(["inspect", str(path)]) == 0
    assert "position_embd.weight" in capsys.readouterr().out
    assert main(["check", str(path), "--length", "64"]) == 0
    capsys.readouterr()
    assert main(["check", str(path), "--length", "65"]) == 1
    assert "1 past the limit" in capsys.readouterr().err
    assert main(["plot", str(path), "--out", str(tmp_path / "figs")]) == 0
    assert any(p.suffix == ".png" for p in (tmp_path / "figs").iterdir())


def test_convert_and_extend_refuse_a_gguf_in_one_line(tmp_path, capsys):
    """Writing a GGUF back (extend) or converting its whole model is not supported: one line, exit 2."""
    path = write_gpt2(tmp_path / "gpt2.gguf")
    for argv in (
        ["convert", str(path), "--out", str(tmp_path / "out.msgpack")],
        ["extend", str(path), "--length", "128", "--out", str(tmp_path / "longer")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "gpt2.gguf" in err and "Traceback" not in err, err
    assert not (tmp_path / "out.msgpack").exists() and not (tmp_path / "longer").exists()


def test_rope_inspect_check_plot_cli(tmp_path, capsys):
    path = write_rope(tmp_path / "llama.gguf", scaling={"type": "linear", "factor": 2.0})
    assert main(["inspect", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"rope_type": "linear"' in out and '"limit": 512' in out
    assert main(["check", str(path), "--length", "512"]) == 0
    capsys.readouterr()
    assert main(["check", str(path), "--length", "513"]) == 1
    capsys.readouterr()
    assert main(["plot", str(path), "--out", str(tmp_path / "figs")]) == 0
    assert any(p.suffix == ".png" for p in (tmp_path / "figs").iterdir())


# ----------------------------------------------------------------------------- bad input


def test_without_gguf_installed_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    path = write_gpt2(tmp_path / "gpt2.gguf")
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` raises ImportError
    with pytest.raises(CheckpointError) as e:
        load_position_table(path)
    one_line(e, str(path), GGUF_EXTRA_HINT, "gguf is not installed")
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and GGUF_EXTRA_HINT in err and "Traceback" not in err


def _header(kvs: list[bytes], tensors: list[bytes], *, n_tensors=None, n_kv=None) -> bytes:
    n_tensors = len(tensors) if n_tensors is None else n_tensors
    n_kv = len(kvs) if n_kv is None else n_kv
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + b"".join(kvs) + b"".join(tensors)


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def _kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


def _cli_one_line(path: Path, capsys) -> str:
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and str(path) in err, err
    return err


def _refused(path: Path, capsys, *fragments: str) -> str:
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as e:
            inspect_source(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak  # never a large allocation
    message = one_line(e, str(path), *fragments)
    _cli_one_line(path, capsys)
    return message


@pytest.mark.parametrize("cut", [3, 20, 40, 0.5, -8])
def test_truncated_file(tmp_path, capsys, cut):
    whole = write_gpt2(tmp_path / "whole.gguf").read_bytes()
    end = int(len(whole) * cut) if isinstance(cut, float) else cut
    path = tmp_path / "cut.gguf"
    path.write_bytes(whole[:end])
    _refused(path, capsys, "expected")


def test_lying_tensor_count(tmp_path, capsys):
    path = tmp_path / "lying.gguf"
    path.write_bytes(_header([_kv_str("general.architecture", "gpt2")], [], n_tensors=1 << 40))
    _refused(path, capsys, "1099511627776 tensors", "lying count")
    whole = bytearray(write_gpt2(tmp_path / "whole.gguf").read_bytes())
    whole[8:16] = struct.pack("<Q", 3)  # one more tensor than it holds: the data is read as a tensor info
    path.write_bytes(bytes(whole))
    _refused(path, capsys, "expected")


def test_lying_kv_count(tmp_path, capsys):
    whole = bytearray(write_gpt2(tmp_path / "whole.gguf").read_bytes())
    whole[16:24] = struct.pack("<Q", struct.unpack_from("<Q", whole, 16)[0] + 3)  # three more keys than it holds
    path = tmp_path / "lying.gguf"
    path.write_bytes(bytes(whole))
    _refused(path, capsys, "expected")


@pytest.mark.parametrize("itype,count", [(4, 1 << 60), (8, 1 << 40), (4, MAX_METADATA_ITEMS + 1)])
def test_huge_declared_array(tmp_path, capsys, itype, count):
    arch = _kv_str("general.architecture", "llama")
    array = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, itype, count)
    path = tmp_path / "huge.gguf"
    payload = b"\0" * ((MAX_METADATA_ITEMS + 1) * 4 if count == MAX_METADATA_ITEMS + 1 else 64)
    path.write_bytes(_header([arch, array], []) + payload)
    _refused(path, capsys, "tokenizer.ggml.tokens")


def test_metadata_array_items_are_bounded_in_all_not_per_array(tmp_path, capsys):
    """Two arrays of MAX_METADATA_ITEMS / 2 + 1 uint32 items each: each fits the bound alone, the two
    together do not; refused at the second (the bound is on all arrays together)."""
    half = MAX_METADATA_ITEMS // 2 + 1
    arrays = [_s(key) + struct.pack("<IIQ", 9, 4, half) + b"\0" * (4 * half) for key in ("first.items", "second.items")]
    path = tmp_path / "many.gguf"
    path.write_bytes(_header([_kv_str("general.architecture", "llama"), *arrays], []))
    _refused(
        path, capsys, f"at most {MAX_METADATA_ITEMS} metadata array items in all", f"{2 * half} at", "second.items"
    )


def test_huge_declared_string(tmp_path, capsys):
    path = tmp_path / "string.gguf"
    path.write_bytes(_header([_s("general.architecture") + struct.pack("<IQ", 8, 1 << 62)], []))
    _refused(path, capsys, "general.architecture", "4611686018427387904")


def test_tensor_data_outside_the_file(tmp_path, capsys):
    info = _s("position_embd.weight") + struct.pack("<IQQIQ", 2, 32, 1 << 40, 0, 0)
    path = tmp_path / "outside.gguf"
    path.write_bytes(_header([_kv_str("general.architecture", "gpt2")], [info]) + b"\0" * 64)
    _refused(path, capsys, "position_embd.weight", "inside the")


@pytest.mark.parametrize(
    "kvs,fragments",
    [
        ([], ["general.architecture", "no such key"]),
        ([_kv_str("general.architecture", "mamba")], ["general.architecture='mamba'", "llama, qwen2, gpt2"]),
        ([_kv_str("general.architecture", "llama")], ["llama.context_length", "no such key"]),
        (
            [_kv_str("general.architecture", "llama"), _kv_u32("llama.context_length", 64)],
            ["llama.embedding_length", "no such key"],
        ),
        (
            [_kv_str("general.architecture", "llama"), _kv_str("llama.context_length", "long")],
            ["llama.context_length as an int", "'long'"],
        ),
        ([_kv_str("general.architecture", "gpt2"), _kv_u32("gpt2.context_length", 64)], ["'position_embd.weight'"]),
    ],
    ids=["no-arch", "unknown-arch", "no-context", "no-width", "context-as-text", "no-table"],
)
def test_missing_or_mistyped_keys(tmp_path, capsys, kvs, fragments):
    path = tmp_path / "missing.gguf"
    path.write_bytes(_header(kvs, []) + b"\0" * 32)
    _refused(path, capsys, *fragments)


def test_context_length_disagreeing_with_the_table(tmp_path, capsys):
    path = write_gpt2(tmp_path / "gpt2.gguf", context=128)
    _refused(path, capsys, "gpt2.context_length=64 to match position_embd.weight (64 rows)", "=128")


@pytest.mark.parametrize(
    "scaling,fragments",
    [
        ({"type": "longrope", "factor": 2.0}, ["rope.scaling.type one of none, linear, yarn", "'longrope'"]),
        ({"type": "yarn", "factor": 4.0, "attn_factor": 0.5}, ["attn_factor at its neutral value 1", "0.5"]),
        ({"type": "linear", "factor": 2.0, "mystery": 1.0}, ["keys that are read", "rope.scaling.mystery"]),
        ({"type": "yarn"}, ["rope.scaling.factor for yarn scaling", "no such key"]),
    ],
    ids=["longrope", "attn-factor", "unknown-key", "no-factor"],
)
def test_unread_scaling_is_one_line(tmp_path, capsys, scaling, fragments):
    path = write_rope(tmp_path / "scaling.gguf", scaling=scaling)
    _refused(path, capsys, *fragments)


def llama_cpp_rope_freqs(dim: int, base: float, factor: float, low: float, high: float, old: int) -> np.ndarray:
    """``rope_freqs.weight`` as llama.cpp's convert_hf_to_gguf.py writes it for a llama3 rope_scaling."""
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, np.float32)


def write_llama3(path: Path, factors: np.ndarray, *, theta: float = 500000.0, scaling: dict | None = None) -> Path:
    """A Llama-3.1-style GGUF: head_dim 64, llama3 scaling stored as rope_freqs.weight only."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(128)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_block_count(1)
    w.add_rope_dimension_count(64)
    w.add_rope_freq_base(theta)
    if scaling:
        w.add_rope_scaling_type(gguf.RopeScalingType(scaling["type"]))
        w.add_rope_scaling_factor(scaling["factor"])
    _tokenizer(w, "llama")
    w.add_tensor("rope_freqs.weight", factors)
    _finish(w)
    return path


@pytest.mark.parametrize("factor,high,old", [(8.0, 4.0, 512), (32.0, 4.0, 1024), (4.0, 2.5, 300)])
def test_rope_freqs_read_as_llama3_like_transformers(tmp_path, factor, high, old):
    """Llama 3.x GGUFs hold llama3 scaling as rope_freqs.weight; transformers' loader ignores that tensor."""
    path = write_llama3(tmp_path / "llama3.gguf", llama_cpp_rope_freqs(64, 500000.0, factor, 1.0, high, old))
    ours = inspect_source(path).mechanisms[0].rope
    loaded = transformers_config(path)
    assert loaded.rope_parameters == {"rope_theta": 500000.0, "rope_type": "default"}  # dropped there
    params = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": high}
    params["original_max_position_embeddings"] = old
    reference = LlamaConfig(**{**loaded.to_dict(), "rope_parameters": {"rope_theta": 500000.0, **params}})
    inv_hf, scale_hf = hf_inv_freq(reference)
    inv, scale = rope_inverse_frequencies(ours)
    np.testing.assert_allclose(inv, inv_hf, rtol=1e-5, atol=0)
    assert scale == scale_hf == 1.0
    assert ours.rope_type == "llama3" and ours.factor == factor and ours.low_freq_factor == 1.0
    assert ours.high_freq_factor == pytest.approx(high, rel=1e-5)
    assert ours.original_max_position_embeddings == old and ours.limit == max(4096, int(factor * old))


@pytest.mark.parametrize(
    "factors,scaling,fragments",
    [
        (np.full(32, 2.0, np.float32), None, ["at least two dims between 1 and the largest"]),
        (np.linspace(1, 3, 32).astype(np.float32)[::-1].copy(), None, ["llama3 frequency factors"]),
        (np.ones(16, np.float32), None, ["32 finite frequency factors >= 1", "16 values"]),
        (np.full(32, 0.5, np.float32), None, ["finite frequency factors >= 1"]),
        (np.ones(32, np.float32), {"type": "linear", "factor": 2.0}, ["rope_freqs.weight and llama.rope.scaling"]),
    ],
    ids=["no-medium-dims", "not-llama3", "wrong-length", "below-one", "with-metadata-scaling"],
)
def test_rope_freqs_that_are_not_llama3_are_refused(tmp_path, capsys, factors, scaling, fragments):
    _refused(write_llama3(tmp_path / "odd.gguf", factors, scaling=scaling), capsys, "rope_freqs.weight", *fragments)


@pytest.mark.parametrize("dim,scale", [(15, 1.01), (16, 0.995), (17, 1.003)])
def test_rope_freqs_one_medium_factor_off_is_refused_by_the_reproduction_check(tmp_path, capsys, dim, scale):
    """Llama 3.1's factors (llama.cpp's converter) with ONE medium factor moved by under 1%: every
    earlier check passes (finite, >= 1, medium dims to fit, a positive fit) and the fit is close,
    but no llama3 scaling divides every frequency by these factors: only the final reproduction
    check (1e-5) refuses them."""
    factors = llama_cpp_rope_freqs(64, 500000.0, 8.0, 1.0, 4.0, 8192)
    medium = np.flatnonzero((factors > 1 + 1e-5) & (factors < 8.0 * (1 - 1e-5)))
    assert dim in medium and len(medium) >= 3  # a medium dim, with enough others to fit
    factors = factors.copy()
    factors[dim] *= np.float32(scale)
    _refused(write_llama3(tmp_path / "off.gguf", factors), capsys, "rope_freqs.weight", "llama3 frequency factors")


def test_all_ones_rope_freqs_is_no_scaling(tmp_path):
    ours = inspect_source(write_llama3(tmp_path / "ones.gguf", np.ones(32, np.float32))).mechanisms[0].rope
    assert ours.rope_type == "default" and ours.limit == 4096


def test_longrope_factor_tensors_are_refused(tmp_path, capsys):
    path = write_rope(tmp_path / "long.gguf", extra={"rope_factors_long.weight": np.ones(8, np.float32)})
    _refused(path, capsys, "rope_factors_long.weight", "not read")


def test_not_a_gguf_and_not_a_file(tmp_path, capsys):
    path = tmp_path / "text.gguf"
    path.write_bytes(b"this is not a gguf file at all, just text")
    _refused(path, capsys, "magic bytes 'GGUF'")
    with pytest.raises(CheckpointError) as e:
        load_position_table(tmp_path / "absent.gguf")  # never mistaken for a Hub id
    one_line(e, "absent.gguf", "no such file")
    (tmp_path / "dir.gguf").mkdir()
    with pytest.raises(CheckpointError) as e:
        inspect_source(tmp_path / "dir.gguf")
    one_line(e, "a directory")


def test_family_and_rope_mismatches(tmp_path):
    with pytest.raises(CheckpointError) as e:
        load_position_table(write_gpt2(tmp_path / "gpt2.gguf"), family="bert")
    one_line(e, "family='gpt2'", "family='bert'")
    with pytest.raises(CheckpointError) as e:
        load_position_table(write_rope(tmp_path / "llama.gguf"))
    one_line(e, "learned position table", "llama (RoPE: no table)")


def test_gguf_is_imported_only_to_read_a_gguf_and_pulls_in_no_framework(tmp_path):
    llama, gpt2 = write_rope(tmp_path / "llama.gguf"), write_gpt2(tmp_path / "gpt2.gguf", Q.Q8_0)
    code = textwrap.dedent(
        f"""
        import sys
        import flax_posenc, flax_posenc.conversion as c
        before = "gguf" in sys.modules
        assert c.inspect_source({str(llama)!r}).limit == {CONTEXT}
        assert c.load_position_table({str(gpt2)!r}).num_positions == 64
        heavy = sorted(m for m in ("jax", "torch", "transformers", "flax") if m in sys.modules)
        print("BEFORE", before, "HEAVY", heavy)
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "BEFORE False HEAVY []" in run.stdout, run.stdout


@pytest.fixture(scope="module")
def valid_files(tmp_path_factory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("valid")
    return {
        "gpt2": write_gpt2(d / "gpt2.gguf", Q.Q8_0).read_bytes(),
        "llama": write_rope(d / "llama.gguf", scaling={"type": "yarn", "factor": 4.0}).read_bytes(),
        "llama3": write_llama3(d / "llama3.gguf", llama_cpp_rope_freqs(64, 5e5, 8.0, 1.0, 4.0, 512)).read_bytes(),
    }


@given(data=st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_corrupted_files_raise_only_checkpoint_error(valid_files, tmp_path, data):
    """Byte flips and cuts anywhere in a valid file: a record or one CheckpointError line, nothing else."""
    raw = bytearray(valid_files[data.draw(st.sampled_from(sorted(valid_files)))])
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))] if data.draw(st.booleans()) else raw
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(bytes(raw))
    try:
        record = inspect_source(path)
    except CheckpointError as e:
        assert "\n" not in str(e) and str(path) in str(e)
    else:
        assert record.limit is None or record.limit > 0


def test_gguf_read_benchmark_runs_small():
    root = Path(__file__).resolve().parents[1]
    cmd = [
        sys.executable,
        str(root / "benchmarks" / "gguf_read.py"),
        "--vocab",
        "64",
        "--merges",
        "64",
        "--repeats",
        "1",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "| gguf.GGUFReader(path) |" in run.stdout and "| inspect_source(path) |" in run.stdout


def test_metadata_reads_never_open_gguf_reader(tmp_path, monkeypatch):
    """inspect, check and rope_for_layer read the bounded scan only (GGUFReader parses every array)."""
    llama3 = write_llama3(tmp_path / "llama3.gguf", llama_cpp_rope_freqs(64, 5e5, 8.0, 1.0, 4.0, 512))
    gpt2 = write_gpt2(tmp_path / "gpt2.gguf", Q.Q8_0)
    expected = (inspect_source(llama3).to_dict(), rope_for_layer(llama3, 0), inspect_source(gpt2).to_dict())

    def refuse(*args, **kwargs):
        raise AssertionError("gguf.GGUFReader opened")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    assert (inspect_source(llama3).to_dict(), rope_for_layer(llama3, 0), inspect_source(gpt2).to_dict()) == expected
    assert load_position_table(gpt2).weights.shape == (64, 32)


def test_half_a_million_empty_strings_read_in_bounded_memory(tmp_path):
    """Issue 34's file: 3.8 MB, one metadata array of 500,000 empty strings (GGUFReader: 822 MiB peak)."""
    path = tmp_path / "empty-strings.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_head_count(HEADS)
    w.add_array("tokenizer.ggml.tokens", [""] * 500_000)
    w.add_tensor("token_embd.weight", np.zeros((VOCAB, HIDDEN), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert 3.5e6 < path.stat().st_size < 4.5e6
    tracemalloc.start()
    try:
        record = inspect_source(path)
        rope = rope_for_layer(path, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert record.limit == CONTEXT and rope.limit == CONTEXT
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert open_gguf(path).header.metadata["tokenizer.ggml.tokens"] == ("array", 8, 500_000)


@pytest.mark.parametrize("at", [0, 1, 499_999])
def test_a_lying_string_length_inside_a_skipped_array_is_one_line(tmp_path, capsys, at):
    """The string array is stepped over by its length prefixes: a prefix past the end of the file
    (or past MAX_STRING_BYTES) is one line naming the item, with nothing allocated for it."""
    path = tmp_path / "lying.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_head_count(HEADS)
    w.add_array("tokenizer.ggml.tokens", [""] * 500_000)
    _finish_unchecked(w)
    raw = bytearray(path.read_bytes())
    first = raw.index(struct.pack("<IQ", 8, 500_000)) + 12  # item type (string), count, then the items
    struct.pack_into("<Q", raw, first + 8 * at, 2**40 if at else 2**27)
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError) as e:
        inspect_source(path)
    one_line(e, str(path), f"'tokenizer.ggml.tokens'[{at}]")
