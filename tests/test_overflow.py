"""The overflow rule: a position past a table is never clamped or NaN unless asked for."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.experimental import checkify

import flax_posenc as fp
from flax_posenc import PositionLimitError
from flax_posenc.limits import check_positions

# what jax raises for a host callback's exception: JaxRuntimeError, or ValueError on its fast path
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)

TABLE = jnp.arange(40.0).reshape(10, 4)  # 10 positions


class TestStatic:
    def test_exactly_at_the_limit_fits(self):
        np.testing.assert_array_equal(fp.lookup.slice_positions(TABLE, 10), TABLE)
        np.testing.assert_array_equal(fp.lookup_positions(TABLE, jnp.array([9])), TABLE[9:])

    def test_one_past_the_limit(self):
        with pytest.raises(
            PositionLimitError, match=r"holds 10 positions \(0\.\.9\); asked for position 10, 1 past the end"
        ):
            fp.lookup.slice_positions(TABLE, 11)
        with pytest.raises(PositionLimitError, match="asked for position 10, 1 past the end"):
            fp.lookup_positions(TABLE, jnp.array([3, 10]))

    def test_start_offset_past_the_limit(self):
        with pytest.raises(PositionLimitError, match="asked for position 11, 2 past the end"):
            fp.lookup.slice_positions(TABLE, 4, start=8)

    def test_negative(self):
        with pytest.raises(PositionLimitError, match="asked for position -1, below the first row"):
            fp.lookup_positions(TABLE, jnp.array([-1, 2]))

    def test_reserved_rows_counted(self):
        with pytest.raises(
            PositionLimitError, match=r"holds 8 positions \(0\.\.7\) after 2 reserved rows; asked for position 8"
        ):
            fp.lookup.slice_positions(TABLE, 9, offset=2)
        # padding (-1) reaches the reserved row offset-1, as RoBERTa/OPT need
        np.testing.assert_array_equal(fp.lookup_positions(TABLE, jnp.array([-1]), offset=2), TABLE[1:2])

    def test_static_length_checked_at_trace_time_under_jit(self):
        f = jax.jit(lambda t: fp.lookup.slice_positions(t, 11))
        with pytest.raises(PositionLimitError):
            f(TABLE)

    def test_named_table_in_message(self):
        with pytest.raises(PositionLimitError, match=r"^gpt2 position table \(wpe.weight\) holds 1024 positions"):
            fp.lookup.slice_positions(jnp.zeros((1024, 2)), 1025, name="gpt2 position table (wpe.weight)")

    def test_unknown_policy(self):
        with pytest.raises(ValueError, match=r"on_overflow: expected one of \('error', 'clip', 'fill'\), got 'wrap'"):
            fp.lookup_positions(TABLE, jnp.array([1]), on_overflow="wrap")


class TestTraced:
    def test_checkify_reports_overflow(self):
        f = jax.jit(checkify.checkify(lambda p: fp.lookup_positions(TABLE, p)))
        with fp.checkify_errors():  # traced here: the check becomes a checkify.check
            err, _ = f(jnp.array([0, 10]))
        with pytest.raises(
            checkify.JaxRuntimeError, match=r"holds 10 positions \(0\.\.9\); asked for positions from 0 to 10"
        ):
            err.throw()
        err, out = f(jnp.array([0, 9]))
        err.throw()  # in range: no error
        np.testing.assert_array_equal(out, TABLE[jnp.array([0, 9])])

    def test_plain_checkify_still_fails_loudly(self):
        f = jax.jit(checkify.checkify(lambda p: fp.lookup_positions(TABLE, p)))
        with pytest.raises(PositionLimitError, match=r"asked for position 10, 1 past the end"):
            fp.position_errors(f)(jnp.array([0, 10]))

    def test_checkify_reports_negative(self):
        f = jax.jit(checkify.checkify(lambda p: fp.lookup_positions(TABLE, p)))
        with fp.checkify_errors():
            err, _ = f(jnp.array([-3]))
        with pytest.raises(checkify.JaxRuntimeError, match="from -3 to -3"):
            err.throw()

    def test_without_checkify_the_call_fails_at_run_time(self):
        f = jax.jit(lambda p: fp.lookup_positions(TABLE, p))
        np.testing.assert_array_equal(f(jnp.array([1])), TABLE[1:2])  # compiles and runs
        with pytest.raises(
            RUNTIME_ERRORS,
            match=r"PositionLimitError: position table holds 10 positions \(0\.\.9\); asked for position 10, 1 past the end",
        ):
            jax.block_until_ready(f(jnp.array([10])))
        with pytest.raises(
            PositionLimitError,
            match=r"^position table holds 10 positions \(0\.\.9\); asked for position -3, below the first row$",
        ):
            fp.position_errors(f)(jnp.array([-3]))

    def test_clip_and_fill_only_when_asked(self):
        clip = jax.jit(lambda p: fp.lookup_positions(TABLE, p, on_overflow="clip"))(jnp.array([12]))
        np.testing.assert_array_equal(clip, TABLE[9:10])
        fill = jax.jit(lambda p: fp.lookup_positions(TABLE, p, on_overflow="fill"))(jnp.array([12]))
        assert np.isnan(np.asarray(fill)).all()

    def test_traced_start_of_a_decoding_loop(self):
        f = fp.position_errors(jax.jit(lambda s: fp.lookup.slice_positions(TABLE, 3, start=s)))
        np.testing.assert_array_equal(f(7), TABLE[7:10])
        with pytest.raises(PositionLimitError, match="asked for position 10, 1 past the end"):
            f(8)

    def test_eager_vmap_still_checks(self):
        with pytest.raises(PositionLimitError, match="asked for position 10, 1 past the end"):
            fp.position_errors(jax.vmap(lambda p: fp.lookup_positions(TABLE, p)))(jnp.array([[1], [10]]))


class TestModules:
    def test_nnx_learned_static(self):
        wpe = fp.nnx.LearnedPositionalEmbedding.from_arguments(1024, 8, rngs=nnx.Rngs(0))
        assert wpe(length=1024).shape == (1024, 8)
        with pytest.raises(PositionLimitError, match="asked for position 1024, 1 past the end"):
            wpe(length=1025)
        with pytest.raises(PositionLimitError, match="asked for position 1024"):
            wpe(jnp.array([1024]))

    def test_linen_learned_static(self):
        wpe = fp.linen.LearnedPositionalEmbedding.from_arguments(512, 8)
        variables = wpe.init(jax.random.key(0), length=4)
        assert wpe.apply(variables, length=512).shape == (512, 8)
        with pytest.raises(PositionLimitError, match="asked for position 512"):
            wpe.apply(variables, length=513)

    def test_sinusoid_limit_is_optional(self):
        free = fp.nnx.SinusoidalPositionalEncoding.from_arguments(8)
        assert free(jnp.array([2**30])).shape == (1, 8)
        bounded = fp.nnx.SinusoidalPositionalEncoding.from_arguments(8, num_positions=512)
        with pytest.raises(PositionLimitError, match="asked for position 512"):
            bounded(length=513)
        with pytest.raises(PositionLimitError, match="asked for position 600, 89 past the end"):
            fp.position_errors(jax.jit(lambda p: bounded(p)))(jnp.array([600]))

    def test_input_block_too_long(self):
        block = fp.nnx.TransformerInput.from_arguments(50, 8, num_positions=16, rngs=nnx.Rngs(0))
        block(jnp.zeros((2, 16), jnp.int32))
        with pytest.raises(PositionLimitError, match="asked for position 16, 1 past the end"):
            block(jnp.zeros((2, 17), jnp.int32))
        with pytest.raises(PositionLimitError, match="asked for position 17, 2 past the end"):
            block(jnp.zeros((2, 4), jnp.int32), start=14)

    def test_input_block_under_jit_static_shape(self):
        block = fp.nnx.TransformerInput.from_arguments(50, 8, num_positions=16, rngs=nnx.Rngs(0))
        graphdef, state = nnx.split(block)
        f = jax.jit(lambda s, ids: nnx.merge(graphdef, s)(ids))
        assert f(state, jnp.zeros((1, 16), jnp.int32)).shape == (1, 16, 8)
        with pytest.raises(PositionLimitError):
            f(state, jnp.zeros((1, 17), jnp.int32))

    def test_padding_aware_bounds_are_static(self):
        """RoBERTa-style positions are traced values, but bounded by the shape: checked statically."""
        block = fp.nnx.TransformerInput.from_arguments(
            50,
            8,
            num_positions=6,
            position_offset=2,
            positions_from="non_padding_ids",
            pad_token_id=1,
            rngs=nnx.Rngs(0),
        )
        graphdef, state = nnx.split(block)
        f = jax.jit(lambda s, ids: nnx.merge(graphdef, s)(ids))
        assert f(state, jnp.full((1, 6), 5)).shape == (1, 6, 8)  # no checkify needed
        with pytest.raises(
            PositionLimitError, match=r"holds 6 positions \(0\.\.5\) after 2 reserved rows; asked for position 6"
        ):
            f(state, jnp.full((1, 7), 5))


class TestScalarStartGuard:
    """A traced scalar start under "error" (the decode step): two scalar compares on start, then a
    slice; the same values, the same messages, no reduction over positions."""

    def test_values_and_errors_under_jit(self):
        f = fp.position_errors(jax.jit(lambda s: fp.lookup.slice_positions(TABLE, 2, start=s)))
        for s in (0, 5, 8):
            np.testing.assert_array_equal(f(jnp.int32(s)), np.arange(40.0).reshape(10, 4)[s : s + 2])
        with pytest.raises(
            PositionLimitError,
            match=r"^position table holds 10 positions \(0\.\.9\); asked for position 10, 1 past the end$",
        ):
            f(jnp.int32(9))
        with pytest.raises(PositionLimitError, match=r"asked for position -1, below the first row$"):
            f(jnp.int32(-1))
        with pytest.raises(PositionLimitError, match=r"asked for position 2147483648, 2147483639 past the end$"):
            f(jnp.int32(2**31 - 1))  # start + 1 would wrap in int32; the check compares start alone

    def test_no_reduction_and_one_callback_in_the_compiled_step(self):
        text = jax.jit(lambda s: fp.lookup.slice_positions(TABLE, 3, start=s)).lower(jnp.int32(0)).compile().as_text()
        ops = [line.split(" = ", 1)[1] for line in text.splitlines() if " = " in line and line.lstrip().startswith("%")]
        assert any("callback" in op for op in ops) and any(" conditional(" in op for op in ops)
        assert not any(f" {name}(" in op for op in ops for name in ("reduce", "gather"))  # compares + a slice

    def test_reserved_rows_and_padding_row(self):
        table = jnp.arange(48.0).reshape(12, 4)  # 2 reserved rows: positions -1 .. 9
        f = fp.position_errors(jax.jit(lambda s: fp.lookup.slice_positions(table, 2, start=s, offset=2)))
        np.testing.assert_array_equal(f(jnp.int32(-1)), np.arange(48.0).reshape(12, 4)[1:3])
        with pytest.raises(PositionLimitError, match="after 2 reserved rows; asked for position 10, 1 past the end"):
            f(jnp.int32(9))

    def test_vmap_and_scan(self):  # the block's decode step: test_fast_paths.py, test_guard_matrix.py
        f = jax.jit(jax.vmap(lambda s: fp.lookup.slice_positions(TABLE, 1, start=s)))
        want = np.arange(40.0).reshape(10, 4)
        np.testing.assert_array_equal(f(jnp.array([0, 9], jnp.int32))[:, 0], want[[0, 9]])  # no false alarm
        with pytest.raises(PositionLimitError, match="asked for position 10, 1 past the end"):
            fp.position_errors(f)(jnp.array([3, 10], jnp.int32))

        def loop(start):
            return jax.lax.scan(lambda t, _: (t + 1, fp.lookup.slice_positions(TABLE, 1, start=t)), start, None, 4)[1]

        np.testing.assert_array_equal(jax.jit(loop)(jnp.int32(6))[:, 0], want[6:10])
        with pytest.raises(PositionLimitError, match="asked for position 10, 1 past the end"):
            fp.position_errors(jax.jit(loop))(jnp.int32(7))

    def test_other_policies_and_dtypes_take_the_general_path(self):
        limit = fp.overflow.Limit(10)
        traced = []
        jax.jit(lambda s: traced.append(fp.overflow.guard_start(s, 1, limit, "clip")) or s)(jnp.int32(0))
        jax.jit(lambda s: traced.append(fp.overflow.guard_start(s, 1, limit)) or s)(jnp.zeros((2,), jnp.int32))
        assert traced == [None, None]
        f = jax.jit(lambda s: fp.lookup.slice_positions(TABLE, 2, start=s, on_overflow="clip"))
        np.testing.assert_array_equal(f(jnp.int32(9)), np.arange(40.0).reshape(10, 4)[[9, 9]])  # per position
        g = fp.position_errors(jax.jit(lambda s: fp.lookup.slice_positions(TABLE, 2, start=s)))
        np.testing.assert_array_equal(g(jnp.uint8(3)), np.arange(40.0).reshape(10, 4)[3:5])
        with pytest.raises(PositionLimitError, match="asked for position 10, 1 past the end"):
            g(jnp.uint8(9))


class TestOneReductionGuard:
    """The traced check's single variadic min/max reduction (``overflow._min_max``) in every width."""

    DTYPES = [jnp.int8, jnp.uint8, jnp.int16, jnp.uint16, jnp.int32, jnp.uint32]

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_min_max_matches_numpy_at_the_extremes(self, dtype):
        info = np.iinfo(dtype)
        rng = np.random.default_rng(0)
        for shape in [(1,), (3, 37), (2, 5, 7)]:
            host = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
            host.flat[0], host.flat[-1] = info.max, info.min
            lo, hi = jax.jit(fp.overflow._min_max)(jnp.asarray(host))
            assert (int(lo), int(hi)) == (int(host.min()), int(host.max()))
            assert lo.dtype == hi.dtype == dtype

    @pytest.mark.parametrize("dtype", [jnp.int8, jnp.uint16, jnp.int32])
    def test_worst_position_as_the_host_check_names_it(self, dtype):
        """jit and jit(vmap): no false alarm in range; out of range, the message the host check
        (``limits.check_positions``) gives for numpy's bounds of the whole batch."""
        limit = fp.overflow.Limit(100, offset=2, name="t")  # positions -1 .. 97
        guard = jax.jit(lambda p: fp.overflow.guard_positions(p, limit)[0])
        batched = jax.jit(jax.vmap(lambda p: fp.overflow.guard_positions(p, limit)[0]))
        signed = np.iinfo(dtype).min < 0
        inside = np.array([[-1 if signed else 0, 5, 97], [3, 4, 0]], dtype)
        np.testing.assert_array_equal(guard(inside), inside.astype(np.int32))
        np.testing.assert_array_equal(batched(inside), inside.astype(np.int32))
        cases = [np.array([[0, 98, 3], [120, 1, 2]], dtype)]
        if signed:
            cases.append(np.array([[0, 98, 3], [120, -2, -100]], dtype))  # below beats past the end
        for positions in cases:
            with pytest.raises(PositionLimitError) as expected:
                check_positions(int(positions.min()), int(positions.max()), rows=100, offset=2, name="t")
            for f in (guard, batched):
                with pytest.raises(PositionLimitError) as got:
                    fp.position_errors(f)(positions)
                assert str(got.value) == str(expected.value)
