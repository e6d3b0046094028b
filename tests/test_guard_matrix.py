"""The one overflow guard, where users call it: policy x encoding x transformation.

Every encoding has a limit of 8 positions (0..7). For each policy ("error", "clip", "fill"),
each encoding (learned table, sinusoid, input block, RoPE, ALiBi) and each way of calling it
(eager, jax.jit, nnx.jit, a lax.scan decoding loop with a traced step counter, vmap, checkify):

- inside the limit the values equal an independent float64 numpy reference (no false alarm,
  also under vmap, where lax.cond becomes select);
- one past it, the documented behaviour: eager (known positions) always raises
  PositionLimitError while tracing; traced positions raise at run time under "error" (the
  message names the table, limit and position; fp.position_errors turns it into a
  PositionLimitError; checkify carries the same message), clamp under "clip", NaN under "fill".
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import LLAMA31, sinusoid
from jax.experimental import checkify

import flax_posenc as fp
from flax_posenc import PositionLimitError, lookup

# what jax raises for a host callback's exception: JaxRuntimeError, or ValueError on its fast path
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)

LIMIT = 8
DIM = 4
POLICIES = ("error", "clip", "fill")
MODES = ("eager", "jit", "nnx_jit", "scan", "vmap", "checkify")


# ----------------------------------------------------------------------------- the encodings
# Each: build(policy) -> nnx module; call(module, positions) -> array whose leading axes are the
# positions'; reference(positions) -> float64 numpy; name: the start of the error message.


def _sinusoid64(p):
    return sinusoid(np.asarray(p), DIM)


class Learned:
    name = "position table holds 8"

    def build(self, policy):
        m = fp.nnx.LearnedPositionalEmbedding.from_arguments(LIMIT, DIM, on_overflow=policy, rngs=nnx.Rngs(0))
        self.table = np.asarray(m.embedding[...], np.float64)
        return m

    def call(self, m, p):
        return m(p)

    def reference(self, p):
        return self.table[np.asarray(p)]


class Sinusoid:
    name = "sinusoidal encoding holds 8"

    def build(self, policy):
        return fp.nnx.SinusoidalPositionalEncoding.from_arguments(DIM, num_positions=LIMIT, on_overflow=policy)

    def call(self, m, p):
        return m(p)

    def reference(self, p):
        return _sinusoid64(p)


class Block:
    name = "position table holds 8"

    def build(self, policy):
        m = fp.nnx.TransformerInput.from_arguments(20, DIM, num_positions=LIMIT, on_overflow=policy, rngs=nnx.Rngs(1))
        self.word0 = np.asarray(m.word_embeddings[...], np.float64)[3]
        self.table = np.asarray(m.position_embeddings[...], np.float64)
        return m

    def call(self, m, p):
        return m(jnp.full(p.shape, 3, jnp.int32), position_ids=p)

    def reference(self, p):
        return self.word0 + self.table[np.asarray(p)]


class Rope:
    name = "default RoPE (max_position_embeddings 8) holds 8"

    def build(self, policy):
        return fp.nnx.RotaryEmbedding(fp.RopeConfig(head_dim=DIM, max_position_embeddings=LIMIT), on_overflow=policy)

    def call(self, m, p):
        x = jnp.broadcast_to(jnp.array([1.0, 2.0, 3.0, 4.0]), p.shape + (1, DIM))  # (..., seq, heads=1, dim)
        return m(x, p)[..., 0, :]

    def reference(self, p):
        angle = np.asarray(p, np.float64)[..., None] * 10000.0 ** (-np.arange(DIM // 2) * 2 / DIM)
        x1, x2 = np.array([1.0, 2.0]), np.array([3.0, 4.0])
        return np.concatenate([x1 * np.cos(angle) - x2 * np.sin(angle), x2 * np.cos(angle) + x1 * np.sin(angle)], -1)


class Alibi:
    name = "ALiBi query positions (configured limit; ALiBi itself has none) holds 8"

    def build(self, policy):
        return fp.nnx.ALiBiBias(fp.AlibiConfig(2, max_positions=LIMIT), causal=False, on_overflow=policy)

    def call(self, m, p):  # (..., seq) -> (..., seq, heads, seq): positions' axes first
        bias = m(query_positions=p, key_positions=jnp.arange(3))
        return jnp.moveaxis(bias, -3, -1)

    def reference(self, p):
        slopes = np.array([2.0**-4, 2.0**-8])
        distance = np.abs(np.asarray(p)[..., :, None] - np.arange(3))
        return -distance[..., None] * slopes


ENCODINGS = {"learned": Learned, "sinusoid": Sinusoid, "block": Block, "rope": Rope, "alibi": Alibi}


def normal(shape, seed):
    """Standard normal float32 test data from numpy (``jax.random`` compiles a program per shape)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def assert_ulps(actual, expected, ulps: int = 2):
    """Equal within ``ulps`` float32 ulps of the largest magnitude compared (jit fuses differently)."""
    expected = np.asarray(expected)
    tolerance = ulps * np.spacing(np.float32(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=0, atol=tolerance)


def compiled(mode: str, enc, module, length: int = LIMIT):
    """The encoding called the way ``mode`` does, traced and compiled once: ``call(positions)``
    with ``positions`` ((length,) ints) returns a numpy result; every call reuses the one program
    (in range and past the limit run the same one)."""
    if mode == "eager":
        return lambda positions: np.asarray(enc.call(module, jnp.asarray(positions, jnp.int32)))
    if mode == "jit":
        f = jax.jit(lambda q: enc.call(module, q))
    elif mode == "nnx_jit":
        g = nnx.jit(lambda m, q: enc.call(m, q))
        f = lambda q: g(module, q)  # noqa: E731
    elif mode == "vmap":  # two rows: the positions, and the positions reversed
        g = jax.jit(jax.vmap(lambda q: enc.call(module, q)))
        f = lambda q: g(jnp.stack([q, q[::-1]]))[0]  # noqa: E731
    elif mode == "scan":  # a decoding loop: one position per step from a traced counter, from positions[0]

        def step(t, _):
            return t + 1, enc.call(module, t[None])[0]

        g = jax.jit(lambda s: jax.lax.scan(step, s, None, length=length)[1])
        f = lambda q: g(q[0])  # noqa: E731
    elif mode == "checkify":
        g = jax.jit(checkify.checkify(lambda q: enc.call(module, q)))

        def f(q):
            with fp.checkify_errors():  # (it must enclose the tracing: the first call)
                err, out = g(q)
            err.throw()
            return out

    else:
        raise AssertionError(mode)
    return lambda positions: np.asarray(f(jnp.asarray(positions, jnp.int32)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("policy", POLICIES)
def test_inside_the_limit_then_one_past(policy, encoding, mode):
    """One compiled program per cell, called on positions 0..7 (exactly up to the limit: no false
    alarm, float64 reference values) and on 1..8 (the same shape, one past: the documented behaviour)."""
    enc = ENCODINGS[encoding]()
    module = enc.build(policy)
    call = compiled(mode, enc, module)
    inside = np.arange(LIMIT)  # 0..7: exactly up to the limit
    np.testing.assert_allclose(
        call(inside), enc.reference(inside), rtol=0, atol=2e-6, err_msg="inside the limit (0..7)"
    )

    past = np.arange(1, LIMIT + 1)  # 1..8: one past
    name = re.escape(enc.name)
    message = rf"{name} positions \(0\.\.7\); asked for position 8, 1 past the end"
    if mode == "eager":  # known positions: always an error, while tracing, whatever the policy
        with pytest.raises(PositionLimitError, match=message):
            call(past)
        return
    if policy == "error":
        if mode == "checkify":
            with pytest.raises(
                checkify.JaxRuntimeError, match=rf"{name} positions \(0\.\.7\); asked for positions from 1 to 8"
            ):
                call(past)
            return
        with pytest.raises(RUNTIME_ERRORS, match=rf"PositionLimitError: {message}"):
            call(past)
        with pytest.raises(PositionLimitError, match=rf"^{message}$"):
            fp.position_errors(call)(past)
        return
    out = call(past)  # checkify changes nothing for the opt-in policies
    ref = enc.reference(past[:-1])
    np.testing.assert_allclose(out[:-1], ref, rtol=0, atol=2e-6, err_msg="one past the limit: rows in range")
    if policy == "clip":
        np.testing.assert_allclose(out[-1], ref[-1], rtol=0, atol=2e-6, err_msg="clip: position 8 reads row 7")
    else:
        assert np.isnan(out[-1]).all(), "fill: position 8 is NaN"


# ----------------------------------------------------------------------------- real configs under jit


def test_llama3_rope_jits_and_equals_eager():
    q = jnp.asarray(normal((2, 16, 4, 128), seed=0))
    eager = fp.apply_rope(q, LLAMA31)
    assert_ulps(jax.jit(lambda q: fp.apply_rope(q, LLAMA31))(q), eager)
    rope = fp.nnx.RotaryEmbedding(LLAMA31)
    assert_ulps(nnx.jit(lambda m, q: m(q))(rope, q), eager)
    decode = jax.jit(lambda q, s: fp.apply_rope(q, LLAMA31, start=s))  # a traced decoding start
    assert_ulps(decode(q[:, :1], 5), fp.apply_rope(q[:, :1], LLAMA31, start=5))
    with pytest.raises(
        PositionLimitError, match=r"holds 131072 positions .* asked for position 131072, 1 past the end"
    ):
        jax.jit(lambda q: fp.apply_rope(q, LLAMA31, start=131072 - 15))(q)  # static start: trace time
    with pytest.raises(PositionLimitError, match="asked for position 131072, 1 past the end"):
        fp.position_errors(decode)(q[:, :1], 131072)


def test_alibi_with_a_limit_jits():
    cfg = fp.AlibiConfig(12, max_positions=2048)  # BLOOM-like head count, MPT-like limit
    eager = fp.alibi_bias(cfg, 16)
    np.testing.assert_array_equal(jax.jit(lambda: fp.alibi_bias(cfg, 16))(), eager)
    np.testing.assert_array_equal(nnx.jit(lambda m: m(16))(fp.nnx.ALiBiBias(cfg)), eager)
    with pytest.raises(PositionLimitError, match="asked for position 2048, 1 past the end"):
        jax.jit(lambda: fp.alibi_bias(cfg, 1, 2049))()


# ----------------------------------------------------------------------------- widths and ranges


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.uint32])
def test_wide_positions_are_checked_before_any_cast(dtype):
    table = jnp.arange(16.0).reshape(8, 2)
    with pytest.raises(
        PositionLimitError, match=f"asked for position {2**32 + 5 if dtype != np.uint32 else 2**31 + 5}"
    ):
        fp.lookup_positions(table, np.array([2**32 + 5 if dtype != np.uint32 else 2**31 + 5], dtype))


def test_traced_uint32_past_int32_is_an_error_not_a_negative_row():
    table = jnp.arange(16.0).reshape(8, 2)
    f = fp.position_errors(jax.jit(lambda p: fp.lookup_positions(table, p)))
    with pytest.raises(PositionLimitError, match=f"asked for position {2**31 + 5}, "):
        f(jnp.array([2**31 + 5], jnp.uint32))
    clip = jax.jit(lambda p: fp.lookup_positions(table, p, on_overflow="clip"))(jnp.array([2**31 + 5], jnp.uint32))
    np.testing.assert_array_equal(clip, table[7:8])  # clamped to the last row, not wrapped


def test_traced_int64_with_x64_is_checked_before_the_cast():
    script = textwrap.dedent(
        """
        import jax; jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp, numpy as np, flax_posenc as fp
        table = jnp.arange(16.0).reshape(8, 2)
        f = fp.position_errors(jax.jit(lambda p: fp.lookup_positions(table, p)))
        assert np.array_equal(f(jnp.array([5], jnp.int64)), table[5:6])
        try:
            f(jnp.array([2**32 + 5], jnp.int64))
        except fp.PositionLimitError as e:
            print(e)
        clip = jax.jit(lambda p: fp.lookup_positions(table, p, on_overflow="clip"))(jnp.array([2**32 + 5], jnp.int64))
        print(clip.tolist())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "position table holds 8 positions (0..7); asked for position 4294967301, 4294967294 past the end"
    assert lines[1] == "[[14.0, 15.0]]"  # the last row, not row 5


def test_token_type_ids_past_the_table_follow_the_guard():
    block = fp.nnx.TransformerInput.from_arguments(20, DIM, num_positions=8, type_vocab_size=2, rngs=nnx.Rngs(0))
    ids = jnp.zeros((1, 3), jnp.int32)
    with pytest.raises(
        PositionLimitError,
        match=r"^token type table holds 2 types \(0\.\.1\); asked for type 2, 1 past the end$",
    ):
        block(ids, token_type_ids=jnp.array([[0, 1, 2]]))
    f = fp.position_errors(nnx.jit(lambda m, t: m(ids, token_type_ids=t)))
    f(block, jnp.array([[0, 1, 1]]))
    with pytest.raises(PositionLimitError, match="token type table holds 2 types"):
        f(block, jnp.array([[0, 1, 2]]))


def test_reserved_rows_below_the_padding_row_are_an_error():
    """RoBERTa: position -1 is the padding row (row 1); -2 would read the unused row 0."""
    wpe = fp.nnx.LearnedPositionalEmbedding.from_arguments(8, DIM, offset=2, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(wpe(jnp.array([-1])), wpe.embedding[1:2])
    with pytest.raises(
        PositionLimitError,
        match=r"after 2 reserved rows; asked for position -2, below the padding row \(position -1\)$",
    ):
        wpe(jnp.array([-2]))
    with pytest.raises(PositionLimitError, match="asked for position -2, below the padding row"):
        fp.position_errors(jax.jit(lambda p: wpe(p)))(jnp.array([-2, 3]))


# ----------------------------------------------------------------------------- the wrapper and fallbacks


def test_position_errors_passes_other_errors_unchanged():
    def boom(x):
        raise KeyError("not ours")

    with pytest.raises(KeyError, match="not ours"):
        fp.position_errors(boom)(1)
    assert fp.position_errors(jax.jit(lambda x: x + 1))(1) == 2


def test_without_host_callbacks_the_error_policy_poisons_with_nan(monkeypatch):
    from flax_posenc import overflow

    monkeypatch.setattr(overflow, "_CALLBACK_PLATFORMS", frozenset())
    monkeypatch.setattr(overflow, "_warned_poison", False)
    table = jnp.arange(16.0).reshape(8, 2)
    with pytest.warns(RuntimeWarning, match="no host callbacks"):
        out = jax.jit(lambda p: fp.lookup_positions(table, p))(jnp.array([7, 8]))
    np.testing.assert_array_equal(out[0], table[7])
    assert np.isnan(np.asarray(out[1])).all()


def test_static_checks_cost_nothing_at_run_time():
    """Default positions and static starts compile to no position callback (checked while tracing).

    The traced word ids keep their own run-time check (the same as a block without positions).
    """

    def callbacks(block, call, *args):
        graphdef, state = nnx.split(block)
        return jax.jit(lambda s, *a: call(nnx.merge(graphdef, s), *a)).lower(state, *args).as_text().count("callback")

    ids = jnp.zeros((1, 6), jnp.int32)
    block = fp.nnx.TransformerInput.from_arguments(20, DIM, num_positions=8, rngs=nnx.Rngs(0))
    bare = fp.nnx.TransformerInput.from_arguments(20, DIM, position="none", rngs=nnx.Rngs(0))
    words_only = callbacks(bare, lambda m, i: m(i), ids)
    assert words_only > 0  # traced word ids are checked at run time
    assert callbacks(block, lambda m, i: m(i, start=2), ids) == words_only
    traced = callbacks(block, lambda m, i, t: m(i, start=t), ids, 2)
    assert traced > words_only  # the traced start is checked at run time


# ----------------------------------------------------------------------------- NNX and Linen idioms


def test_dropout_follows_train_and_eval():
    block = fp.nnx.TransformerInput.from_arguments(20, DIM, num_positions=8, dropout_rate=0.5, rngs=nnx.Rngs(0))
    ids = jnp.arange(8)[None] % 20
    clean = block(ids)
    block.train()
    assert block.deterministic is False and block.dropout.deterministic is False
    noisy = block(ids)
    assert np.any(np.asarray(noisy) == 0) and not np.array_equal(noisy, clean)
    np.testing.assert_array_equal(block(ids, deterministic=True), clean)  # the call overrides
    block.eval()
    np.testing.assert_array_equal(block(ids), clean)


def test_jitted_training_step_applies_dropout():
    import optax

    block = fp.nnx.TransformerInput.from_arguments(20, DIM, num_positions=8, dropout_rate=0.5, rngs=nnx.Rngs(0))
    block.train()
    optimizer = nnx.Optimizer(block, optax.sgd(0.1), wrt=nnx.Param)

    @nnx.jit
    def step(block, optimizer, ids):
        def loss(block):
            return jnp.sum(block(ids) ** 2)

        value, grads = nnx.value_and_grad(loss)(block)
        optimizer.update(block, grads)
        return value, grads

    ids = jnp.arange(8)[None] % 20
    _, grads = step(block, optimizer, ids)
    g = np.asarray(grads["position_embeddings"][...])
    assert (g == 0).any() and not (g == 0).all()  # dropped units get no gradient


def test_attend_is_the_tied_head_in_both_frameworks():
    block = fp.nnx.TransformerInput.from_arguments(20, DIM, num_positions=8, rngs=nnx.Rngs(0))
    h = jnp.asarray(normal((2, 3, DIM), seed=1))
    expected = np.asarray(h, np.float64) @ np.asarray(block.word_embeddings[...], np.float64).T
    np.testing.assert_allclose(block.attend(h), expected, rtol=1e-5, atol=1e-6)
    linen = fp.linen.TransformerInput.from_arguments(20, DIM, num_positions=8)
    variables = {"params": nnx.to_pure_dict(nnx.state(block, nnx.Param))}
    np.testing.assert_array_equal(linen.apply(variables, h, method="attend"), block.attend(h))
    assert (block.vocab_size, block.dim, block.num_positions) == (20, DIM, 8)


def test_linen_pretrained_is_boxed_like_init(minilm_dir):
    from flax import linen as nn

    module, variables = fp.linen.TransformerInput.from_pretrained(minilm_dir)
    fresh = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))  # boxed, as init's
    assert nn.get_partition_spec(variables) == nn.get_partition_spec(fresh)
    assert nn.get_partition_spec(variables)["params"]["word_embeddings"] == jax.sharding.PartitionSpec("vocab", "embed")
    assert jax.tree.structure(variables) == jax.tree.structure(fresh)


# ----------------------------------------------------------------------------- RoPE layouts, packed positions


def test_rope_hugging_face_layout_and_joint_qk():
    cfg = fp.RopeConfig(head_dim=16, max_position_embeddings=64)
    q = jnp.asarray(normal((2, 10, 4, 16), seed=0))  # (batch, seq, heads, dim)
    k = jnp.asarray(normal((2, 10, 2, 16), seed=1))
    flax_layout = fp.apply_rope(q, cfg)
    hf = jax.jit(lambda x: fp.apply_rope(x, cfg, seq_axis=-2))(q.transpose(0, 2, 1, 3))
    assert_ulps(hf.transpose(0, 2, 1, 3), flax_layout)
    positions = jnp.array([[3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]])
    hf_pos = fp.apply_rope(q.transpose(0, 2, 1, 3), cfg, positions, seq_axis=-2).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(hf_pos, fp.apply_rope(q, cfg, positions))
    rq, rk = jax.jit(lambda q, k: fp.apply_rope_qk(q, k, cfg, positions))(q, k)
    assert_ulps(rq, fp.apply_rope(q, cfg, positions))
    assert_ulps(rk, fp.apply_rope(k, cfg, positions))


def test_rope_hf_layout_matches_transformers():
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = fp.RopeConfig(head_dim=16)
    q = np.random.default_rng(0).standard_normal((1, 2, 6, 16)).astype(np.float32)  # HF: (b, h, s, d)
    cos, sin = fp.rotary_cos_sin(np.arange(6), cfg)
    cos_hf = torch.tensor(np.concatenate([cos, cos], -1))[None]
    sin_hf = torch.tensor(np.concatenate([sin, sin], -1))[None]
    expected, _ = apply_rotary_pos_emb(torch.tensor(q), torch.tensor(q), cos_hf, sin_hf)
    np.testing.assert_allclose(fp.apply_rope(q, cfg, seq_axis=-2), expected.numpy(), rtol=0, atol=1e-6)


def _packed_reference(segment_ids):
    out = np.zeros_like(segment_ids)
    for row, seg in zip(out.reshape(-1, segment_ids.shape[-1]), segment_ids.reshape(-1, segment_ids.shape[-1])):
        for i in range(1, len(seg)):
            row[i] = row[i - 1] + 1 if seg[i] == seg[i - 1] else 0
    return out


def test_packed_positions_restart_each_segment():
    segments = np.random.default_rng(0).integers(0, 3, (4, 32)).cumsum(-1) // 2  # runs of equal ids
    expected = _packed_reference(segments)
    np.testing.assert_array_equal(fp.packed_positions(segments), expected)
    np.testing.assert_array_equal(jax.jit(fp.packed_positions)(segments), expected)
    np.testing.assert_array_equal(jax.vmap(fp.packed_positions)(segments), expected)
    # it feeds every encoding: each packed sequence is encoded as if it stood alone
    cfg = fp.RopeConfig(head_dim=8, max_position_embeddings=32)
    x = jnp.ones((1, 7, 1, 8))
    packed = jax.jit(lambda x, s: fp.apply_rope(x, cfg, fp.packed_positions(s)))(x, jnp.array([[1, 1, 1, 2, 2, 2, 2]]))
    assert_ulps(packed[0, 3:], fp.apply_rope(x[:, :4], cfg)[0])


def test_pretrained_block_trains_with_dropout(minilm_dir):
    block = fp.nnx.TransformerInput.from_pretrained(minilm_dir, dropout_rate=0.5, rngs=nnx.Rngs(dropout=3))
    ids = jnp.arange(16)[None] + 1000
    clean = block(ids)
    block.train()
    noisy = nnx.jit(lambda m, i: m(i))(block, ids)
    dropped = np.asarray(noisy) == 0
    assert 0.3 < dropped.mean() < 0.7  # about half the units dropped, the rest scaled by 2
    assert_ulps(np.asarray(noisy)[~dropped], 2 * np.asarray(clean)[~dropped], ulps=8)  # jit vs eager LayerNorm


# ----------------------------------------------------------------------------- every table, one guard
# Word ids, token types and positions are all table lookups: the user's policy governs each, the
# run-time check survives every table shape (XLA drops the index of a gather from a one-row
# table, and would drop a check riding on it), and each message names the table and its unit.


def _block(positions_from="index", type_vocab_size=2, vocab=6, policy="error"):
    return fp.nnx.TransformerInput.from_arguments(
        vocab,
        DIM,
        num_positions=8,
        position_offset=2,
        positions_from=positions_from,
        pad_token_id=1,
        type_vocab_size=type_vocab_size,
        on_overflow=policy,
        rngs=nnx.Rngs(0),
    )


POSITIONS_FROM = ("index", "non_padding_ids", "attention_mask")


@pytest.mark.parametrize("positions_from", POSITIONS_FROM)
@pytest.mark.parametrize("rows", [1, 2])
def test_token_types_follow_the_users_policy_under_jit(positions_from, rows):
    """Each bad type (past the end, below the first row) through the same compiled programs."""
    ids = jnp.array([[3, 4, 2]])
    noun = "type" if rows == 1 else "types"
    block = _block(positions_from, rows)
    f = fp.position_errors(nnx.jit(lambda m, t: m(ids, token_type_ids=t)))
    f(block, jnp.zeros((1, 3), jnp.int32))  # in range: no false alarm
    table = np.asarray(block.token_type_embeddings[...])
    assert table.shape == (rows, DIM)
    opt_in = nnx.jit(lambda m, t: m(ids, token_type_ids=t))
    clip_block, fill_block = _block(positions_from, rows, policy="clip"), _block(positions_from, rows, policy="fill")
    for bad in (5, -1):
        types = jnp.array([[0, 0, bad]], jnp.int32)
        where = "below the first row" if bad < 0 else f"{bad - rows + 1} past the end"
        message = f"^token type table holds {rows} {noun} \\(0\\.\\.{rows - 1}\\); asked for type {bad}, {where}$"
        with pytest.raises(PositionLimitError, match=message):  # eager: known ids
            block(ids, token_type_ids=types)
        with pytest.raises(PositionLimitError, match=message):
            f(block, types)
        clip = np.asarray(opt_in(clip_block, types))
        fill = np.asarray(opt_in(fill_block, types))
        assert np.isfinite(clip).all(), f"clip, type {bad}"
        assert np.isnan(fill[0, 2]).all() and np.isfinite(fill[0, :2]).all(), f"fill, type {bad}"


@pytest.mark.parametrize("positions_from", POSITIONS_FROM)
@pytest.mark.parametrize("vocab", [1, 6])
@pytest.mark.parametrize("mode", ["eager", "jit", "vmap"])
def test_word_ids_outside_the_vocabulary_are_an_error(positions_from, vocab, mode):
    """Each bad id (one past the vocabulary, -1) through the same compiled program."""
    block = _block(positions_from, vocab=vocab)
    noun = "id" if vocab == 1 else "ids"
    call = {
        "eager": lambda i: block(i),
        "jit": fp.position_errors(nnx.jit(lambda m, i: m(i))).__get__(block),
        "vmap": fp.position_errors(nnx.jit(lambda m, i: nnx.vmap(lambda m, r: m(r), in_axes=(None, 0))(m, i))).__get__(
            block
        ),
    }[mode]
    call(jnp.zeros((1, 3), jnp.int32))  # in range: no false alarm
    for bad in (vocab, -1):
        ids = jnp.array([[0, 0, bad]], jnp.int32)
        where = "below the first row" if bad < 0 else "1 past the end"
        message = f"^word embedding table holds {vocab} {noun} \\(0\\.\\.{vocab - 1}\\); asked for id {bad}, {where}$"
        with pytest.raises(PositionLimitError, match=message):
            call(ids)


@pytest.mark.parametrize("policy", ["clip", "fill"])
def test_word_ids_follow_the_opt_in_policies(policy):
    block = _block(policy=policy)
    out = np.asarray(nnx.jit(lambda m, i: m(i))(block, jnp.array([[0, 6]])))
    if policy == "fill":
        assert np.isnan(out[0, 1]).all() and np.isfinite(out[0, 0]).all()
    else:
        same = np.asarray(nnx.jit(lambda m, i: m(i))(block, jnp.array([[0, 5]])))
        np.testing.assert_array_equal(out, same)  # clamped to the last row, as asked


ONE_ROW_LOOKUPS = {
    "lookup_positions": lambda p: fp.lookup_positions(jnp.ones((1, 3)), p),
    "lookup_positions offset": lambda p: fp.lookup_positions(jnp.ones((3, 3)), p, offset=2),
    "slice_positions start": lambda p: lookup.slice_positions(jnp.ones((1, 3)), 1, start=p[0]),
    "slice whole table": lambda p: lookup.slice_positions(jnp.ones((2, 3)), 2, start=p[0]),
    "constant 4-row table": lambda p: fp.lookup_positions(jnp.zeros((4, 3)), p * 4),
    "slice of a constant table": lambda p: lookup.slice_positions(jnp.zeros((8, 3)), 2, start=p[0] * 7),
    "module": lambda p: fp.nnx.LearnedPositionalEmbedding.from_arguments(1, 3, rngs=nnx.Rngs(0))(p),
}


@pytest.mark.parametrize("name", list(ONE_ROW_LOOKUPS))
@pytest.mark.parametrize("bad", [1, 5, -3])
def test_one_row_tables_keep_their_run_time_check(name, bad):
    f = fp.position_errors(jax.jit(ONE_ROW_LOOKUPS[name]))
    f(jnp.array([0]))  # in range
    with pytest.raises(PositionLimitError, match="asked for position"):
        f(jnp.array([bad]))


def test_zero_row_tables_are_refused_in_one_line():
    with pytest.raises(
        ValueError, match=r"^position table: expected at least one usable position after 0 reserved rows, found 0 rows$"
    ):
        fp.lookup_positions(jnp.ones((0, 3)), jnp.array([0]))
    with pytest.raises(ValueError, match=r"^type_vocab_size: expected a non-negative integer, got -1$"):
        fp.nnx.TransformerInput.from_arguments(6, DIM, num_positions=8, type_vocab_size=-1, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"^token_type_ids: this block has no token-type embedding"):
        _block(type_vocab_size=0)(jnp.array([[0]]), token_type_ids=jnp.array([[0]]))
    with pytest.raises(ValueError, match=r"^vocab_size: expected a positive integer, got 0$"):
        fp.nnx.TransformerInput.from_arguments(0, DIM, num_positions=8, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"token_type_ids": jnp.zeros((1, 3))},
            TypeError,
            "^token_type_ids: expected an integer array, got dtype float32$",
        ),
        (
            {"position_ids": jnp.zeros((1, 3))},
            TypeError,
            "^position_ids: expected an integer array, got dtype float32$",
        ),
        (
            {"position_ids": jnp.zeros((1, 4), jnp.int32)},
            ValueError,
            r"^position_ids: expected a shape that broadcasts to input_ids' \(1, 3\), found \(1, 4\)$",
        ),
        (
            {"position_ids": jnp.zeros((2, 3), jnp.int32)},
            ValueError,
            r"^position_ids: expected a shape that broadcasts to input_ids' \(1, 3\), found \(2, 3\)$",
        ),
        (
            {"token_type_ids": jnp.zeros((5,), jnp.int32)},
            ValueError,
            r"^token_type_ids: expected a shape that broadcasts to input_ids' \(1, 3\), found \(5,\)$",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_block_arguments_are_named_in_their_errors(kwargs, error, message, mode):
    block = _block()
    call = (
        (lambda: block(jnp.array([[0, 1, 2]]), **kwargs))
        if mode == "eager"
        else (lambda: nnx.jit(lambda m, kw: m(jnp.array([[0, 1, 2]]), **kw))(block, kwargs))
    )
    with pytest.raises(error) as info:
        call()
    assert re.match(message, str(info.value).splitlines()[0])  # (jax appends its traceback note under jit)


# ----------------------------------------------------------------------------- sinusoids: decoding and padding


@pytest.mark.parametrize("positions_from", POSITIONS_FROM)
def test_sinusoidal_block_decodes_with_a_static_start(positions_from):
    """Step by step with a static start (the constant path) and a traced one: word row + sin(start)."""
    block = fp.nnx.TransformerInput.from_arguments(
        6, DIM, position="sinusoidal", num_positions=8, positions_from=positions_from, pad_token_id=1, rngs=nnx.Rngs(0)
    )
    words = np.asarray(block.word_embeddings[...], np.float64)
    traced = nnx.jit(lambda m, i, s: m(i, start=s))
    for s in range(8):
        ids = jnp.array([[2 + s % 3]])
        expected = words[2 + s % 3] + _sinusoid64([s])[0]
        static = nnx.jit(lambda m, i, s=s: m(i, start=s))(block, ids)  # start closed over: static
        np.testing.assert_allclose(np.asarray(static)[0, 0], expected, atol=2e-6)
        np.testing.assert_allclose(np.asarray(traced(block, ids, s))[0, 0], expected, atol=2e-6)
    with pytest.raises(PositionLimitError, match="position table holds 8 positions"):
        nnx.jit(lambda m, i: m(i, start=8))(block, jnp.array([[2]]))


@pytest.mark.parametrize("positions_from", ["non_padding_ids", "attention_mask"])
@pytest.mark.parametrize("mode", ["static", "traced", "vmap"])
def test_sinusoidal_block_with_padding_aware_positions_is_never_overrun(positions_from, mode):
    block = fp.nnx.TransformerInput.from_arguments(
        6, DIM, position="sinusoidal", num_positions=8, positions_from=positions_from, pad_token_id=1, rngs=nnx.Rngs(0)
    )
    ids = jnp.array([[2, 3, 4]])
    message = "^position table holds 8 positions \\(0\\.\\.7\\); asked for position 8, 1 past the end"
    if mode == "static":
        nnx.jit(lambda m, i: m(i, start=5))(block, ids)  # positions 5..7: fits
        with pytest.raises(PositionLimitError, match=message):
            nnx.jit(lambda m, i: m(i, start=6))(block, ids)  # position 8
    elif mode == "traced":
        f = fp.position_errors(nnx.jit(lambda m, i, s: m(i, start=s)))
        f(block, ids, 5)
        with pytest.raises(PositionLimitError, match=message):
            f(block, ids, 6)
    else:
        f = fp.position_errors(
            nnx.jit(lambda m, i, s: nnx.vmap(lambda m, i, s: m(i, start=s), in_axes=(None, 0, 0))(m, i, s))
        )
        f(block, jnp.stack([ids, ids]), jnp.array([0, 5]))
        with pytest.raises(PositionLimitError, match=message):
            f(block, jnp.stack([ids, ids]), jnp.array([0, 6]))
