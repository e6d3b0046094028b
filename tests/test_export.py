"""Export and cross-platform lowering with the overflow guard kept (flax_posenc/portable.py).

For every public jittable function and module with traced positions (NNX and Linen shells, and
the example Llama's prefill and decode steps), under the default policy (``on_overflow="error"``):

- ``fp.export`` for ``cpu``, ``cuda`` and ``tpu`` at once (multi-platform lowering of each),
  ``.serialize()``, ``jax.export.deserialize``, run on CPU with ``fp.call_exported``: in range,
  the outputs equal ``jax.jit`` of the same function (the callback form, which
  tests/test_guard_matrix.py checks against float64 numpy) bit for bit; out of range, the same
  one-line ``PositionLimitError`` as ``fp.position_errors(jax.jit(f))``;
- ``jax.jit(fp.checked(f)).trace(...).lower(lowering_platforms=(p,))`` for ``cuda`` and ``tpu``
  from this CPU-only machine;
- a function jitted (and cached) with the host callback first is traced again for export;
- arguments of another dtype or shape than the exported signature: one line.

The plain ``jax.export.export`` of the callback form still fails (JAX cannot serialize host
callbacks): that is why ``fp.export`` exists. Sharding on 8 host devices: tests/scripts/sharded_export.py.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import flax_posenc as fp

P, D, H = 8, 4, 2  # every limit: 8 positions (0..7)
ROPE = fp.RopeConfig(head_dim=D, max_position_embeddings=P)
ALIBI = fp.AlibiConfig(H, max_positions=P)
MROPE = fp.MRopeConfig(fp.RopeConfig(head_dim=8, max_position_embeddings=P), mrope_section=(2, 1, 1))
TABLE = jnp.asarray(np.random.default_rng(0).standard_normal((P, D)), jnp.float32)
X = jnp.asarray(np.random.default_rng(1).standard_normal((1, 3, H, D)), jnp.float32)
X8 = jnp.asarray(np.random.default_rng(2).standard_normal((1, 3, H, 8)), jnp.float32)
IDS = jnp.array([[3, 1, 4]], jnp.int32)
GOOD, BAD = jnp.array([[5, 6, 7]], jnp.int32), jnp.array([[6, 7, 8]], jnp.int32)
GOOD3, BAD3 = jnp.broadcast_to(GOOD, (3, 1, 3)), jnp.broadcast_to(BAD, (3, 1, 3))


def _weights(shape_dtypes, seed: int = 0):
    """Standard normal numpy values for a tree of ``ShapeDtypeStruct`` (weights of any value do:
    drawing them with ``jax.random`` would compile one program per shape)."""
    rng = np.random.default_rng(seed)

    def fill(leaf):
        assert jnp.issubdtype(leaf.dtype, jnp.floating), leaf
        return jnp.asarray(rng.standard_normal(leaf.shape), leaf.dtype)

    return jax.tree.map(fill, shape_dtypes)


def _built(make):
    """``make()`` built abstractly (``nnx.eval_shape``), its parameters then set by :func:`_weights`."""
    model = nnx.eval_shape(make)
    nnx.update(model, _weights(nnx.state(model)))
    return model


#: built once, lazily (collection stays cheap), outside any trace: their weights are constants of
#: the exported programs
_NNX_BUILDERS = {
    "learned": lambda: _built(lambda: fp.nnx.LearnedPositionalEmbedding.from_arguments(P, D, rngs=nnx.Rngs(0))),
    "sinusoid": lambda: fp.nnx.SinusoidalPositionalEncoding.from_arguments(D, num_positions=P),
    "block": lambda: _built(lambda: fp.nnx.TransformerInput.from_arguments(20, D, num_positions=P, rngs=nnx.Rngs(0))),
    "rotary": lambda: fp.nnx.RotaryEmbedding(ROPE),
    "alibi": lambda: fp.nnx.ALiBiBias(ALIBI, causal=False),
    "relative": lambda: _built(lambda: fp.nnx.RelativePositionBias.from_arguments(H, rngs=nnx.Rngs(0))),
}


@functools.cache
def _nnx(name):
    return _NNX_BUILDERS[name]()


def _linen(module, *args, **kwargs):
    """``module.apply`` with variables shaped (and boxed) as ``init``'s on the same (in-range)
    arguments, their values from :func:`_weights`."""
    variables = _weights(jax.eval_shape(module.init, jax.random.key(0), *args, **kwargs))
    return lambda *a, **k: module.apply(variables, *a, **k)


_LINEN_BUILDERS = {
    "learned": lambda: _linen(
        fp.linen.LearnedPositionalEmbedding(fp.PositionSpec("learned", dim=D, num_positions=P)), GOOD
    ),
    "block": lambda: _linen(fp.linen.TransformerInput.from_arguments(20, D, num_positions=P), IDS, position_ids=GOOD),
    "sinusoid": lambda: _linen(
        fp.linen.SinusoidalPositionalEncoding(fp.PositionSpec("sinusoidal", dim=D, num_positions=P)), GOOD
    ),
    "rotary": lambda: _linen(fp.linen.RotaryEmbedding(ROPE), X, GOOD),
    "alibi": lambda: _linen(fp.linen.ALiBiBias(ALIBI, causal=False), query_positions=GOOD[0], key_positions=GOOD[0]),
}


@functools.cache
def _linen_apply(name):
    return _LINEN_BUILDERS[name]()


@pytest.fixture(scope="module", autouse=True)
def _built_outside_any_trace():
    """Every module built before the first test traces one (built inside a trace, its weights would
    be tracers of that trace)."""
    for name in _NNX_BUILDERS:
        _nnx(name)
    for name in _LINEN_BUILDERS:
        _linen_apply(name)


#: name -> (function of the positions p, in-range p, out-of-range p, start of the message)
CASES = {
    "sinusoidal_encoding": (lambda p: fp.sinusoidal_encoding(p, D, num_positions=P), "sinusoidal encoding holds 8"),
    "lookup_positions": (lambda p: fp.lookup_positions(TABLE, p), "position table holds 8"),
    "rotary_cos_sin": (lambda p: fp.rotary_cos_sin(p, ROPE), "default RoPE"),
    "apply_rope": (lambda p: fp.apply_rope(X, ROPE, positions=p), "default RoPE"),
    "apply_rope_qk": (lambda p: fp.apply_rope_qk(X, X, ROPE, positions=p), "default RoPE"),
    "apply_rope/start": (lambda p: fp.apply_rope(X, ROPE, start=p[0, 0]), "default RoPE"),
    "alibi_bias_from_positions": (
        lambda p: fp.alibi_bias_from_positions(ALIBI, p[0], GOOD[0], causal=False),
        "ALiBi query positions",
    ),
    "mrope_cos_sin": (lambda p: fp.mrope_cos_sin(jnp.broadcast_to(p, (3, 1, 3)), MROPE), "default RoPE"),
    "apply_mrope": (lambda p: fp.apply_mrope(X8, MROPE, jnp.broadcast_to(p, (3, 1, 3))), "default RoPE"),
    "transformer_input": (
        lambda p: fp.block.transformer_input(
            fp.InputSpec.from_arguments(20, D, num_positions=P),
            {"word_embeddings": TABLE.repeat(3, 0)[:20], "position_embeddings": TABLE},
            IDS,
            position_ids=p,
        ),
        "position table holds 8",
    ),
    "nnx.LearnedPositionalEmbedding": (lambda p: _nnx("learned")(p), "position table holds 8"),
    "nnx.LearnedPositionalEmbedding/start": (lambda p: _nnx("learned")(length=3, start=p[0, 0]), "position table"),
    "nnx.SinusoidalPositionalEncoding": (lambda p: _nnx("sinusoid")(p), "sinusoidal encoding holds 8"),
    "nnx.TransformerInput": (lambda p: _nnx("block")(IDS, position_ids=p), "position table holds 8"),
    "nnx.TransformerInput/ids": (lambda p: _nnx("block")(p * 2), "word embedding table holds 20"),
    "nnx.RotaryEmbedding": (lambda p: _nnx("rotary")(X, p), "default RoPE"),
    "nnx.ALiBiBias": (lambda p: _nnx("alibi")(query_positions=p[0], key_positions=GOOD[0]), "ALiBi query positions"),
    "linen.LearnedPositionalEmbedding": (lambda p: _linen_apply("learned")(p), "position table holds 8"),
    "linen.SinusoidalPositionalEncoding": (lambda p: _linen_apply("sinusoid")(p), "position table holds 8"),
    "linen.TransformerInput": (lambda p: _linen_apply("block")(IDS, position_ids=p), "position table holds 8"),
    "linen.RotaryEmbedding": (lambda p: _linen_apply("rotary")(X, p), "default RoPE"),
    "linen.ALiBiBias": (
        lambda p: _linen_apply("alibi")(query_positions=p[0], key_positions=GOOD[0]),
        "ALiBi query positions",
    ),
}
#: modules and functions whose traced argument is not a position with a limit (exported all the same)
NO_LIMIT = {
    "relative_position_bias": lambda p: fp.relative_position_bias(TABLE[:, :H].repeat(4, 0), 3, 3, query_start=p[0, 0]),
    "packed_positions": lambda p: fp.packed_positions(p),
    "deberta_relative_positions": lambda p: fp.deberta_relative_positions(
        3, 3, position_buckets=4, max_relative_positions=P, query_positions=p[0]
    ),
    "nnx.RelativePositionBias": lambda p: _nnx("relative")(3, 3, query_start=p[0, 0]),
}


def _bad_for(name):
    return jnp.array([[6, 7, 11]], jnp.int32) if name == "nnx.TransformerInput/ids" else BAD


def _equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _close(a, b, ulps: int = 4):
    """Equal within ``ulps`` float32 ulps of each output's scale (the weights of an exported
    model are constants of its program, which XLA may fold in another order than jit's arguments)."""
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        y = np.asarray(y)
        scale = np.spacing(np.float32(np.abs(y).max())) if y.size and y.dtype.kind == "f" else 0
        np.testing.assert_allclose(np.asarray(x), y, rtol=0, atol=ulps * scale)


@pytest.fixture(scope="module")
def exported():
    """name -> deserialized program (exported for cpu, cuda and tpu, serialized to bytes)."""
    programs = {}
    for name, (fn, _) in CASES.items():
        blob = fp.export(fn, platforms=("cpu", "cuda", "tpu"))(GOOD).serialize()
        programs[name] = jax.export.deserialize(blob)
    return programs


@pytest.mark.parametrize("name", list(CASES))
def test_exported_program_keeps_the_guard(exported, name):
    fn, message = CASES[name]
    program = exported[name]
    assert tuple(program.platforms) == ("cpu", "cuda", "tpu")
    jitted = jax.jit(fn)  # one program for both calls
    _equal(fp.call_exported(program, GOOD), jitted(GOOD))
    bad = _bad_for(name)
    with pytest.raises(fp.PositionLimitError) as by_callback:
        fp.position_errors(jitted)(bad)
    with pytest.raises(fp.PositionLimitError) as by_export:
        fp.call_exported(program, bad)
    assert str(by_export.value) == str(by_callback.value)
    assert "\n" not in str(by_export.value)
    if message is not None:
        assert str(by_export.value).startswith(message)


@pytest.mark.parametrize("name", list(NO_LIMIT))
def test_functions_without_a_limit_export_too(name):
    fn = NO_LIMIT[name]
    program = jax.export.deserialize(fp.export(fn, platforms=("cpu", "cuda", "tpu"))(GOOD).serialize())
    _equal(fp.call_exported(program, GOOD), jax.jit(fn)(GOOD))


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("name", ["apply_rope/start", "nnx.TransformerInput"])
def test_lowers_for_another_platform(name, platform):
    fn = CASES[name][0]
    lowered = jax.jit(fp.checked(fn)).trace(GOOD).lower(lowering_platforms=(platform,))
    text = lowered.as_text()
    assert "callback" not in text  # the check is a value: nothing calls back to this host
    # ... and the plain callback form cannot (JAX: the callback's platform is this host's)
    with pytest.raises(Exception, match="platform|callback"):
        jax.jit(fn).trace(GOOD).lower(lowering_platforms=(platform,))


def test_plain_export_of_the_callback_form_fails_and_fp_export_retraces_a_cached_jit():
    f = jax.jit(lambda q, p: fp.apply_rope(q, ROPE, positions=p))
    f(X, GOOD)  # cached with the host callback
    with pytest.raises(NotImplementedError, match="host_callbacks"):
        jax.export.export(f, platforms=("cpu",))(X, GOOD)
    program = jax.export.deserialize(fp.export(f, platforms=("cpu",))(X, GOOD).serialize())
    _equal(fp.call_exported(program, X, GOOD), f(X, GOOD))
    with pytest.raises(fp.PositionLimitError, match="asked for position 8, 1 past the end"):
        fp.call_exported(program, X, BAD)


def test_arguments_outside_the_exported_signature_are_one_line():
    program = fp.export(lambda p: fp.lookup_positions(TABLE, p), platforms=("cpu",))(GOOD)
    with pytest.raises(TypeError, match=r"^exported program: argument 0 expected int32\[1, 3\], found int16\[1, 3\]$"):
        fp.call_exported(program, GOOD.astype(jnp.int16))
    with pytest.raises(TypeError, match=r"^exported program: argument 0 expected int32\[1, 3\], found int32\[1, 4\]$"):
        fp.call_exported(program, jnp.zeros((1, 4), jnp.int32))


def test_vmap_and_scan_inside_the_exported_function():
    def decode(p):  # a scan over steps with a traced counter, inside a vmap over rows
        def step(carry, t):
            return carry, fp.apply_rope(X[0], ROPE, start=t)

        return jax.vmap(lambda row: jax.lax.scan(step, 0, row)[1])(p)

    program = jax.export.deserialize(fp.export(decode, platforms=("cpu", "tpu"))(GOOD3[:, 0]).serialize())
    jitted = jax.jit(decode)
    _equal(fp.call_exported(program, GOOD3[:, 0] - 5), jitted(GOOD3[:, 0] - 5))
    bad = (GOOD3[:, 0] - 5).at[1, 2].set(6)  # row 1, step 2: positions 6..8 (seq 3)
    with pytest.raises(fp.PositionLimitError) as by_callback:
        fp.position_errors(jitted)(bad)
    with pytest.raises(fp.PositionLimitError) as by_export:
        fp.call_exported(program, bad)
    assert str(by_export.value) == str(by_callback.value)


def test_report_structure_survives_serialization():
    program = jax.export.deserialize(fp.export(CASES["apply_rope_qk"][0], platforms=("cpu",))(GOOD).serialize())
    report, _ = program.call(BAD)
    assert isinstance(report, fp.PositionReport) and report.failed
    report, _ = program.call(GOOD)
    assert not report.failed
    report.throw()  # nothing to raise


# ----------------------------------------------------------------------------- the example Llama


@pytest.fixture(scope="module")
def llama():
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples" / "models"))
    import llama

    config = {"hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1}
    config.update(num_hidden_layers=2, vocab_size=32, rms_norm_eps=1e-6)
    return _built(lambda: llama.Llama(config, fp.RopeConfig(head_dim=4, max_position_embeddings=P), rngs=nnx.Rngs(0)))


def test_llama_prefill_and_decode_steps_export(llama):
    cache = llama.init_cache(1, P)
    key_mask = jnp.ones((1, P), bool)

    def prefill(ids, positions):  # the weights are constants of the program
        return llama(ids, key_mask, cache=cache, start=0, positions=positions)

    def decode(cache, token, start, positions):
        return llama(token, key_mask, cache=cache, start=start, positions=positions)

    ids = jnp.array([[1, 2, 3]], jnp.int32)
    pre = jax.export.deserialize(fp.export(prefill, platforms=("cpu", "cuda", "tpu"))(ids, GOOD - 5).serialize())
    logits, new_cache = fp.call_exported(pre, ids, GOOD - 5)
    _close((logits, new_cache), jax.jit(prefill)(ids, GOOD - 5))
    with pytest.raises(fp.PositionLimitError, match="asked for position 8, 1 past the end"):
        fp.call_exported(pre, ids, BAD)

    token, start = jnp.array([[4]], jnp.int32), jnp.int32(3)
    args = (new_cache, token, start, jnp.array([[3]], jnp.int32))
    step = jax.export.deserialize(fp.export(decode, platforms=("cpu", "cuda", "tpu"))(*args).serialize())
    _close(fp.call_exported(step, *args), jax.jit(decode)(*args))
    with pytest.raises(fp.PositionLimitError, match="asked for position 8, 1 past the end"):
        fp.call_exported(step, *args[:3], jnp.array([[8]], jnp.int32))


# ----------------------------------------------------------------------------- sharded


def test_sharded_export_on_eight_host_devices():
    script = Path(__file__).parent / "scripts" / "sharded_export.py"
    env_flags = "--xla_force_host_platform_device_count=8"
    import os

    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {env_flags}".strip()}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["devices"] == 8
    assert result["out_devices"] == 8  # the output stays sharded over the mesh
    assert result["max_abs_diff"] == 0.0
    assert result["error"] == result["callback_error"]
    assert result["error"].startswith("default RoPE (max_position_embeddings 64) holds 64 positions (0..63)")


def test_two_failed_checks_report_the_first_in_program_order():
    """Two tables (8 rows, then 4 rows): row 0 fails only the second check, row 1 fails the first.
    A report batched by ``jax.vmap(fp.checked(...))`` holds one failed check per row; it raises the
    first check's error in program order (the 8-row table's), not the first row's; swapped, the other.
    Exported with the vmap inside, the program says the same."""
    small = TABLE[:4]
    bad = jnp.asarray([[1, 2, 5], [1, 2, 8]], jnp.int32)  # row 0: past the 4 rows only; row 1: past both

    def first_big(r):
        return fp.lookup_positions(TABLE, r), fp.lookup_positions(small, r)

    def first_small(r):
        return fp.lookup_positions(small, r), fp.lookup_positions(TABLE, r)

    for fn, holds in ((first_big, "holds 8 positions (0..7)"), (first_small, "holds 4 positions (0..3)")):
        report, _ = jax.vmap(fp.checked(fn))(bad)
        assert np.asarray(report.entries[0][0]).shape == (2,)  # one check per row
        with pytest.raises(fp.PositionLimitError) as batched:
            report.throw()
        assert holds in str(batched.value), str(batched.value)
        program = jax.export.deserialize(fp.export(jax.vmap(fn), platforms=("cpu",))(bad).serialize())
        with pytest.raises(fp.PositionLimitError) as by_export:
            fp.call_exported(program, bad)
        assert holds in str(by_export.value), str(by_export.value)
