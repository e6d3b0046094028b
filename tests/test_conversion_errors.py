"""Bad input: each case is one CheckpointError line naming the file, what was expected, what was found."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from flax_posenc.conversion import CheckpointError, load_input_block, load_position_table


def _copy(ck, tmp_path, name="ckpt"):
    dst = tmp_path / name
    shutil.copytree(ck.path, dst)
    return dst


def _edit_tensors(path, fn):
    tensors = load_file(path)
    fn(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _raises(*patterns, fn, **kwargs):
    """Call fn(**kwargs); the CheckpointError must be one line containing every pattern."""
    with pytest.raises(CheckpointError) as e:
        fn(**kwargs)
    msg = str(e.value)
    assert "\n" not in msg, msg
    for p in patterns:
        assert p in msg, (p, msg)
    return msg


def test_missing_path(tmp_path):
    msg = _raises(fn=load_position_table, source=tmp_path / "nope")
    assert msg == (
        f"{tmp_path / 'nope'}: expected a checkpoint directory, a .safetensors/.bin file, a Hub model id "
        "or sinusoidal:LENGTH:DIM, found no such file or directory"
    )
    _raises("nope.safetensors", "no such file", fn=load_position_table, source=str(tmp_path / "nope.safetensors"))


def test_directory_without_config(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint("gpt2"), tmp_path)
    (d / "config.json").unlink()
    _raises(str(d), "expected config.json", "model.safetensors", fn=load_position_table, source=d)
    # with the family named, the directory is usable
    assert load_position_table(d, family="gpt2").num_positions == 32


def test_directory_without_weights(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint("gpt2"), tmp_path)
    (d / "model.safetensors").unlink()
    (d / "notes.txt").write_text("hi")
    _raises(str(d), "expected weights", "model.safetensors", "config.json, notes.txt", fn=load_position_table, source=d)


def _truncation_line(f, data: bytes, cut: int) -> str:
    """The exact line for ``data[:cut]``, worked out from the safetensors layout (8-byte little-endian
    header length, JSON header, data), not from the loader."""
    kept = len(data[:cut])
    if kept < 8:
        return f"{f}: expected a safetensors file (8-byte header length, JSON header, data), found only {kept} bytes"
    n = int.from_bytes(data[:8], "little")
    if 8 + n > kept:
        return (
            f"{f}: expected a safetensors header of at most {kept - 8} bytes (truncated or not a safetensors "
            f"file?), found a declared header length of {n}"
        )
    header = json.loads(data[8 : 8 + n])
    data_bytes = kept - 8 - n
    ((name, (start, end)),) = [
        (k, v["data_offsets"]) for k, v in header.items() if k != "__metadata__" and v["data_offsets"][1] > data_bytes
    ]
    return (
        f"{f}: expected {name!r} to occupy {end - start} bytes inside the {data_bytes} data bytes "
        f"(truncated file?), found data_offsets [{start}, {end}]"
    )


@pytest.mark.parametrize("cut", [0, 4, 9, 100, -16])
def test_truncated_safetensors(tiny_checkpoint, tmp_path, cut):
    d = _copy(tiny_checkpoint("bert"), tmp_path)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:cut])
    assert _raises(fn=load_position_table, source=d) == _truncation_line(f, data, cut)


def test_corrupted_header(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint("bert"), tmp_path)
    f = d / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[8:20] = b"\xff" * 12  # the JSON header is now garbage
    f.write_bytes(bytes(data))
    _raises(str(f), "JSON", fn=load_position_table, source=d)


def test_unknown_family(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint("gpt2"), tmp_path)
    _edit_config(d, model_type="llama")
    _raises(
        "config.json",
        "model_type='llama'",
        "gpt2, gpt_neo, bert, roberta",
        "opt, bart",
        fn=load_position_table,
        source=d,
    )
    _raises("family='t5'", "gpt2, gpt_neo", fn=load_position_table, source=d, family="t5")


def test_table_key_absent_shows_nearest(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("gpt2", head=True)
    msg = _raises(
        "model.safetensors",
        "'transformer.wpe.weights'",
        "nearest keys",
        "'transformer.wpe.weight'",
        fn=load_position_table,
        source=ck.path,
        key="transformer.wpe.weights",
    )
    assert "expected the table key" in msg
    # a config that says gpt2 over BERT tensors
    d = _copy(tiny_checkpoint("bert"), tmp_path)
    _edit_config(d, model_type="gpt2")
    _raises("config.json", "'wpe.weight'", "nearest keys", fn=load_position_table, source=d)


def test_both_layer_norm_spellings(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint("bert"), tmp_path)

    def add_gamma(t):
        t["embeddings.LayerNorm.gamma"] = t["embeddings.LayerNorm.weight"].copy()
        t["embeddings.LayerNorm.beta"] = t["embeddings.LayerNorm.bias"].copy()

    _edit_tensors(d / "model.safetensors", add_gamma)
    _raises(
        "model.safetensors",
        "one LayerNorm spelling",
        "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.gamma",
        fn=load_input_block,
        source=d,
    )


def test_gamma_beta_spelling_alone_is_fine(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("bert")
    d = _copy(ck, tmp_path)

    def rename(t):
        t["embeddings.LayerNorm.gamma"] = t.pop("embeddings.LayerNorm.weight")
        t["embeddings.LayerNorm.beta"] = t.pop("embeddings.LayerNorm.bias")

    _edit_tensors(d / "model.safetensors", rename)
    block = load_input_block(d)
    np.testing.assert_array_equal(block.layer_norm_scale, ck.module("embeddings.LayerNorm").weight.detach().numpy())


@pytest.mark.parametrize(
    "family,field,value",
    [
        ("gpt2", "n_positions", 64),
        ("bert", "max_position_embeddings", 31),
        ("roberta", "max_position_embeddings", 32),
        ("opt", "max_position_embeddings", 34),
    ],
)
def test_config_length_disagrees_with_rows(tiny_checkpoint, tmp_path, family, field, value):
    d = _copy(tiny_checkpoint(family), tmp_path)
    _edit_config(d, **{field: value})
    _raises("config.json", f"found {field}={value}", "rows", "expected", fn=load_position_table, source=d)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_table_with_nan_or_inf(tiny_checkpoint, tmp_path, bad):
    d = _copy(tiny_checkpoint("gpt2"), tmp_path)

    def poison(t):
        t["wpe.weight"][3, 5] = bad

    _edit_tensors(d / "model.safetensors", poison)
    _raises("model.safetensors:wpe.weight", "finite", "1 NaN/Inf", fn=load_position_table, source=d)


def test_wrong_dtype_and_rank(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint("gpt2"), tmp_path)
    _edit_tensors(d / "model.safetensors", lambda t: t.update({"wpe.weight": np.arange(32 * 16).reshape(32, 16)}))
    _raises("wpe.weight", "dtype I64", fn=load_position_table, source=d)
    _edit_tensors(d / "model.safetensors", lambda t: t.update({"wpe.weight": np.zeros(32, np.float32)}))
    _raises("wpe.weight", "2-D", "shape (32,)", fn=load_position_table, source=d)


def test_bin_without_torch(tiny_bin_checkpoint, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    _raises(
        "pytorch_model.bin",
        "pip install 'flax-posenc[torch]'",
        "torch is not installed",
        fn=load_position_table,
        source=tiny_bin_checkpoint.path,
    )


class _RunsCode:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("how", ["torch.save", "raw pickle"])
def test_malicious_pickle_is_refused(tiny_checkpoint, tmp_path, how):
    import torch

    marker = tmp_path / "pwned"
    d = tmp_path / "evil"
    d.mkdir()
    tiny_checkpoint("gpt2").model.config.save_pretrained(d)
    payload = {"wpe.weight": _RunsCode(marker)}
    if how == "torch.save":
        torch.save(payload, d / "pytorch_model.bin")
    else:
        with open(d / "pytorch_model.bin", "wb") as f:
            pickle.dump(payload, f)
    assert not marker.exists()
    _raises(
        "pytorch_model.bin",
        "refused",
        "posix.system" if how == "torch.save" else "expected",
        fn=load_position_table,
        source=d,
    )
    assert not marker.exists()
    # control: the planted file really runs code when unpickled unsafely
    if how == "torch.save":
        torch.load(d / "pytorch_model.bin", weights_only=False)
    else:
        with open(d / "pytorch_model.bin", "rb") as f:
            pickle.load(f)
    assert marker.exists()


def test_bin_holding_something_else_than_a_state_dict(tmp_path, tiny_checkpoint):
    import torch

    d = tmp_path / "odd"
    d.mkdir()
    tiny_checkpoint("gpt2").model.config.save_pretrained(d)
    torch.save([torch.zeros(2)], d / "pytorch_model.bin")
    _raises("pytorch_model.bin", "flat state dict", "list", fn=load_position_table, source=d)


def test_model_id_not_cached_while_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    msg = _raises(
        "openai-community/gpt2",
        "HF_HUB_OFFLINE=1",
        "local cache",
        str(tmp_path),
        fn=load_position_table,
        source="openai-community/gpt2",
    )
    assert "no cached" in msg


def test_input_block_of_a_sinusoid_is_refused():
    _raises("sinusoidal:8:4", "input block", fn=load_input_block, source="sinusoidal:8:4")


def test_not_a_weights_file(tmp_path):
    f = tmp_path / "weights.npz"
    f.write_bytes(b"xx")
    _raises("weights.npz", ".safetensors", fn=load_position_table, source=f)
