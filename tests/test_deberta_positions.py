"""DeBERTa relative positions vs transformers' own PyTorch code.

References are transformers' functions themselves: DeBERTa-v2's ``build_relative_position`` and
``make_log_bucket_position`` (every relative position in ``(-4096, 4096)`` through the full
function, every distance up to ``2**18`` through the bucket function), and the encoder of tiny
``DebertaV2Model`` / ``DebertaModel`` instances built here (``get_rel_pos``, ``rel_embeddings``,
and the absolute-table limit of ``position_biased_input``). transformers and torch are required
test dependencies: they are imported inside the tests, never skipped.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc.deberta_config import MAX_COUNT, DebertaRelativeConfig, check_log_buckets, log_bucket_table

GRID = [(256, 512), (256, 1024), (64, 128), (8, 16), (-1, -1), (0, 512), (256, -1)]
LOG_GRID = [pair for pair in GRID if min(pair) > 0]
TINY = dict(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=37,
    vocab_size=99,
    max_position_embeddings=64,
    relative_attention=True,
    pos_att_type=["p2c", "c2p"],
)


def hf_build(query_len: int, key_len: int, buckets: int, max_position: int) -> np.ndarray:
    """transformers' ``build_relative_position`` for lengths (it reads ``size(-2)``), ``(q, k)`` int64."""
    import torch
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    rel = build_relative_position(
        torch.zeros(query_len, 1), torch.zeros(key_len, 1), bucket_size=buckets, max_position=max_position
    )
    return rel[0].numpy()


def ours(query_len: int, key_len: int, buckets: int, max_position: int, **kw) -> np.ndarray:
    out = fp.deberta_relative_positions(
        query_len, key_len, position_buckets=buckets, max_relative_positions=max_position, **kw
    )
    assert out.dtype == jnp.int32 and out.shape == (query_len, key_len)
    return np.asarray(out)


# --------------------------------------------------------------------------- equality with transformers


@pytest.mark.parametrize("buckets,max_position", GRID)
def test_every_relative_position_below_4096_equals_build_relative_position(buckets, max_position):
    """r depends on q - k only: a 4096 x 1 and a 1 x 4096 call cover every (q, k) up to 4096."""
    for q_len, k_len in ((4096, 1), (1, 4096), (300, 517), (0, 3), (3, 0)):
        np.testing.assert_array_equal(
            ours(q_len, k_len, buckets, max_position), hf_build(q_len, k_len, buckets, max_position)
        )


def test_full_4096_matrix_of_deberta_v3_under_jit():
    f = jax.jit(lambda: fp.deberta_relative_positions(4096, 4096, position_buckets=256, max_relative_positions=512))
    np.testing.assert_array_equal(np.asarray(f()), hf_build(4096, 4096, 256, 512))


@pytest.mark.parametrize("buckets,max_position", LOG_GRID)
def test_every_distance_to_2_18_equals_make_log_bucket_position(buckets, max_position):
    import torch
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    n = 2**18
    rel = np.arange(-n, n + 1, dtype=np.int64)
    ref = make_log_bucket_position(torch.from_numpy(rel), buckets, max_position).to(torch.long).numpy()
    got = ours(1, rel.size, buckets, max_position, query_positions=[n], key_positions=n - rel)[0]
    np.testing.assert_array_equal(got, ref)
    cfg = DebertaRelativeConfig(buckets, max_position)
    np.testing.assert_array_equal(cfg.relative_positions_np(1, n + 1)[0], ref[n::-1])  # the numpy twin


@pytest.mark.parametrize("buckets,max_position", GRID)
def test_under_jit_and_vmap_over_offsets(buckets, max_position):
    offsets = jnp.array([0, 7, 300, 5000, MAX_COUNT - 40], jnp.int32)

    def one(offset):  # a decoding step: 3 new queries at offset.., keys 0..39 + offset - 3 shifted
        return fp.deberta_relative_positions(
            3,
            40,
            position_buckets=buckets,
            max_relative_positions=max_position,
            query_positions=offset + jnp.arange(37, 40),
            key_positions=offset + jnp.arange(40) - (offset // 2) * (jnp.arange(40) % 2),
        )

    got = np.asarray(jax.jit(jax.vmap(one))(offsets))
    for row, offset in zip(got, np.asarray(offsets)):
        q = offset + np.arange(37, 40)
        k = offset + np.arange(40) - (offset // 2) * (np.arange(40) % 2)
        rel = q[:, None] - k[None, :]
        ref = hf_build(1, 2 * int(np.abs(rel).max()) + 1, buckets, max_position)[0]  # r(-d) = ref[d]
        expected = np.where(rel <= 0, ref[np.abs(rel)], -ref[np.abs(rel)])
        np.testing.assert_array_equal(row, expected)


def test_traced_positions_past_the_table_are_an_error_or_clipped():
    f = jax.jit(
        lambda p: fp.deberta_relative_positions(
            2, 2, position_buckets=256, max_relative_positions=512, query_positions=p, key_positions=jnp.arange(2)
        )
    )
    assert np.asarray(f(jnp.array([0, MAX_COUNT - 1]))).tolist()[1][0] > 0
    with pytest.raises(fp.PositionLimitError, match=r"^deberta relative positions holds 1048576 positions"):
        fp.position_errors(f)(jnp.array([0, MAX_COUNT]))
    clip = jax.jit(
        lambda p: fp.deberta_relative_positions(
            1, 1, position_buckets=-1, max_relative_positions=-1, query_positions=p, on_overflow="clip"
        )
    )
    assert np.asarray(clip(jnp.array([-5]))).tolist() == [[0]]


# --------------------------------------------------------------------------- the tiny models


@pytest.mark.parametrize(
    "family,extra",
    [
        ("deberta-v2", dict(position_buckets=8, max_relative_positions=16)),  # the brief's model
        ("deberta-v2", dict(position_buckets=8, max_relative_positions=-1)),  # M falls back to 64
        ("deberta-v2", dict(max_relative_positions=-1, position_biased_input=False)),  # no buckets
        ("deberta", dict(max_relative_positions=16)),  # v1: q - k, 2 * 16 rows
    ],
)
def test_tiny_model_encoder_positions_and_rows(family, extra):
    import torch
    import transformers

    config_cls, model_cls = (
        (transformers.DebertaV2Config, transformers.DebertaV2Model)
        if family == "deberta-v2"
        else (transformers.DebertaConfig, transformers.DebertaModel)
    )
    torch.manual_seed(0)
    model = model_cls(config_cls(**TINY, **extra)).eval()
    cfg = DebertaRelativeConfig.from_config_dict(model.config.to_dict())
    assert cfg.rows == model.encoder.rel_embeddings.weight.shape[0]
    assert cfg.limit == (64 if extra.get("position_biased_input", True) else None)
    buckets = cfg.position_buckets if cfg.log_buckets else -1
    for n in (1, 17, 64, 100):
        hf = model.encoder.get_rel_pos(torch.zeros(1, n, 32))
        got = ours(n, n, buckets, cfg.max_position)
        np.testing.assert_array_equal(got, hf.reshape(n, n).numpy())
        np.testing.assert_array_equal(cfg.relative_positions_np(n, n), got)
    with torch.no_grad():  # and the model runs at these positions
        model(input_ids=torch.arange(17)[None] % 99)


def test_limit_is_the_absolute_table_only_when_position_biased_input():
    """transformers fails past max_position_embeddings with the absolute table, runs without it."""
    import torch
    import transformers

    ids = (torch.arange(65)[None] % 98) + 1
    for biased in (True, False):
        config = transformers.DebertaV2Config(
            **TINY, position_buckets=8, max_relative_positions=16, position_biased_input=biased
        )
        model = transformers.DebertaV2Model(config).eval()
        cfg = DebertaRelativeConfig.from_config_dict(config.to_dict())
        with torch.no_grad():
            model(input_ids=ids[:, :64])  # at the limit: fine either way
            if biased:
                assert cfg.limit == 64
                with pytest.raises(RuntimeError):
                    model(input_ids=ids)  # 65 positions: the absolute table has 64
            else:
                assert cfg.limit is None
                out = model(input_ids=ids).last_hidden_state  # relative only: no hard limit
                assert out.shape == (1, 65, 32) and torch.isfinite(out).all()


# --------------------------------------------------------------------------- the config


def test_config_span_rows_and_fallback():
    assert DebertaRelativeConfig().max_position == 512 and DebertaRelativeConfig().rows == 1024
    v3 = DebertaRelativeConfig(position_buckets=256, position_biased_input=False)
    assert (v3.max_position, v3.span, v3.rows, v3.limit, v3.log_buckets) == (512, 256, 512, None, True)
    assert DebertaRelativeConfig(max_relative_positions=128, max_position_embeddings=64).span == 128
    assert DebertaRelativeConfig(position_buckets=0, max_relative_positions=0).span == 512
    assert v3.to_dict()["rows"] == 512 and "span 256, 512 rows" in v3.describe()


def test_from_config_dict():
    read = DebertaRelativeConfig.from_config_dict
    v1 = read(
        {"model_type": "deberta", "relative_attention": True, "position_buckets": 256, "max_relative_positions": 8}
    )
    assert (v1.position_buckets, v1.span, v1.rows) == (-1, 8, 16)  # v1 never reads position_buckets
    assert read({"relative_attention": True}) == DebertaRelativeConfig()
    for bad in ({}, {"relative_attention": False}, {"relative_attention": "yes"}):
        with pytest.raises(ValueError, match=r"^DebertaRelativeConfig.from_config_dict: expected relative_attention"):
            read(bad)
    with pytest.raises(ValueError, match="expected a dict"):
        read([("relative_attention", True)])
    with pytest.raises(ValueError, match="position_buckets"):
        read({"relative_attention": True, "position_buckets": 1})


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(position_buckets=1.5), "position_buckets"),
        (dict(position_buckets=True), "position_buckets"),
        (dict(position_buckets=-2), "position_buckets"),
        (dict(position_buckets=2**20 + 1), "position_buckets"),
        (dict(position_buckets=1), "position_buckets"),
        (dict(max_relative_positions="16"), "max_relative_positions"),
        (dict(max_relative_positions=2**21), "max_relative_positions"),
        (dict(position_buckets=256, max_relative_positions=129), "max_relative_positions"),
        (dict(position_buckets=256, max_position_embeddings=100), "max_relative_positions"),
        (dict(max_position_embeddings=0), "max_position_embeddings"),
        (dict(max_position_embeddings=None), "max_position_embeddings"),
        (dict(position_biased_input=1), "position_biased_input"),
    ],
)
def test_config_validation_one_line_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^DebertaRelativeConfig: expected .*{field}") as info:
        DebertaRelativeConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_log_bucket_table_and_pair_checks():
    edges, values = log_bucket_table(256, 512)
    assert edges[0] == 129 and values[0] == 129 and (np.diff(edges) > 0).all() and (np.diff(values) > 0).all()
    assert check_log_buckets(2, 3) and not check_log_buckets(8, 0)  # mid 1: every distance > 1 is +-1
    np.testing.assert_array_equal(ours(1, 6, 2, 3), hf_build(1, 6, 2, 3))
    with pytest.raises(ValueError, match="^log_bucket_table: expected position_buckets > 0"):
        log_bucket_table(-1, 512)
    with pytest.raises(ValueError, match="below 2\\*\\*24"):  # a log denominator ~ 1/mid: buckets explode
        check_log_buckets(2**20, 2**19 + 2)


@pytest.mark.parametrize(
    "args,kwargs,error,match",
    [
        ((1.0, 4), {}, TypeError, "expected a static int query_len, found 1.0"),
        ((4, True), {}, TypeError, "expected a static int key_len, found True"),
        ((jnp.int32(4), 4), {}, TypeError, "expected a static int query_len"),
        ((-1, 4), {}, ValueError, "expected 0 <= query_len <= 1048576, found -1"),
        ((4, 2**20 + 1), {}, ValueError, "expected 0 <= key_len <= 1048576, found 1048577"),
        ((4, 4), dict(position_buckets=1), ValueError, "expected position_buckets >= 2"),
        ((4, 4), dict(max_relative_positions=100), ValueError, "expected max_relative_positions >= 130"),
        ((4, 4), dict(position_buckets=2.0), ValueError, "expected an integer position_buckets"),
        ((4, 4), dict(query_positions=np.arange(3)), ValueError, r"expected query_positions of shape \(4,\)"),
        ((4, 4), dict(key_positions=np.arange(4.0)), TypeError, "expected integer key_positions, found dtype float64"),
        ((4, 4), dict(on_overflow="fill"), ValueError, "expected on_overflow 'error' or 'clip'"),
        ((2, 2), dict(query_positions=[0, MAX_COUNT]), fp.PositionLimitError, "asked for position 1048576"),
        ((2, 2), dict(key_positions=[-1, 0]), fp.PositionLimitError, "asked for position -1"),
    ],
)
def test_bad_inputs_one_line(args, kwargs, error, match):
    kwargs = {"position_buckets": 256, "max_relative_positions": 512, **kwargs}
    with pytest.raises(error, match=match) as info:
        fp.deberta_relative_positions(*args, **kwargs)
    assert "\n" not in str(info.value)


def test_exact_reference_is_float64_and_differs_from_transformers_only_far_out():
    cfg = DebertaRelativeConfig(position_buckets=256)
    np.testing.assert_array_equal(cfg.relative_positions_np(1, 4096, exact=True), cfg.relative_positions_np(1, 4096))
    rel = np.array([65317])  # the first distance where float64 and transformers' float32 disagree
    assert fp.deberta_config.relative_positions_reference(
        rel, [0], 256, 512, exact=True
    ) != fp.deberta_config.relative_positions_reference(rel, [0], 256, 512)


def test_config_module_imports_no_jax():
    code = textwrap.dedent(
        """
        import sys
        from flax_posenc.deberta_config import DebertaRelativeConfig
        assert DebertaRelativeConfig(position_buckets=256).relative_positions_np(2, 600)[0, -1] == -270
        print("HEAVY", sorted(m for m in ("jax", "flax", "torch", "transformers") if m in sys.modules))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout


def test_in_a_scanned_decoding_loop():
    """One query per step under ``lax.scan`` (traced position) equals the rows of the whole matrix."""
    n = 24

    def step(t, _):
        row = fp.deberta_relative_positions(
            1, n, position_buckets=8, max_relative_positions=16, query_positions=t[None], key_positions=jnp.arange(n)
        )
        return t + 1, row[0]

    _, rows = jax.jit(lambda: jax.lax.scan(step, jnp.int32(0), None, length=n))()
    whole = fp.deberta_relative_positions(n, n, position_buckets=8, max_relative_positions=16)
    np.testing.assert_array_equal(np.asarray(rows), np.asarray(whole))
    np.testing.assert_array_equal(np.asarray(whole), hf_build(n, n, 8, 16))
