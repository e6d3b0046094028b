"""The performance fast paths give the plain computation's numbers.

- ``lookup.take_rows`` (2-byte rows gathered as ``uint16``): bit for bit ``jnp.take`` (values,
  NaN rows of out-of-range ids, negative ids), its gradients and tangents, under jit, vmap, scan;
  the bfloat16 input block against an independent numpy/ml_dtypes reference (the float32 sum of
  the two bfloat16 rows, rounded once).
- ``apply_rotary`` (one multiply-add with ``[cos|cos]``/``[-sin|sin]``): against float64 numpy and
  against transformers' PyTorch ``apply_rotary_pos_emb`` (Llama, half layout; GPT-J, interleaved).
- the functional decode path ``jax.jit(partial(fp.block.transformer_input, spec))(params, ids,
  start=t)`` (docs/benchmarks.md's recommended call) equals the module call, guard included.
- ``sinusoidal.exact_cos_sin`` with bounded positions (fewer, narrower digits: ``digit_plan``)
  against float64 numpy at ``limit - 1`` / ``limit`` for every overflow policy, under jit, vmap
  and scan; the table loader's safetensors checks decide as ``safetensors.safe_open`` does.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
from flax import nnx
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply

import flax_posenc as fp
from flax_posenc import lookup
from flax_posenc.lookup import take_rows

RNG = np.random.default_rng(16)


def bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_take_rows_is_jnp_take_bit_for_bit(dtype):
    table = jnp.asarray(RNG.standard_normal((37, 6)), dtype)
    ids = jnp.asarray(RNG.integers(-45, 45, (3, 11)), jnp.int32)  # in range, negative, past both ends
    want = bits(jnp.take(table, ids, axis=0))
    for got in (
        take_rows(table, ids),
        jax.jit(take_rows)(table, ids),
        jax.vmap(lambda i: take_rows(table, i))(ids),
        jax.lax.scan(lambda c, i: (c, take_rows(table, i)), 0, ids)[1],
    ):
        np.testing.assert_array_equal(bits(got), want)
    inside = jnp.asarray(RNG.integers(0, 37, (5,)), jnp.int32)
    np.testing.assert_array_equal(
        bits(jax.jit(functools.partial(take_rows, in_bounds=True))(table, inside)), bits(table[inside])
    )


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_take_rows_derivatives_are_jnp_take_ones(dtype):
    table = jnp.asarray(RNG.standard_normal((23, 4)), dtype)
    ids = jnp.asarray(RNG.integers(0, 23, (2, 9)), jnp.int32)  # repeats: the scatter-add sums them
    weight = jnp.asarray(RNG.standard_normal((2, 9, 4)), jnp.float32)

    def loss(gather, t):
        return jnp.sum(gather(t, ids).astype(jnp.float32) * weight)

    ours = jax.jit(jax.grad(functools.partial(loss, take_rows)))(table)
    plain = jax.jit(jax.grad(functools.partial(loss, lambda t, i: jnp.take(t, i, axis=0))))(table)
    np.testing.assert_array_equal(bits(ours), bits(plain))
    tangent = jnp.asarray(RNG.standard_normal((23, 4)), dtype)
    _, t_ours = jax.jvp(lambda t: take_rows(t, ids), (table,), (tangent,))
    np.testing.assert_array_equal(bits(t_ours), bits(jnp.take(tangent, ids, axis=0)))


def test_take_rows_split_gather_is_jnp_take_bit_for_bit(monkeypatch):
    """Large gathers (here: every gather) run as lax.cond(all in range, plain, general): both
    branches give jnp.take's bits, under jit, vmap, scan, and grad/jvp are jnp.take's."""
    monkeypatch.setattr(lookup, "SPLIT_ELEMENTS", 1)
    dtype = jnp.bfloat16  # float16 takes the same code (2-byte rows)
    table = jnp.asarray(RNG.standard_normal((29, 5)), dtype)
    inside = jnp.asarray(RNG.integers(0, 29, (3, 7)), jnp.int32)
    outside = inside.at[0, :3].set(jnp.array([-1, 29, -40]))  # wrap, past the end, past the start
    compiled = jax.jit(take_rows).lower(table, inside).compile()
    assert "conditional" in compiled.as_text()
    for ids, got in (
        (inside, compiled(table, inside)),
        (outside, compiled(table, outside)),  # the general branch
        (outside, jax.jit(jax.vmap(lambda i: take_rows(table, i)))(outside)),  # cond -> select
        (inside, jax.lax.scan(lambda c, i: (c, take_rows(table, i)), 0, inside)[1]),
    ):
        np.testing.assert_array_equal(bits(got), bits(jnp.take(table, ids, axis=0)))
    weight = jnp.asarray(RNG.standard_normal((3, 7, 5)), jnp.float32)

    def loss(gather, t):
        return jnp.sum(gather(t, inside).astype(jnp.float32) * weight)

    ours = jax.jit(jax.grad(functools.partial(loss, take_rows)))(table)  # jvp + transpose, split primal
    plain = jax.grad(functools.partial(loss, lambda t, i: jnp.take(t, i, axis=0)))(table)
    np.testing.assert_array_equal(bits(ours), bits(plain))


def test_split_gather_threshold_keeps_small_gathers_fused():
    table = jnp.zeros((50, 8), jnp.bfloat16)
    small = jnp.zeros((1, 1), jnp.int32)  # a decode step: no reduction, no conditional
    large = jnp.zeros((lookup.SPLIT_ELEMENTS // 8,), jnp.int32)
    assert "conditional" not in jax.jit(take_rows).lower(table, small).compile().as_text()
    assert "conditional" in jax.jit(take_rows).lower(table, large).compile().as_text()


def test_bfloat16_block_matches_a_numpy_reference():
    block = fp.nnx.TransformerInput.from_arguments(
        300, 16, num_positions=64, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0)
    )
    ids = RNG.integers(0, 300, (3, 40)).astype(np.int32)
    word = np.asarray(block.word_embeddings[...]).astype(np.float32)
    wpe = np.asarray(block.position_embeddings[...]).astype(np.float32)
    want = (word[ids] + wpe[:40]).astype(ml_dtypes.bfloat16)  # exact float32 sum, rounded once
    graphdef, state = nnx.split(block)
    got = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, ids)
    np.testing.assert_array_equal(bits(got), bits(want))
    with pytest.MonkeyPatch.context() as patch:  # the large-block path: the word gather unfused
        patch.setattr(lookup, "SPLIT_ELEMENTS", 1)
        got = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, ids)
    np.testing.assert_array_equal(bits(got), bits(want))
    bad = ids.copy()
    bad[0, 0] = 300
    with pytest.raises(
        fp.PositionLimitError, match=r"^word embedding table holds 300 ids \(0\.\.299\); asked for id 300"
    ):
        block(bad)  # an id past the vocabulary is an error (issue 24), NaN only when asked for
    filling = fp.nnx.TransformerInput.from_arguments(
        300, 16, num_positions=64, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, on_overflow="fill", rngs=nnx.Rngs(0)
    )
    fill_def, fill_state = nnx.split(filling)
    out = np.asarray(jax.jit(lambda s, x: nnx.merge(fill_def, s)(x))(fill_state, bad)).astype(np.float32)
    assert np.isnan(out[0, 0]).all() and not np.isnan(out[0, 1:]).any()


def _rotate64(x, cos, sin, layout):
    x = x.astype(np.float64)
    if layout == "half":
        x1, x2 = np.split(x, 2, axis=-1)
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return np.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).reshape(x.shape)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rotary_within_one_rounding_of_float64(layout):
    x = RNG.standard_normal((2, 7, 3, 8)).astype(np.float32)
    angle = RNG.uniform(-7, 7, (7, 1, 4))
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    want = _rotate64(x, cos.astype(np.float64), sin.astype(np.float64), layout)
    got = jax.jit(functools.partial(fp.apply_rotary, layout=layout))(x, cos, sin)
    # two products and a sum in float32: at most ~2 roundings of the larger term
    scale = np.abs(_rotate64(x, cos, 0 * sin, layout)) + np.abs(_rotate64(x, 0 * cos, sin, layout))  # |x1 c| + |x2 s|
    assert np.all(np.abs(np.asarray(got, np.float64) - want) <= 2.0**-22 * scale + 1e-30)


def test_apply_rotary_matches_transformers():
    q = RNG.standard_normal((2, 3, 5, 8)).astype(np.float32)  # (batch, heads, seq, head_dim) for HF
    angle = RNG.uniform(0, 5, (5, 4))
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    full_cos, full_sin = (
        torch.from_numpy(np.concatenate([cos, cos], -1))[None],
        torch.from_numpy(np.concatenate([sin, sin], -1))[None],
    )
    hf_q, _ = llama_apply(torch.from_numpy(q), torch.from_numpy(q), full_cos, full_sin)
    np.testing.assert_allclose(np.asarray(fp.apply_rotary(q, cos, sin)), hf_q.numpy(), atol=1e-6, rtol=0)
    qj = q.transpose(0, 2, 1, 3)  # GPT-J: (batch, seq, heads, head_dim), sincos repeated per pair
    sincos = torch.from_numpy(np.concatenate([sin, cos], -1))[None]
    hf_j = gptj_apply(torch.from_numpy(qj), sincos[..., :4], sincos[..., 4:])  # repeats each per pair
    got = fp.apply_rotary(qj, cos[:, None], sin[:, None], layout="interleaved")
    np.testing.assert_allclose(np.asarray(got), hf_j.numpy(), atol=1e-6, rtol=0)


def test_functional_decode_path_equals_the_module():
    block = fp.nnx.TransformerInput.from_arguments(500, 16, num_positions=32, rngs=nnx.Rngs(0))
    step = jax.jit(functools.partial(fp.block.transformer_input, block.spec))
    params = block.params()
    for t in (0, 7, 31):
        ids = jnp.array([[3 + t]], jnp.int32)
        np.testing.assert_array_equal(
            np.asarray(step(params, ids, start=jnp.int32(t))), np.asarray(block(ids, start=t))
        )
    checked = fp.position_errors(lambda t: jax.block_until_ready(step(params, jnp.array([[1]], jnp.int32), start=t)))
    with pytest.raises(fp.PositionLimitError, match="32 positions"):
        checked(jnp.int32(32))


def test_loader_fast_checks_equal_their_plain_definitions():
    """The table loader's cheaper checks (issue 16) decide as the plain definitions do."""
    from flax_posenc.conversion import families, safety

    def is_buffer_plain(key):
        parts = key.split(".")
        return any(parts[-len(s.split(".")) :] == s.split(".") for s in families.BUFFER_SUFFIXES)

    keys = [
        "embeddings.position_ids",
        "position_ids",
        "xposition_ids",
        "h.0.attn.bias",
        "attn.bias",
        "h.0.attn.c_attn.bias",
        "h.0.xattn.bias",
        "masked_bias",
        "h.1.attn.masked_bias",
        "a.masked_bias.weight",
        "",
        ".",
        "token_type_ids.x",
    ]
    assert [families.is_buffer(k) for k in keys] == [is_buffer_plain(k) for k in keys]

    def depth_plain(v):
        if isinstance(v, dict):
            return 1 + max((depth_plain(x) for x in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth_plain(x) for x in v), default=0)
        return 0

    values = [1, "x", [], {}, [[]], {"a": [1, {"b": []}]}, [1, [2, [3, [4]]]], {"a": 1, "b": {"c": {"d": [{}]}}}]
    deep = []
    for _ in range(safety.MAX_JSON_DEPTH + 3):
        deep = [deep]
    assert [safety._depth(v) for v in values] == [depth_plain(v) for v in values]
    assert safety._depth(deep) > safety.MAX_JSON_DEPTH


def test_json_integer_bound_with_and_without_long_digit_runs():
    """parse_json skips the per-integer hook only when no digit run could exceed the bound."""
    from flax_posenc.conversion import safety
    from flax_posenc.errors import CheckpointError

    n = safety.MAX_INT_DIGITS
    assert safety.parse_json('{{"a": [{}, -{}]}}'.format("9" * n, "9" * n), where="h", what="x") == {
        "a": [int("9" * n), -int("9" * n)]
    }
    assert safety.parse_json('{"a": "%s"}' % ("1" * (n + 5)), where="h", what="x") == {
        "a": "1" * (n + 5)
    }  # a string: fine
    with pytest.raises(CheckpointError, match="digits"):
        safety.parse_json('{"a": %s}' % ("1" * (n + 1)), where="h", what="x")
    with pytest.raises(CheckpointError, match="digits"):
        safety.parse_json('{{"a": "{}", "b": {}}}'.format("1" * (n + 5), "2" * (n + 1)), where="h", what="x")


def test_digit_plan_is_the_fewest_digits_of_at_most_8_bits():
    from flax_posenc.sinusoidal import INT32_RANGE, digit_plan

    cases = [(0, 0), (0, 1), (0, 255), (0, 256), (0, 1023), (0, 1024), (0, 2**16 - 1), (0, 2**16)]
    cases += [(-1, 0), (-1, 1), (-5, 1023), (-1024, 1023), (-1025, 1023), (-1024, 1024), (-(2**23), 2**23 - 1)]
    for lo, hi in cases:
        # bits of a two's complement integer holding lo .. hi (sign bit included when lo < 0)
        need = next(b for b in range(1, 33) if (-(2 ** (b - 1)) if lo < 0 else 0) <= lo and hi < 2 ** (b - (lo < 0)))
        digits, width = digit_plan(lo, hi)
        assert digits == min(k for k in range(1, 5) if 8 * k >= need), (lo, hi)
        assert width == min(b for b in range(1, 9) if digits * b >= need), (lo, hi)
    assert digit_plan(*INT32_RANGE) == (4, 8)  # the int32 range: 32 bits, the top digit signed
    assert digit_plan(0, 2**31 - 1) == (4, 8)
    with pytest.raises(ValueError, match="bounds"):
        fp.sinusoidal.exact_cos_sin(jnp.zeros(2, jnp.int32), np.ones(2), bounds=(0, 2**31))


@pytest.mark.parametrize(
    "bounds",
    [(0, 0), (0, 32), (0, 1023), (0, 1024), (0, 2**16), (-1, 0), (-5, 1023), (-1024, 1023), (-(2**20), 2**20)]
    + [(-(2**31), 2**31 - 1)],
)
def test_exact_cos_sin_at_the_edges_of_every_digit_plan(bounds):
    """Each plan (signed top digit included) is exact at its bounds and between, under jit."""
    lo, hi = bounds
    w = fp.sinusoidal_frequencies(64)
    rng = np.random.default_rng(abs(lo) + hi)
    positions = np.unique(np.concatenate([[lo, lo + 1, -1, 0, 1, hi - 1, hi], rng.integers(lo, hi + 1, 200)]))
    positions = positions[(positions >= lo) & (positions <= hi)]
    cos, sin = jax.jit(lambda p: fp.sinusoidal.exact_cos_sin(p, w, bounds=bounds))(jnp.asarray(positions, jnp.int32))
    ref_cos, ref_sin = _float64_cos_sin(positions, w)
    # 3 float32 ulps of 1 (float64 itself is off by ~p * 1e-16 rad: 2e-7 at 2**31)
    tol = 3 * 2.0**-23 if max(abs(lo), hi) < 2**24 else 2e-6
    np.testing.assert_allclose(np.asarray(cos, np.float64), ref_cos, rtol=0, atol=tol)
    np.testing.assert_allclose(np.asarray(sin, np.float64), ref_sin, rtol=0, atol=tol)


def _float64_cos_sin(positions, w):
    angle = np.asarray(positions, np.float64)[..., None] * w
    return np.cos(angle), np.sin(angle)


@pytest.mark.parametrize("limit", [1, 33, 1024, 1025, 2**16 + 1])
def test_bounded_digits_exact_at_the_limit_under_every_policy(limit):
    """Positions clipped by the guard lie in 0 .. limit - 1: the digits the limit needs suffice."""
    dim = 64
    w = fp.sinusoidal_frequencies(dim)
    inside = np.unique(np.clip([0, 1, limit // 2, limit - 2, limit - 1], 0, limit - 1))
    past = np.array([limit, limit + 7, 2**31 - 1, -1, -(2**31)])

    @jax.jit
    def enc(p):
        return {
            policy: fp.sinusoidal_encoding(p, dim, num_positions=limit, on_overflow=policy, layout="concatenated")
            for policy in ("clip", "fill")
        }

    got = enc(jnp.asarray(np.concatenate([inside, past]), jnp.int32))
    cos, sin = _float64_cos_sin(inside, w)
    tol = 2.5e-7  # two float32 ulps of 1: the error of the unbounded 4-digit path (benchmarks/exactness.py)
    for policy in ("clip", "fill"):
        ours = np.asarray(got[policy], np.float64)
        np.testing.assert_allclose(ours[: len(inside)], np.concatenate([sin, cos], -1), rtol=0, atol=tol)
    clipped = np.clip(past, 0, limit - 1)
    cos, sin = _float64_cos_sin(clipped, w)
    np.testing.assert_allclose(
        np.asarray(got["clip"], np.float64)[len(inside) :], np.concatenate([sin, cos], -1), rtol=0, atol=tol
    )
    assert np.isnan(np.asarray(got["fill"])[len(inside) :]).all()


def test_bounded_rope_exact_at_the_limit_and_exact_cos_sin_under_vmap_and_scan():
    limit = 4096
    cfg = fp.RopeConfig(head_dim=16, max_position_embeddings=limit)
    w = fp.rope_inverse_frequencies(cfg)[0]
    positions = np.array([0, 1, 2047, 2048, limit - 1, limit, limit + 100])
    cos, sin = jax.jit(lambda p: fp.rotary_cos_sin(p, cfg, on_overflow="clip"))(jnp.asarray(positions, jnp.int32))
    ref_cos, ref_sin = _float64_cos_sin(np.clip(positions, 0, limit - 1), w)
    np.testing.assert_allclose(np.asarray(cos, np.float64), ref_cos, rtol=0, atol=2.5e-7)
    np.testing.assert_allclose(np.asarray(sin, np.float64), ref_sin, rtol=0, atol=2.5e-7)

    exact = functools.partial(fp.sinusoidal.exact_cos_sin, frequencies=w, bounds=(-300, 300))
    grid = np.arange(-300, 300).reshape(3, 200)
    ref_cos, ref_sin = _float64_cos_sin(grid, w)
    for c, s in (
        jax.jit(jax.vmap(exact))(jnp.asarray(grid, jnp.int32)),
        jax.lax.scan(lambda carry, p: (carry, exact(p)), 0, jnp.asarray(grid, jnp.int32))[1],
    ):
        np.testing.assert_allclose(np.asarray(c, np.float64), ref_cos, rtol=0, atol=2.5e-7)
        np.testing.assert_allclose(np.asarray(s, np.float64), ref_sin, rtol=0, atol=2.5e-7)


def _safetensors_cases():
    def e(shape, offsets, dtype="F32"):
        return {"dtype": dtype, "shape": shape, "data_offsets": offsets}

    return {
        "valid": ({"a": e([2], [0, 8]), "b": e([1], [8, 12])}, 12),
        "unsorted in the JSON": ({"b": e([1], [8, 12]), "a": e([2], [0, 8])}, 12),
        "gap": ({"a": e([1], [0, 4]), "b": e([1], [8, 12])}, 12),
        "overlap": ({"a": e([2], [0, 8]), "b": e([1], [4, 8])}, 8),
        "trailing bytes": ({"a": e([2], [0, 8])}, 12),
        "zero-size tensors": ({"z": e([0], [0, 0]), "a": e([1], [0, 4]), "y": e([0, 3], [4, 4])}, 4),
        "no tensors": ({}, 0),
        "no tensors, data": ({}, 4),
        "string metadata": ({"__metadata__": {"format": "pt"}, "a": e([1], [0, 4])}, 4),
        "null metadata": ({"__metadata__": None, "a": e([1], [0, 4])}, 4),
        "integer metadata": ({"__metadata__": {"x": 1}, "a": e([1], [0, 4])}, 4),
        "list metadata": ({"__metadata__": [], "a": e([1], [0, 4])}, 4),
        "nested metadata": ({"__metadata__": {"x": {"y": "z"}}, "a": e([1], [0, 4])}, 4),
        "extra entry field": ({"a": {**e([1], [0, 4]), "extra": [1]}}, 4),
        "dimension past 64 bits": ({"a": e([0, 2**64], [0, 0])}, 0),
        "element count past 64 bits": ({"a": e([2**40, 2**40, 0], [0, 0])}, 0),
        "dimension numpy cannot index": ({"a": e([0, 2**63], [0, 0])}, 0),
        "three offsets": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 4]}}, 4),
        "bool dimension": ({"a": e([True], [0, 4])}, 4),
    }


@pytest.mark.parametrize("case", sorted(_safetensors_cases()))
def test_safetensors_checks_decide_as_safe_open(tmp_path, case):
    """``SafetensorsReader`` no longer opens the file a second time with ``safe_open``: its own
    checks must refuse exactly the files safetensors refuses (and read the same values)."""
    import json
    import struct

    from safetensors import safe_open

    from flax_posenc.conversion.readers import SafetensorsReader
    from flax_posenc.errors import CheckpointError

    header, data_len = _safetensors_cases()[case]
    raw = json.dumps(header).encode()
    data = np.arange(data_len, dtype=np.uint8).tobytes()
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    try:
        with safe_open(str(path), framework="numpy") as f:
            theirs = {k: f.get_tensor(k) for k in f.keys()}
    except Exception:
        theirs = None
    try:
        reader = SafetensorsReader(path)
        ours = {k: reader.read(k) for k in reader.keys()}
    except CheckpointError:
        ours = None
    assert (ours is None) == (theirs is None), (case, ours, theirs)
    if ours is not None:
        assert sorted(ours) == sorted(theirs)
        for k in ours:
            np.testing.assert_array_equal(ours[k], theirs[k])
            assert ours[k].dtype == theirs[k].dtype and ours[k].shape == theirs[k].shape


def test_checked_header_cache_is_keyed_by_file_identity(tmp_path):
    """A header is reused only for the same, unchanged file: a rewrite of the same size with its
    mtime set back (ctime moves), a truncation or a replacement is parsed and checked again."""
    import os
    import time

    from safetensors.numpy import save_file

    from flax_posenc.conversion import readers
    from flax_posenc.errors import CheckpointError

    path = tmp_path / "model.safetensors"
    save_file({"a": np.zeros((2, 3), np.float32), "b": np.ones(4, np.float32)}, str(path))
    first = readers.SafetensorsReader(path)
    assert readers.SafetensorsReader(path).info("a") == first.info("a") == ("F32", (2, 3))
    before = os.stat(path)
    raw = path.read_bytes()
    swapped = raw.replace(b'"a"', b'"c"')  # same size, another tensor name
    assert len(swapped) == len(raw) and swapped != raw
    path.write_bytes(swapped)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime set back: ctime still moves
    while os.stat(path).st_ctime_ns == before.st_ctime_ns:  # a state, not a duration: until ctime has moved
        time.sleep(0.001)  # (within one tick of the file system's clock, it may not have yet)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    again = readers.SafetensorsReader(path)
    assert sorted(again.keys()) == ["b", "c"]
    path.write_bytes(raw[:-4])  # truncated: refused, never served from the cache
    with pytest.raises(CheckpointError, match="data bytes|covering"):
        readers.SafetensorsReader(path)
    assert len(readers._CHECKED_HEADERS) <= readers._CHECKED_HEADERS_MAX
