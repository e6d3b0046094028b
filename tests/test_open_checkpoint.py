"""flax_posenc.conversion.open_checkpoint: the public checkpoint reader, as users call it.

References: the arrays written into the files by the test itself (numpy, torch), and for the real
all-MiniLM-L6-v2 the ``safetensors`` package's own reader.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import save_file
from safetensors.torch import save_file as save_torch_file

from flax_posenc.conversion import CheckpointReader, open_checkpoint
from flax_posenc.errors import CheckpointError

RNG = np.random.default_rng(0)
TENSORS = {
    "wpe.weight": RNG.normal(size=(8, 4)).astype(np.float32),
    "h.0.ln.bias": RNG.normal(size=(4,)).astype(np.float16),
    "h.0.attn.weight": RNG.normal(size=(4, 4)),  # float64
    "position_ids": np.arange(8, dtype=np.int64)[None],
}
CONFIG = {"model_type": "gpt2", "n_positions": 8, "n_embd": 4}


def write_checkpoint(path, tensors=TENSORS, config=CONFIG):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(dict(tensors), str(path / "model.safetensors"))
    return path


def one_line_error(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and text.strip() == text
    return text


def test_directory_config_names_info_and_every_tensor(tmp_path):
    ckpt = write_checkpoint(tmp_path / "ckpt")
    with open_checkpoint(ckpt) as reader:
        assert isinstance(reader, CheckpointReader)
        assert reader.config == CONFIG and reader.config_path == ckpt / "config.json"
        assert reader.weights_path == ckpt / "model.safetensors"
        assert sorted(reader.names) == sorted(TENSORS) == sorted(reader.keys()) and len(reader) == 4
        assert "wpe.weight" in reader and "nope" not in reader
        assert reader.info("h.0.ln.bias") == ("F16", (4,))
        for name, value in TENSORS.items():
            got = reader.tensor(name)
            assert got.dtype == value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got, value)


def test_bfloat16_comes_back_as_the_exact_float32(tmp_path):
    ckpt = tmp_path / "bf16"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    value = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    save_torch_file({"w": value}, str(ckpt / "model.safetensors"))
    reader = open_checkpoint(ckpt)
    assert reader.info("w") == ("BF16", (5, 3))
    got = reader.tensor("w")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, value.float().numpy())


def test_sharded_checkpoint_and_torch_bin_read_alike(tmp_path):
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text(json.dumps(CONFIG))
    names = list(TENSORS)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for shard, held in shards.items():
        save_file({n: TENSORS[n] for n in held}, str(sharded / shard))
    weight_map = {n: shard for shard, held in shards.items() for n in held}
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    binary = tmp_path / "bin"
    binary.mkdir()
    (binary / "config.json").write_text(json.dumps(CONFIG))
    torch.save({n: torch.from_numpy(v) for n, v in TENSORS.items()}, binary / "pytorch_model.bin")
    for ckpt in (sharded, binary):
        reader = open_checkpoint(ckpt)
        assert reader.config == CONFIG and sorted(reader.names) == sorted(TENSORS)
        for name, value in TENSORS.items():
            np.testing.assert_array_equal(reader.tensor(name), value)
            assert reader.tensor(name).dtype == value.dtype


def test_a_bare_weights_file_and_a_hub_id_from_the_cache(tmp_path, monkeypatch, fake_hub_cache):
    ckpt = write_checkpoint(tmp_path / "ckpt")
    bare = tmp_path / "alone"
    bare.mkdir()
    save_file(dict(TENSORS), str(bare / "weights.safetensors"))
    reader = open_checkpoint(bare / "weights.safetensors")
    assert reader.config == {} and reader.config_path is None
    np.testing.assert_array_equal(reader.tensor("wpe.weight"), TENSORS["wpe.weight"])
    beside = open_checkpoint(str(ckpt / "model.safetensors"))  # config.json beside it is read
    assert beside.config == CONFIG
    hf_home = tmp_path / "hf"
    fake_hub_cache(hf_home, "org/tiny", [ckpt / "config.json", ckpt / "model.safetensors"])
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    hub = open_checkpoint("org/tiny")
    assert hub.config == CONFIG
    np.testing.assert_array_equal(hub.tensor("h.0.attn.weight"), TENSORS["h.0.attn.weight"])


def test_the_real_minilm_equals_the_safetensors_package(minilm_dir):
    reader = open_checkpoint(minilm_dir)
    assert reader.config["model_type"] == "bert" and reader.config["max_position_embeddings"] == 512
    with safe_open(str(minilm_dir / "model.safetensors"), framework="np") as f:
        assert sorted(f.keys()) == sorted(reader.names)
        for name in ("embeddings.position_embeddings.weight", "encoder.layer.5.output.LayerNorm.bias"):
            np.testing.assert_array_equal(reader.tensor(name), f.get_tensor(name))


def test_a_missing_tensor_is_one_line_naming_the_file_and_the_name(tmp_path):
    ckpt = write_checkpoint(tmp_path / "ckpt")
    reader = open_checkpoint(ckpt)
    for call in (reader.tensor, reader.info):
        with pytest.raises(CheckpointError) as excinfo:
            call("wpe.weights")
        line = one_line_error(excinfo)
        assert line.startswith(f"{ckpt / 'model.safetensors'}: expected tensor 'wpe.weights' (one of")
        assert "one of its 4 tensors; close: wpe.weight" in line and line.endswith("found no such tensor")
    with pytest.raises(CheckpointError, match=r"tensor name: expected a str, found int 3"):
        reader.tensor(3)


def test_a_closed_reader_refuses_with_one_line(tmp_path):
    with open_checkpoint(write_checkpoint(tmp_path / "ckpt")) as reader:
        reader.tensor("wpe.weight")
    with pytest.raises(CheckpointError, match="expected an open checkpoint reader, found one already closed"):
        reader.tensor("wpe.weight")


def test_what_is_not_a_checkpoint_is_one_line(tmp_path):
    empty = tmp_path / "notes"
    empty.mkdir()
    (empty / "README.md").write_text("hello")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "config.json").write_text("{}")
    (garbage / "model.safetensors").write_bytes(b"not a safetensors file at all")
    no_config = tmp_path / "no-config"
    no_config.mkdir()
    save_file({"w": np.zeros(2, np.float32)}, str(no_config / "model.safetensors"))
    cases = [
        (empty, f"{empty}: expected config.json (Hugging Face layout"),
        (garbage / "model.safetensors", "expected a safetensors header of at most"),
        (no_config, f"{no_config}: expected config.json (Hugging Face layout"),
        (tmp_path / "missing", "expected a checkpoint directory, a .safetensors/.bin file, a Hub model id"),
        (tmp_path / "notes" / "README.md", "expected a .safetensors, .bin or *.index.json weights file"),
        ("sinusoidal:8:4", "found a computed sinusoid (no tensors to read"),
    ]
    for source, expected in cases:
        with pytest.raises(CheckpointError) as excinfo:
            open_checkpoint(source)
        assert expected in one_line_error(excinfo), (source, str(excinfo.value))
    assert open_checkpoint(no_config, require_config=False).config == {}  # weights alone, when asked
    with pytest.raises(CheckpointError) as excinfo:
        open_checkpoint(empty, require_config=False)
    assert one_line_error(excinfo).startswith(f"{empty}: expected weights (model.safetensors or")


def test_nothing_outside_the_checkpoint_is_read(tmp_path):
    outside = write_checkpoint(tmp_path / "elsewhere")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "config.json").write_text(json.dumps(CONFIG))
    os.symlink(outside / "model.safetensors", linked / "model.safetensors")
    escaping = tmp_path / "escaping"
    escaping.mkdir()
    (escaping / "config.json").write_text(json.dumps(CONFIG))
    (escaping / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"wpe.weight": "../elsewhere/model.safetensors"}})
    )
    shard_link = tmp_path / "shard-link"
    shard_link.mkdir()
    (shard_link / "config.json").write_text(json.dumps(CONFIG))
    (shard_link / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"wpe.weight": "model-1.safetensors"}})
    )
    os.symlink(outside / "model.safetensors", shard_link / "model-1.safetensors")
    with pytest.raises(CheckpointError) as excinfo:
        open_checkpoint(linked)
    assert "the weights file" in one_line_error(excinfo) and "outside" in str(excinfo.value)
    with pytest.raises(CheckpointError) as excinfo:
        open_checkpoint(escaping)
    assert "'../elsewhere/model.safetensors'" in one_line_error(excinfo)
    reader = open_checkpoint(shard_link)  # the index is inside; its shard is refused when read
    with pytest.raises(CheckpointError) as excinfo:
        reader.tensor("wpe.weight")
    assert "shard 'model-1.safetensors'" in one_line_error(excinfo) and "outside" in str(excinfo.value)
