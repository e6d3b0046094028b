"""Where a table can come from: directory, single file, shards, .bin, dtypes, Hub cache, sinusoid."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from helpers import sinusoid

from flax_posenc.conversion import CheckpointError, load_input_block, load_position_table, sources
from flax_posenc.conversion.readers import ShardedReader, bf16_bits_to_float32, float32_to_bf16_bits
from flax_posenc.conversion.sources import open_checkpoint


def test_directory_and_single_file_agree(tiny_checkpoint):
    ck = tiny_checkpoint("gpt2", head=True)
    a = load_position_table(ck.path)
    b = load_position_table(ck.path / "model.safetensors")  # config.json beside it is used
    c = load_position_table(str(ck.path))
    for t in (a, b, c):
        np.testing.assert_array_equal(t.weights, ck.position_weight())
        assert t.key == "transformer.wpe.weight" and t.num_positions == 32
    assert a.config["n_positions"] == 32


def test_sharded_checkpoint_opens_only_the_needed_shard(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("gpt2", head=True)
    out = tmp_path / "sharded"
    ck.model.save_pretrained(out, max_shard_size="5KB")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 2
    table_shard = index["weight_map"]["transformer.wpe.weight"]
    # poison every other shard: loading the table must not touch them
    for name in shards - {table_shard}:
        (out / name).write_bytes(b"not a safetensors file")
    t = load_position_table(out)
    np.testing.assert_array_equal(t.weights, ck.position_weight())
    ckpt = open_checkpoint(out)
    assert isinstance(ckpt.reader, ShardedReader)
    ckpt.reader.read("transformer.wpe.weight")
    assert ckpt.reader.opened_shards == [table_shard]


def test_sharded_input_block(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("bert", head=True)
    out = tmp_path / "sharded"
    ck.model.save_pretrained(out, max_shard_size="3KB")
    assert (out / "model.safetensors.index.json").is_file()
    block = load_input_block(out)
    want = ck.module("embeddings.word_embeddings").weight.detach().numpy()
    np.testing.assert_array_equal(block.word_embeddings, want)


def test_pytorch_bin_checkpoint(tiny_bin_checkpoint):
    ck = tiny_bin_checkpoint
    t = load_position_table(ck.path)
    np.testing.assert_array_equal(t.weights, ck.position_weight())
    block = load_input_block(ck.path / "pytorch_model.bin")
    assert block.token_type_embeddings.shape == (3, 16)


def test_legacy_non_zip_bin_loads_weights_only(tiny_checkpoint, tmp_path):
    import torch

    ck = tiny_checkpoint("gpt2")
    ck.model.config.save_pretrained(tmp_path)
    torch.save(ck.model.state_dict(), tmp_path / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    np.testing.assert_array_equal(load_position_table(tmp_path).weights, ck.position_weight())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_checkpoints(tiny_checkpoint, tmp_path, dtype):
    import torch

    ck = tiny_checkpoint("bert")
    model = type(ck.model)(ck.model.config)
    model.load_state_dict(ck.model.state_dict())
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(tmp_path)
    t = load_position_table(tmp_path)
    want = model.embeddings.position_embeddings.weight.detach()
    # bfloat16 is upcast exactly to float32; float16 stays float16
    assert t.dtype == (np.float32 if dtype == "bfloat16" else np.float16)
    np.testing.assert_array_equal(t.weights.astype(np.float32), want.float().numpy())
    block = load_input_block(tmp_path)
    np.testing.assert_array_equal(
        block.layer_norm_scale.astype(np.float32), model.embeddings.LayerNorm.weight.detach().float().numpy()
    )


def test_bf16_helpers_round_trip():
    x = np.array([1.0, -2.5, 3.14159, 1e-30, 65504.0, 1.00390625], np.float32)
    bits = float32_to_bf16_bits(x)
    import torch

    assert (bits.view(np.int16) == torch.from_numpy(x).bfloat16().view(torch.int16).numpy()).all()
    np.testing.assert_array_equal(bf16_bits_to_float32(bits), torch.from_numpy(x).bfloat16().float().numpy())


def test_sinusoidal_source():
    t = load_position_table("sinusoidal:64:16")
    assert (t.family, t.key, t.offset, t.rows, t.dim, t.num_positions) == ("sinusoidal", "sinusoidal", 0, 64, 16, 64)
    assert t.dtype == np.float32
    np.testing.assert_allclose(t.weights, sinusoid(64, 16), atol=1e-7, rtol=0)


@pytest.mark.parametrize("spec", ["sinusoidal:abc:4", "sinusoidal:4", "sinusoidal:4:3", "sinusoidal:0:4"])
def test_bad_sinusoidal_specs(spec):
    with pytest.raises(CheckpointError, match="sinusoidal") as e:
        load_position_table(spec)
    assert "\n" not in str(e.value)


def test_hub_id_from_local_cache_while_offline(tiny_checkpoint, fake_hub_cache, tmp_path, monkeypatch):
    ck = tiny_checkpoint("gpt2", head=True)
    fake_hub_cache(tmp_path, "local-org/tiny-gpt2", [ck.path / "config.json", ck.path / "model.safetensors"])
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = load_position_table("local-org/tiny-gpt2")
    np.testing.assert_array_equal(t.weights, ck.position_weight())
    assert t.source == "local-org/tiny-gpt2"


def test_hub_id_downloads_when_online_and_not_cached(tiny_checkpoint, tmp_path, monkeypatch):
    from flax_posenc.conversion import hub_download

    ck = tiny_checkpoint("gpt2")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    fetched = []

    def fake_download(
        repo_id, filename, storage, **kw
    ):  # stands in for the network (tests/test_hub_config.py: real HTTP)
        fetched.append(filename)
        src = ck.path / filename
        if not src.is_file():
            return None  # the repository has no such file
        # as the real download: a file inside cache_dir/models--org--name/snapshots/REV/
        dst = Path(storage) / "snapshots" / ("0" * 40) / filename
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
        return dst

    monkeypatch.setattr(hub_download, "download", fake_download)
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout=3.0: None)  # the network, faked above
    t = load_position_table("someone/tiny")
    np.testing.assert_array_equal(t.weights, ck.position_weight())
    assert fetched == ["config.json", "model.safetensors"]


def test_full_size_gpt2_limit_is_1024(gpt2_full_size):
    t = load_position_table(gpt2_full_size.path)
    assert (t.family, t.key, t.rows, t.dim, t.offset, t.num_positions) == ("gpt2", "wpe.weight", 1024, 768, 0, 1024)
    np.testing.assert_array_equal(t.weights, gpt2_full_size.wpe)
    assert t.config["n_positions"] == 1024


def test_loading_the_table_does_not_read_the_whole_file(gpt2_full_size):
    load_position_table(gpt2_full_size.path)  # warm imports
    tracemalloc.start()
    try:
        t = load_position_table(gpt2_full_size.path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    table_bytes = t.weights.nbytes  # 3 MiB
    assert gpt2_full_size.file_size > 40 * table_bytes
    assert peak < 3 * table_bytes, (peak, table_bytes, gpt2_full_size.file_size)
