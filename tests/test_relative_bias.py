"""T5-style learned relative position bias vs transformers' own PyTorch code.

References are transformers' functions themselves: ``T5Attention._relative_position_bucket``
(exhaustively over every integer in [-2**20, 2**20]), ``T5Attention.compute_bias`` (encoder,
decoder, and the bias a real cached decoding step computes), UMT5/LongT5 ``compute_bias`` and
MPNet's ``compute_position_bias``, on tiny random checkpoints built here with
``save_pretrained`` and read back with our loader.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers as tf
from flax import nnx
from safetensors.numpy import save_file
from transformers.models.t5.modeling_t5 import T5Attention

import flax_posenc as fp
from flax_posenc.conversion import CheckpointError, load_relative_bias
from flax_posenc.relative_bias_config import BucketConfig
from flax_posenc.report.cli import main

CONFIGS = [(bi, nb, md) for bi in (True, False) for nb in (32, 128) for md in (128, 256)]
TINY = dict(vocab_size=40, d_model=8, d_kv=4, d_ff=16, num_heads=2)


def hf_buckets(rp: np.ndarray, bi: bool, nb: int, md: int) -> np.ndarray:
    return T5Attention._relative_position_bucket(
        torch.from_numpy(np.asarray(rp, np.int64)), bidirectional=bi, num_buckets=nb, max_distance=md
    ).numpy()


# --------------------------------------------------------------------------- buckets


@pytest.mark.parametrize("bi,nb,md", CONFIGS)
def test_buckets_equal_transformers_for_every_integer(bi, nb, md):
    rp = np.arange(-(2**20), 2**20 + 1, dtype=np.int64)
    ref = hf_buckets(rp, bi, nb, md)
    fn = jax.jit(lambda r: fp.relative_position_bucket(r, bidirectional=bi, num_buckets=nb, max_distance=md))
    ours = np.asarray(fn(jnp.asarray(rp, jnp.int32)))
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(BucketConfig(nb, md, bi).buckets(rp), ref)  # the numpy twin


@pytest.mark.parametrize("bi,nb,md", CONFIGS)
def test_limits_read_off_transformers(bi, nb, md):
    """exact_limit and saturation_distance, derived independently from HF's buckets of -n."""
    n = np.arange(0, 4 * md)
    ref = hf_buckets(-n, bi, nb, md)
    cfg = BucketConfig(nb, md, bi)
    first_last = int(np.argmax(ref == ref[-1]))  # first distance already in the last bucket
    assert cfg.saturation_distance == first_last
    assert (ref[first_last:] == ref[-1]).all()
    distinct = np.r_[True, np.diff(ref) != 0]  # distance d starts a new bucket
    ends = np.r_[distinct[1:], True]  # ... and the next distance starts another one
    alone = distinct & ends
    assert cfg.exact_limit == int(np.argmin(alone)) - 1
    ranges = cfg.bucket_ranges()
    for b, first, last in ranges:
        assert ref[first] == b and (last is None or (ref[last] == b and ref[last + 1] > b))
    assert [r[0] for r in ranges] == sorted(set(ref.tolist()))  # every bucket HF uses, no other


def test_exact_math_differs_from_float32_where_documented():
    """The T5 configs agree with exact arithmetic; max_distance 939 (32 per direction) does not, at 728."""
    for bi, nb, md in CONFIGS:
        r = np.arange(-md - 3, md + 4)
        np.testing.assert_array_equal(BucketConfig(nb, md, bi).exact_buckets(r), hf_buckets(r, bi, nb, md))
    cfg = BucketConfig(32, 939, False)
    ref = hf_buckets(np.array([-727, -728]), False, 32, 939)
    np.testing.assert_array_equal(cfg.buckets(np.array([-727, -728])), ref)
    # exact arithmetic: bucket 31 needs 728**16 * 16**15 >= 939**15 * 16**16, which fails; transformers says 31
    assert 728**16 * 16**15 < 939**15 * 16**16 and ref[1] == 31
    assert cfg.exact_buckets(np.array([-728]))[0] == 30


def test_bucket_errors_and_transforms():
    with pytest.raises(ValueError, match="integer"):
        fp.relative_position_bucket(jnp.array([0.5]))
    with pytest.raises(ValueError, match="num_buckets >= 4"):
        fp.relative_position_bucket(jnp.array([1]), num_buckets=3)
    with pytest.raises(ValueError, match="max_distance > 8"):
        fp.relative_position_bucket(jnp.array([1]), max_distance=8)
    rp = np.arange(-300, 300).reshape(3, -1)
    ref = hf_buckets(rp, True, 32, 128)
    np.testing.assert_array_equal(jax.vmap(fp.relative_position_bucket)(jnp.asarray(rp)), ref)


# --------------------------------------------------------------------------- checkpoints


def _save(model, path):
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("relbias")
    out = {}
    out["t5"] = tf.T5ForConditionalGeneration(tf.T5Config(**TINY, num_layers=2, num_decoder_layers=3)).eval()
    out["mt5"] = tf.MT5ForConditionalGeneration(
        tf.MT5Config(**TINY, num_layers=1, relative_attention_num_buckets=64, relative_attention_max_distance=256)
    ).eval()
    out["umt5"] = tf.UMT5ForConditionalGeneration(tf.UMT5Config(**TINY, num_layers=2)).eval()
    out["longt5"] = tf.LongT5ForConditionalGeneration(tf.LongT5Config(**TINY, num_layers=1, local_radius=5)).eval()
    out["longt5tg"] = tf.LongT5Model(
        tf.LongT5Config(**TINY, num_layers=1, local_radius=5, encoder_attention_type="transient-global")
    ).eval()
    out["t5enc"] = tf.T5EncoderModel(tf.T5Config(**TINY, num_layers=1)).eval()
    mp = dict(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16)
    out["mpnet"] = tf.MPNetForMaskedLM(tf.MPNetConfig(**mp)).eval()
    out["mpnet64"] = tf.MPNetModel(tf.MPNetConfig(**mp, relative_attention_num_buckets=64)).eval()
    return {k: (m, _save(m, root / k)) for k, m in out.items()}


def _np(t):
    return t.detach().numpy()


def _attn(stack, layer=0):
    return stack.block[layer].layer[0].SelfAttention


@pytest.mark.parametrize("name", ["t5", "mt5", "umt5"])
def test_compute_bias_parity(ckpts, name):
    model, path = ckpts[name]
    layers = len(model.encoder.block)
    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for layer in range(layers if name == "umt5" else 1):
            tab = load_relative_bias(path, stack=stack_name, layer=layer)
            hf_attn = _attn(stack, layer)
            assert tab.bidirectional == (stack_name == "encoder")
            np.testing.assert_array_equal(tab.weights, _np(hf_attn.relative_attention_bias.weight))
            for q, k, start in ((300, 300, 0), (1, 300, 299)):  # full sequence; a decoding step
                with torch.no_grad():
                    ref = _np(hf_attn.compute_bias(q, k, past_seen_tokens=start))[0]
                ours = fp.relative_position_bias(
                    tab.weights,
                    q,
                    k,
                    query_start=start,
                    bidirectional=tab.bidirectional,
                    num_buckets=tab.num_buckets,
                    max_distance=tab.max_distance,
                )
                np.testing.assert_allclose(np.asarray(ours), ref, atol=1e-6, rtol=0)
    if name == "umt5":  # per-layer tables really differ
        assert not np.array_equal(load_relative_bias(path, layer=0).weights, load_relative_bias(path, layer=1).weights)
    if name == "t5":  # a shared table: layer 2 of the 3-layer decoder is block 0's
        assert load_relative_bias(path, stack="decoder", layer=2).key.startswith("decoder.block.0.")


def test_decoding_step_bias_via_cache(ckpts):
    """The bias transformers computes in a real cached decoding step (past_seen_tokens from the cache)."""
    model, path = ckpts["t5"]
    captured = []
    hook = _attn(model.decoder).register_forward_hook(lambda mod, args, out: captured.append(_np(out[1])[0]))
    enc = torch.randn(1, 4, TINY["d_model"])
    prefix = torch.tensor([[0, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        out = model.decoder(input_ids=prefix, encoder_hidden_states=enc, use_cache=True)
        model.decoder(
            input_ids=torch.tensor([[3]]), encoder_hidden_states=enc, cache=out.past_key_values, use_cache=True
        )
    hook.remove()
    full, step = captured
    assert step.shape == (2, 1, 7)
    bias = fp.nnx.RelativePositionBias.from_pretrained(path, stack="decoder")
    np.testing.assert_allclose(np.asarray(bias(6, 6)), full, atol=1e-6, rtol=0)
    np.testing.assert_allclose(
        np.asarray(nnx.jit(lambda m, t: m(1, 7, query_start=t))(bias, jnp.int32(6))), step, atol=1e-6, rtol=0
    )


def test_longt5_local_bias(ckpts):
    for name, attn_name in (("longt5tg", "TransientGlobalSelfAttention"), ("longt5", "LocalSelfAttention")):
        model, path = ckpts[name]
        local = getattr(model.encoder.block[0].layer[0], attn_name)
        block = local.block_len
        with torch.no_grad():
            ref = _np(local.compute_bias(block))[0, 0]  # (heads, block, 3 * block)
        tab = load_relative_bias(path)
        assert attn_name in tab.key and "global_relative" not in tab.key
        ours = fp.relative_position_bias(
            tab.weights, block, 3 * block, query_start=block, max_distance=tab.max_distance
        )
        np.testing.assert_allclose(np.asarray(ours), ref, atol=1e-6, rtol=0)
    dec = load_relative_bias(path, stack="decoder")
    with torch.no_grad():
        ref = _np(_attn(model.decoder).compute_bias(20, 20))[0]
    np.testing.assert_allclose(
        np.asarray(fp.relative_position_bias(dec.weights, 20, 20, bidirectional=False)), ref, atol=1e-6
    )


@pytest.mark.parametrize("name", ["mpnet", "mpnet64"])
def test_mpnet_compute_position_bias(ckpts, name):
    """MPNet always buckets with 32/128, even with a 64-row table (compute_position_bias's defaults)."""
    model, path = ckpts[name]
    encoder = model.mpnet.encoder if name == "mpnet" else model.encoder
    tab = load_relative_bias(path)
    assert (tab.num_buckets, tab.max_distance, tab.bidirectional) == (32, 128, True)
    assert tab.weights.shape == (encoder.relative_attention_bias.weight.shape[0], 2)
    with torch.no_grad():
        ref = _np(encoder.compute_position_bias(torch.zeros(1, 300, 8)))[0]
    lin, variables = fp.linen.RelativePositionBias.from_pretrained(path)
    np.testing.assert_allclose(np.asarray(lin.apply(variables, 300, 300)), ref, atol=1e-6, rtol=0)
    with pytest.raises(CheckpointError, match="mpnet has no decoder"):
        load_relative_bias(path, stack="decoder")


# --------------------------------------------------------------------------- modules and transforms


def test_decoding_steps_under_scan_and_vmap_equal_the_full_bias(ckpts):
    """(The modules' NNX == Linen, transforms, axes and loading: tests/test_shell_contract.py.)"""
    _, path = ckpts["t5"]
    tab = load_relative_bias(path, stack="decoder")
    table = jnp.asarray(tab.weights)
    full = fp.relative_position_bias(table, 12, 12, bidirectional=False)

    @jax.jit
    def decode(table):  # one query per step against all 12 keys, start traced by the scan
        def step(carry, t):
            return carry, fp.relative_position_bias(table, 1, 12, query_start=t, bidirectional=False)[:, 0]

        return jax.lax.scan(step, None, jnp.arange(12))[1]  # (12, heads, 12)

    np.testing.assert_array_equal(np.asarray(decode(table)).transpose(1, 0, 2), np.asarray(full))
    starts = jnp.arange(12)
    per = jax.vmap(lambda s: fp.relative_position_bias(table, 1, 12, query_start=s, bidirectional=False))(starts)
    np.testing.assert_array_equal(np.asarray(per[:, :, 0]).transpose(1, 0, 2), np.asarray(full))
    with pytest.raises(ValueError, match="at least 32 rows"):
        fp.relative_position_bias(jnp.zeros((16, 2)), 2, 2, num_buckets=32)


# --------------------------------------------------------------------------- bad inputs


def _one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


def test_loader_errors(ckpts, tmp_path):
    _, t5 = ckpts["t5"]
    with pytest.raises(CheckpointError) as e:
        load_relative_bias(t5, layer=2)
    assert "config.json" in _one_line(e) and "0..1" in str(e.value) and "layer=2" in str(e.value)
    with pytest.raises(CheckpointError) as e:
        load_relative_bias(t5, stack="middle")
    assert "'middle'" in _one_line(e)
    with pytest.raises(CheckpointError) as e:
        load_relative_bias(ckpts["t5enc"][1], stack="decoder")
    assert "model.safetensors" in _one_line(e) and "no decoder.* keys" in str(e.value)
    # a table whose shape disagrees with the config, and a checkpoint without the table
    cfg = json.loads((t5 / "config.json").read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps(cfg))
    save_file(
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": np.zeros((16, 2), np.float32)},
        str(bad / "model.safetensors"),
    )
    with pytest.raises(CheckpointError) as e:
        load_relative_bias(bad)
    assert "(32, heads)" in _one_line(e) and "(16, 2)" in str(e.value) and "model.safetensors" in str(e.value)
    save_file(
        {"encoder.block.0.layer.0.SelfAttention.q.weight": np.zeros((8, 8), np.float32)}, str(bad / "model.safetensors")
    )
    with pytest.raises(CheckpointError) as e:
        load_relative_bias(bad)
    assert "relative_attention_bias" in _one_line(e) and "no such key" in str(e.value)
    save_file(
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": np.zeros((32, 3), np.float32)},
        str(bad / "model.safetensors"),
    )
    with pytest.raises(CheckpointError) as e:
        load_relative_bias(bad)
    assert "width 2" in _one_line(e) and "(32, 3)" in str(e.value)


def test_bare_weights_files_family_from_keys(ckpts, tmp_path):
    """A .safetensors without config.json: the family from key names, buckets from the rows, defaults."""
    import shutil

    for name, family in (("umt5", "umt5"), ("mt5", "t5"), ("mpnet", "mpnet")):
        model, path = ckpts[name]
        bare = tmp_path / f"{name}.safetensors"
        shutil.copy(path / "model.safetensors", bare)
        tab = load_relative_bias(bare, layer=1 if name == "umt5" else 0)
        assert tab.family == family and tab.max_distance == 128
        assert tab.num_buckets == tab.weights.shape[0] if name != "mpnet" else tab.num_buckets == 32
    forced = load_relative_bias(ckpts["mt5"][1], family="t5")
    assert forced.family == "t5" and forced.max_distance == 256
    with pytest.raises(CheckpointError) as e:
        load_relative_bias(ckpts["t5"][1], family="bert")
    assert "'bert'" in _one_line(e)


# --------------------------------------------------------------------------- command line


def test_cli_inspect_check_plot(ckpts, tmp_path, capsys):
    _, t5 = ckpts["t5"]
    n = np.arange(0, 512)
    enc_sat = int(np.argmax(hf_buckets(n, True, 32, 128) == hf_buckets(np.array([10**6]), True, 32, 128)[0]))
    dec_sat = int(np.argmax(hf_buckets(-n, False, 32, 128) == hf_buckets(np.array([-(10**6)]), False, 32, 128)[0]))
    assert main(["inspect", str(t5)]) == 0
    text = capsys.readouterr().out
    assert (
        f">= {enc_sat} " in text
        and f">= {dec_sat} " in text
        and "max_distance 128" in text
        and "32 (bidirectional" in text
    )
    assert main(["check", str(t5), "--length", "512"]) == 0
    text = capsys.readouterr().out
    assert f"{512 - enc_sat} of the distances 0..511 are >= {enc_sat}" in text
    assert main(["check", str(t5), "--length", "512", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["fits"] is True and verdict["family"] == "t5"
    assert main(["plot", str(ckpts["mpnet"][1]), "--out", str(tmp_path / "figs")]) == 0
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    # MPNet has two mechanisms: its learned table's figures, then its relative bias's, each under its prefix
    assert [n for n in names if n.startswith("2_relative_bias_")] == [
        "2_relative_bias_encoder_bias.png",
        "2_relative_bias_encoder_buckets.png",
    ]
    assert "1_learned_heatmap.png" in names


# --------------------------------------------------------------------------- the example model


def test_t5_encoder_example(tmp_path):
    """examples/models/t5_encoder.py equals transformers' T5EncoderModel (ReLU) and mT5 (gated-GELU)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "t5_encoder", Path(__file__).resolve().parents[1] / "examples" / "models" / "t5_encoder.py"
    )
    t5_encoder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t5_encoder)
    torch.manual_seed(1)
    ids = torch.randint(0, TINY["vocab_size"], (2, 150))  # past the saturation distance 91
    mask = torch.ones_like(ids)
    mask[1, 120:] = 0
    for cls, cfg in (
        (tf.T5EncoderModel, tf.T5Config(**TINY, num_layers=2)),
        (tf.MT5EncoderModel, tf.MT5Config(**TINY, num_layers=1)),
    ):
        hf = cls(cfg).eval()
        path = tmp_path / cfg.model_type
        hf.save_pretrained(path)
        with torch.no_grad():
            ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
        model = t5_encoder.from_pretrained(path)
        ours = nnx.jit(lambda m, i, a: m(i, attention_mask=a))(
            model, jnp.asarray(ids.numpy()), jnp.asarray(mask.numpy())
        )
        np.testing.assert_allclose(np.asarray(ours), ref, atol=1e-4, rtol=0)
