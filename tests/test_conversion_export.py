"""Round trips: load -> modify -> export -> reload here and in transformers; atomic, refuses to clobber."""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from flax_posenc.conversion import CheckpointError, export_position_table, load_position_table
from flax_posenc.conversion.outputs import EXPORT_FORMAT, EXPORT_MARKER
from flax_posenc.conversion.readers import read_safetensors_header


def _extend(weights: np.ndarray, extra: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate([weights, rng.normal(size=(extra, weights.shape[1])).astype(weights.dtype)])


def _files(root):
    return {p.relative_to(root): p for p in root.rglob("*") if p.is_file()}


def _assert_rest_unchanged(src, out, table_key, table_file="model.safetensors"):
    """Every other file byte-identical (bar config and index); in the table's file every other tensor too."""
    a, b = _files(src), _files(out)
    marker = json.loads((out / EXPORT_MARKER).read_text())  # the one file added: flax-posenc's mark
    assert marker["format"] == EXPORT_FORMAT and marker["table"] == table_key
    assert set(a) == set(b) - {Path(EXPORT_MARKER)}
    for rel in a:
        if rel.name in ("config.json", "model.safetensors.index.json", table_file):
            continue
        assert a[rel].read_bytes() == b[rel].read_bytes(), rel
    if table_file.endswith(".safetensors"):
        rel = next(r for r in a if r.name == table_file)
        old, new = load_file(a[rel]), load_file(b[rel])
        assert set(old) == set(new)
        for k in old:
            if k != table_key:
                assert old[k].dtype == new[k].dtype and old[k].tobytes() == new[k].tobytes(), k
        with safe_open(b[rel], "numpy") as f:
            assert f.metadata() == {"format": "pt"}


def _hf_load(path, cls_name="AutoModel"):
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    model, info = getattr(transformers, cls_name).from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


@pytest.mark.parametrize(
    "family,extra",
    [
        ("gpt2", 16),
        ("roberta", 6),
        ("opt", 6),
        ("bert", 8),
        ("gpt_neo", 4),
        ("distilbert", 4),
        ("electra", 4),
        ("mpnet", 4),
        ("xlm-roberta", 4),
    ],
)
def test_round_trip_tiny(tiny_checkpoint, tmp_path, family, extra):
    import torch

    ck = tiny_checkpoint(family)
    t = load_position_table(ck.path)
    new = _extend(t.weights, extra)
    out = export_position_table(ck.path, new, tmp_path / "out")
    assert out == (tmp_path / "out").absolute()
    back = load_position_table(out)
    np.testing.assert_array_equal(back.weights, new)
    assert (back.key, back.offset, back.num_positions) == (t.key, t.offset, t.num_positions + extra)
    _assert_rest_unchanged(ck.path, out, t.key)
    cfg = json.loads((out / "config.json").read_text())
    field = "n_positions" if family == "gpt2" else "max_position_embeddings"
    assert cfg[field] == (new.shape[0] - 2 if family == "opt" else new.shape[0])
    # transformers loads it with no missing/unexpected/mismatched key and runs at the new length
    model = _hf_load(out)
    loaded = ck.__class__(out, model, family, ck.position_attr).position_weight()
    np.testing.assert_array_equal(loaded, new)
    n = back.num_positions
    ids = torch.randint(3, 100, (1, n))
    with torch.no_grad():
        hidden = model(input_ids=ids).last_hidden_state
    assert hidden.shape[1] == n and torch.isfinite(hidden).all()


def test_round_trip_real_minilm(minilm_dir, tmp_path):
    import torch

    t = load_position_table(minilm_dir)
    new = _extend(t.weights, 8)  # 520 positions
    out = export_position_table(minilm_dir, new, tmp_path / "minilm-520")
    _assert_rest_unchanged(minilm_dir, out, t.key)
    assert (out / "1_Pooling" / "config.json").is_file()  # sub-folders come along
    back = load_position_table(out)
    assert back.num_positions == 520
    np.testing.assert_array_equal(back.weights, new)
    import transformers

    model, info = transformers.BertModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert t.key not in info["unexpected_keys"]
    np.testing.assert_array_equal(model.embeddings.position_embeddings.weight.detach().numpy(), new)
    with torch.no_grad():
        hidden = model.eval()(input_ids=torch.randint(1000, 2000, (1, 520))).last_hidden_state
    assert hidden.shape == (1, 520, 384)


def test_round_trip_head_model_with_prefix(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("gpt2", head=True)
    t = load_position_table(ck.path)
    new = _extend(t.weights, 4)
    out = export_position_table(ck.path, new, tmp_path / "out")
    model = _hf_load(out, "GPT2LMHeadModel")
    np.testing.assert_array_equal(model.transformer.wpe.weight.detach().numpy(), new)
    _assert_rest_unchanged(ck.path, out, "transformer.wpe.weight")


def test_bart_same_size_round_trip_and_shared_limit(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("bart")
    t = load_position_table(ck.path)
    new = t.weights * 2
    out = export_position_table(ck.path, new, tmp_path / "out")
    model = _hf_load(out)
    np.testing.assert_array_equal(model.encoder.embed_positions.weight.detach().numpy(), new)
    np.testing.assert_array_equal(
        model.decoder.embed_positions.weight.detach().numpy(),
        ck.module("decoder.embed_positions").weight.detach().numpy(),
    )
    with pytest.raises(CheckpointError, match="decoder.embed_positions.weight"):
        export_position_table(ck.path, _extend(t.weights, 2), tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_round_trip_sharded(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("gpt2")
    src = tmp_path / "sharded"
    ck.model.save_pretrained(src, max_shard_size="5KB")
    index = json.loads((src / "model.safetensors.index.json").read_text())
    shard = index["weight_map"]["wpe.weight"]
    t = load_position_table(src)
    new = _extend(t.weights, 8)
    out = export_position_table(src, new, tmp_path / "out")
    _assert_rest_unchanged(src, out, "wpe.weight", table_file=shard)
    new_index = json.loads((out / "model.safetensors.index.json").read_text())
    assert new_index["weight_map"] == index["weight_map"]
    assert new_index["metadata"]["total_size"] == index["metadata"]["total_size"] + new[-8:].nbytes
    np.testing.assert_array_equal(load_position_table(out).weights, new)
    model = _hf_load(out)
    np.testing.assert_array_equal(model.wpe.weight.detach().numpy(), new)


def test_round_trip_bin(tiny_bin_checkpoint, tmp_path):
    ck = tiny_bin_checkpoint
    t = load_position_table(ck.path)
    new = _extend(t.weights, 4)
    out = export_position_table(ck.path, new, tmp_path / "out")
    assert (out / "pytorch_model.bin").is_file() and not (out / "model.safetensors").exists()
    np.testing.assert_array_equal(load_position_table(out).weights, new)
    model = _hf_load(out)
    np.testing.assert_array_equal(model.embeddings.position_embeddings.weight.detach().numpy(), new)


def test_bf16_checkpoint_keeps_its_dtype(tiny_checkpoint, tmp_path):
    import torch

    ck = tiny_checkpoint("gpt2")
    src = tmp_path / "bf16"
    copy.deepcopy(ck.model).to(torch.bfloat16).save_pretrained(src)  # .to() is in place: never on the shared fixture
    t = load_position_table(src)
    new = _extend(t.weights, 4)
    out = export_position_table(src, new, tmp_path / "out")
    header, _ = read_safetensors_header(out / "model.safetensors")
    assert header["wpe.weight"]["dtype"] == "BF16" and header["wpe.weight"]["shape"] == [36, 16]
    want = torch.from_numpy(new).bfloat16().float().numpy()
    np.testing.assert_array_equal(load_position_table(out).weights, want)


def test_existing_target_is_refused_unless_overwrite(tiny_checkpoint, tmp_path):
    ck = tiny_checkpoint("gpt2")
    t = load_position_table(ck.path)
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="already exists") as e:
        export_position_table(ck.path, t.weights, target)
    assert "\n" not in str(e.value) and str(target) in str(e.value)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    # a folder flax-posenc did not write is never replaced, even with overwrite
    with pytest.raises(CheckpointError) as e:
        export_position_table(ck.path, _extend(t.weights, 2), target, overwrite=True)
    assert str(e.value) == (
        f"{target}: expected an extended checkpoint or an orbax input block written by flax-posenc to overwrite, "
        "found a directory not written by flax-posenc (no flax-posenc marker) (left untouched)"
    )
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    # an earlier export is flax-posenc's output: overwrite replaces it
    shutil.rmtree(target)
    export_position_table(ck.path, _extend(t.weights, 1), target)
    export_position_table(ck.path, _extend(t.weights, 2), target, overwrite=True)
    assert load_position_table(target).num_positions == 34
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left behind


@pytest.mark.parametrize("bad", ["nan", "dim", "rank", "int", "rows", "overflow"])
def test_bad_weights_write_nothing(tiny_checkpoint, tmp_path, bad):
    ck = tiny_checkpoint("roberta")
    w = load_position_table(ck.path).weights.copy()
    if bad == "nan":
        w[5, 1] = np.nan
    elif bad == "dim":
        w = w[:, :8]
    elif bad == "rank":
        w = w[0]
    elif bad == "int":
        w = w.astype(np.int64)
    elif bad == "rows":
        w = w[:2]  # only the 2 reserved rows
    elif bad == "overflow":  # float64 values that do not fit the float32 checkpoint
        w = w.astype(np.float64)
        w[0, 0] = 1e300
    target = tmp_path / "deep" / "er" / "out"
    with pytest.raises(CheckpointError) as e:
        export_position_table(ck.path, w, target)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []  # not even the parents


def test_export_needs_a_config(tiny_checkpoint, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(tiny_checkpoint("gpt2").path, src)
    (src / "config.json").unlink()
    w = load_position_table(src / "model.safetensors").weights
    with pytest.raises(CheckpointError, match="config.json"):
        export_position_table(src, w, tmp_path / "out")
    with pytest.raises(CheckpointError, match="directory"):
        export_position_table(src / "model.safetensors", w, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_over_its_own_source_is_refused(tiny_checkpoint, tmp_path):
    """Even an earlier export, used as the source, is not overwritten by its own export."""
    first = export_position_table(
        tiny_checkpoint("bert").path,
        _extend(load_position_table(tiny_checkpoint("bert").path).weights, 1),
        tmp_path / "src",
    )
    t = load_position_table(first)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    with pytest.raises(CheckpointError, match="found a path that is the source"):
        export_position_table(first, _extend(t.weights, 3), first, overwrite=True)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_export_from_a_cached_hub_id_while_offline(tiny_checkpoint, fake_hub_cache, tmp_path, monkeypatch):
    ck = tiny_checkpoint("gpt2")
    fake_hub_cache(tmp_path / "home", "local-org/tiny", [ck.path / "config.json", ck.path / "model.safetensors"])
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = load_position_table("local-org/tiny")
    out = export_position_table("local-org/tiny", _extend(t.weights, 4), tmp_path / "out")
    assert load_position_table(out).num_positions == 36
    assert not any(p.is_symlink() for p in out.iterdir())
    _assert_rest_unchanged(ck.path, out, "wpe.weight")


def test_gpt2_legacy_n_ctx_follows_the_new_length(tiny_checkpoint, tmp_path):
    """Old GPT-2 configs carry n_ctx beside n_positions; both must say the new length."""
    ck = tiny_checkpoint("gpt2")
    src = tmp_path / "src"
    shutil.copytree(ck.path, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["n_ctx"] = cfg["n_positions"]
    (src / "config.json").write_text(json.dumps(cfg))
    t = load_position_table(src)
    out = export_position_table(src, _extend(t.weights, 8), tmp_path / "out")
    new_cfg = json.loads((out / "config.json").read_text())
    assert new_cfg["n_positions"] == new_cfg["n_ctx"] == t.rows + 8
