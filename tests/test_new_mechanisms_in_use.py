"""The recently added mechanisms called the way users call them.

Each public function of the window bias, DETR, vision RoPE, NaFlex, decomposed relative
position, Fourier, convolutional position and bounding-box modules, and each NNX/Linen shell
around them, is checked:

- under ``jax.jit`` against the eager call (known inputs, the host path);
- under ``jax.vmap`` over a leading batch axis against a Python loop of eager calls;
- inside ``jax.lax.scan`` (one call per step: stacked per-layer tables or per-step inputs)
  against the same loop, the carry against the loop's running sum;
- ``jax.grad`` of a scalar loss w.r.t. its learned table: finite, nonzero on the rows the
  positions read and exactly zero on the rows they do not (an independent numpy mask);
- eager against an independent float64 numpy reference where one is a few lines;
- the shells under ``nnx.jit`` / ``jax.jit(module.apply)`` against their functional core, and
  one ``optax.sgd`` step inside ``nnx.jit`` / ``jax.jit``: its loss is the float64 loss of the
  core's output, every parameter gets a finite nonzero gradient and moves by ``-lr * grad``, and
  the next step's loss is lower; NNX layers stacked by ``nnx.vmap`` run under ``nnx.scan``;
- a position past a limit under ``jax.jit`` (and ``vmap``, ``nnx.jit``) still raises the
  library's one-line :class:`~flax_posenc.PositionLimitError` (at run time through
  :func:`flax_posenc.position_errors` for traced positions, while tracing for static shapes).

Shapes are tiny and each case compiles once per transformation.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from flax import nnx

import flax_posenc as fp
from flax_posenc import PositionLimitError
from flax_posenc.rel_pos_config import DecomposedRelPosSpec

RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # what jax raises for a callback's error


def _flat(out: Any) -> jax.Array:
    """One float32 vector of a result (an array or a tuple of arrays, e.g. ``(cos, sin)``)."""
    parts = out if isinstance(out, (tuple, list)) else (out,)
    return jnp.concatenate([jnp.ravel(jnp.asarray(p)).astype(jnp.float32) for p in parts])


def assert_close(actual: Any, expected: Any, ulps: float = 4) -> None:
    """Equal within ``ulps`` float32 ulps of the largest magnitude compared (jit fuses differently)."""
    expected = np.asarray(expected, np.float64)
    scale = max(float(np.abs(expected).max(initial=0.0)), 1.0)
    np.testing.assert_allclose(
        np.asarray(actual, np.float64), expected, rtol=0, atol=ulps * np.spacing(np.float32(scale))
    )


# ----------------------------------------------------------------------------- independent float64 references


def _window_index64(h: int, w: int) -> np.ndarray:
    """Swin's relative_position_index, written out pair by pair."""
    n = h * w
    out = np.zeros((n, n), np.int64)
    for i in range(n):
        for j in range(n):
            (ri, ci), (rj, cj) = divmod(i, w), divmod(j, w)
            out[i, j] = (ri - rj + h - 1) * (2 * w - 1) + (ci - cj + w - 1)
    return out


def _bilinear_aligned64(grid: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Resample ``grid`` along ``axis`` to ``n`` samples, corners aligned (sample i at i (s-1)/(n-1))."""
    s = grid.shape[axis]
    x = np.arange(n) * (s - 1) / (n - 1) if n > 1 else np.zeros(1)
    lo = np.floor(x).astype(int)
    hi = np.minimum(lo + 1, s - 1)
    frac = x - lo
    a, b = np.take(grid, lo, axis=axis), np.take(grid, hi, axis=axis)
    shape = [1] * grid.ndim
    shape[axis] = n
    return a * (1 - frac.reshape(shape)) + b * frac.reshape(shape)


def _rows_read(n_rows: int, rows: Any) -> np.ndarray:
    mask = np.zeros(n_rows, bool)
    mask[np.asarray(rows).ravel()] = True
    return mask


# ----------------------------------------------------------------------------- the functional cases


@dataclasses.dataclass(frozen=True)
class Case:
    """``fn(*arrays)``: the call with everything static closed over; ``make(rng)``: valid arrays."""

    fn: Callable[..., Any]
    make: Callable[[np.random.Generator], tuple]
    grad_arg: int | None = None  # the learned table's argument
    touched: Callable[[tuple], np.ndarray] | None = None  # args -> bool (rows,) the output reads
    reference: Callable[[tuple], Any] | None = None  # args -> float64 numpy, like _flat(fn(*args))
    ulps: float = 4


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


WINDOW = (2, 3)
WIN_ROWS = (2 * WINDOW[0] - 1) * (2 * WINDOW[1] - 1)  # 15
BOX_SPEC = fp.BboxSpec(rows=8, coord_dim=3, shape_dim=3, combine="sum")
BOX_CONCAT = fp.BboxSpec(rows=8, coord_dim=2, shape_dim=1, combine="concat")
VROPE = fp.VisionRopeConfig(head_dim=8, patches_per_side=4)
VROPE_NORMALIZED = fp.VisionRopeConfig(head_dim=8, coordinates="normalized", prefix_tokens=1, rope_theta=100.0)
VROPE_PREFIX = fp.VisionRopeConfig(head_dim=8, prefix_tokens=1, patches_per_side=4)  # MLCD: learned class angles
GRID_THW = [[1, 2, 3]]
CONV = fp.ConvPositionSpec(dim=4, kernel_size=3, groups=2)
CONV_STRIDED = fp.ConvPositionSpec(dim=4, kernel_size=4, stride=2, layer_norm=True)  # SEW: pooled, even kernel trimmed
DETR = fp.DetrSineConfig(4, normalize=True, offset=-0.5)


def _patches(rng, n=6, side=4):
    return rng.integers(0, side, size=(n, 2)).astype(np.int32)


def _boxes(rng, n=3, rows=8):
    x0, y0 = rng.integers(0, rows // 2, size=(2, n))
    x1, y1 = x0 + rng.integers(0, rows // 2, size=n), y0 + rng.integers(0, rows // 2, size=n)
    return np.stack([x0, y0, x1, y1], -1).astype(np.int32)


def _window_bias64(args):
    (table,) = args
    index = _window_index64(*WINDOW)
    return np.asarray(table, np.float64)[index].transpose(2, 0, 1).ravel()


def _bbox_sum64(args):
    b, x, y, h, w = (np.asarray(a, np.float64) for a in args)
    b = b.astype(int)
    x0, y0, x1, y1 = b.T
    return (x[x0] + y[y0] + x[x1] + y[y1] + h[y1 - y0] + w[x1 - x0]).ravel()


def _bbox_concat64(args):
    b, x, y, h, w = (np.asarray(a, np.float64) for a in args)
    b = b.astype(int)
    x0, y0, x1, y1 = b.T
    return np.concatenate([x[x0], y[y0], x[x1], y[y1], h[y1 - y0], w[x1 - x0]], -1).ravel()


def _decomposed_table64(args):
    (table,) = args
    t = np.asarray(table, np.float64)
    q = np.arange(3)
    return t[q[:, None] - q[None, :] + 2].ravel()  # q_size == k_size == 3: row i - j + 2


def _decomposed_bias64(args):
    q, rh, rw = (np.asarray(a, np.float64) for a in args)
    qh, qw = 2, 3
    i = np.arange(qh)
    j = np.arange(qw)
    r_h = rh[i[:, None] - i[None, :] + qh - 1]  # (qh, kh, C)
    r_w = rw[j[:, None] - j[None, :] + qw - 1]  # (qw, kw, C)
    out = np.zeros((qh * qw, qh * qw))
    for a in range(qh * qw):
        ya, xa = divmod(a, qw)
        for b in range(qh * qw):
            yb, xb = divmod(b, qw)
            out[a, b] = q[a] @ r_h[ya, yb] + q[a] @ r_w[xa, xb]
    return out.ravel()


def _fourier64(args):
    c, g = (np.asarray(a, np.float64) for a in args)
    angle = 2 * np.pi * (2 * c - 1) @ g
    return np.concatenate([np.sin(angle), np.cos(angle)], -1).ravel()


def _detr_learned64(args):
    rows, cols = (np.asarray(a, np.float64) for a in args)
    h, w = 3, 2
    out = np.zeros((1, 2 * rows.shape[1], h, w))
    for y in range(h):
        for x in range(w):
            out[0, :, y, x] = np.concatenate([cols[x], rows[y]])
    return out.ravel()


def _grid_positions64(args):
    (table,) = args
    grid = np.asarray(table, np.float64).reshape(4, 4, -1)
    image = _bilinear_aligned64(_bilinear_aligned64(grid, 2, 0), 3, 1)  # (2, 3, dim), raster order
    return image.reshape(6, -1).ravel()


def _vision_rope_cos_sin64(args):
    """Axial split, half layout: pair j < D/4 turns with the row, the rest with the column, each
    axis by frequencies theta ** (-2k / (D/2)) (Qwen2-VL's VisionRotaryEmbedding of dim D/2)."""
    (p,) = args
    p = np.asarray(p, np.float64)
    quarter = VROPE.head_dim // 4
    inv = 10000.0 ** (-np.arange(quarter) * 2 / (VROPE.head_dim // 2))
    angle = np.concatenate([p[:, :1] * inv, p[:, 1:] * inv], -1)
    return np.concatenate([np.cos(angle).ravel(), np.sin(angle).ravel()])


CASES: dict[str, Case] = {
    "window_bias": Case(
        lambda t: fp.window_bias(t, WINDOW),
        lambda rng: (_normal(rng, WIN_ROWS, 2),),
        grad_arg=0,
        touched=lambda a: np.ones(WIN_ROWS, bool),  # every offset of a window is some pair's
        reference=_window_bias64,
    ),
    "continuous_window_bias": Case(
        lambda w1, b1, w2: fp.continuous_window_bias(w1, b1, w2, WINDOW),
        lambda rng: (_normal(rng, 8, 2), _normal(rng, 8), _normal(rng, 2, 8)),
        grad_arg=2,
    ),
    "resize_window_table": Case(
        lambda t: fp.resize_window_table(t, 2, 3, class_token=True, convention="transformers"),
        lambda rng: (_normal(rng, 12, 2),),
        grad_arg=0,
        touched=lambda a: np.ones(12, bool),  # the class rows are kept
    ),
    "detr_sine_embedding": Case(
        lambda m: fp.detr_sine_embedding(m, DETR),
        lambda rng: (np.concatenate([np.ones((1, 2, 2), bool), rng.random((1, 2, 2)) < 0.5], -1),),
    ),
    "detr_learned_embedding": Case(
        lambda r, c: fp.detr_learned_embedding(jnp.ones((1, 3, 2), bool), r, c),
        lambda rng: (_normal(rng, 5, 2), _normal(rng, 5, 2)),
        grad_arg=0,
        touched=lambda a: np.arange(5) < 3,  # rows 0..2 of a 3-row feature map
        reference=_detr_learned64,
    ),
    "detr_feature_mask": Case(
        lambda m: fp.detr_feature_mask(m, (2, 3)),
        lambda rng: ((rng.random((1, 5, 7)) < 0.7).astype(np.int32),),
    ),
    "vision_rope_cos_sin": Case(
        lambda p: fp.vision_rope_cos_sin(p, VROPE),
        lambda rng: (_patches(rng),),
        reference=_vision_rope_cos_sin64,
    ),
    "apply_vision_rope_qk": Case(
        lambda q, k, p: fp.apply_vision_rope_qk(q, k, VROPE, p),
        lambda rng: (_normal(rng, 6, 2, 8), _normal(rng, 6, 1, 8), _patches(rng)),
    ),
    "apply_vision_rope_normalized": Case(  # DINOv3: float centres, a class token not rotated
        lambda x, p: fp.apply_vision_rope(x, VROPE_NORMALIZED, p),
        lambda rng: (_normal(rng, 5, 2, 8), rng.uniform(-1, 1, (4, 2)).astype(np.float32)),
        ulps=8,  # traced centres turn in float32 on device, known ones in float64 on the host
    ),
    "apply_vision_rope_prefix_angles": Case(
        lambda x, p, a: fp.apply_vision_rope(x, VROPE_PREFIX, p, prefix_angles=a),
        lambda rng: (_normal(rng, 5, 2, 8), _patches(rng, 4), _normal(rng, 1, 4)),
        grad_arg=2,
        touched=lambda a: np.ones(1, bool),
    ),
    "vision_grid_positions": Case(
        lambda t: fp.vision_grid_positions(t, GRID_THW),
        lambda rng: (_normal(rng, 16, 3),),
        grad_arg=0,
        # 2 rows from a 4-row grid, corners aligned: grid rows 0 and 3 only (all 4 columns)
        touched=lambda a: np.repeat(np.array([True, False, False, True]), 4),
        reference=_grid_positions64,
    ),
    "naflex_positions": Case(
        lambda g: fp.naflex_positions(g, [(2, 3), (3, 2)], max_num_patches=8),
        lambda rng: (_normal(rng, 16, 3),),
        grad_arg=0,
    ),
    "decomposed_rel_pos_table": Case(
        lambda t: fp.decomposed_rel_pos_table(t, 3, 3),
        lambda rng: (_normal(rng, 5, 4),),
        grad_arg=0,
        touched=lambda a: np.ones(5, bool),
        reference=_decomposed_table64,
    ),
    "decomposed_rel_pos_table_interpolated": Case(
        lambda t: fp.decomposed_rel_pos_table(t, 4, 2),
        lambda rng: (_normal(rng, 5, 4),),
        grad_arg=0,
    ),
    "decomposed_rel_pos_bias": Case(
        lambda q, rh, rw: fp.decomposed_rel_pos_bias(q, rh, rw, (2, 3), (2, 3)),
        lambda rng: (_normal(rng, 6, 4), _normal(rng, 3, 4), _normal(rng, 5, 4)),
        grad_arg=1,
        touched=lambda a: np.ones(3, bool),
        reference=_decomposed_bias64,
        ulps=8,
    ),
    "fourier_positions": Case(
        lambda c, g: fp.fourier_positions(c, g),
        lambda rng: (rng.random((5, 2)).astype(np.float32), _normal(rng, 2, 4)),
        grad_arg=1,
        touched=lambda a: np.ones(2, bool),
        reference=_fourier64,
        ulps=16,  # sin/cos of angles up to ~2 pi * 3: a few ulps of the angle
    ),
    "conv_positions": Case(
        lambda h, k, b: fp.conv_positions(h, k, b, CONV),
        lambda rng: (_normal(rng, 1, 6, 4), _normal(rng, *CONV.kernel_shape), _normal(rng, *CONV.bias_shape)),
        grad_arg=1,
    ),
    "add_conv_positions_strided": Case(
        lambda h, k, b: fp.add_conv_positions(h, k, b, CONV_STRIDED),
        lambda rng: (
            _normal(rng, 1, 7, 4),
            _normal(rng, *CONV_STRIDED.kernel_shape),
            _normal(rng, *CONV_STRIDED.bias_shape),
        ),
        grad_arg=1,
        ulps=16,
    ),
    "bbox_embedding": Case(
        lambda b, x, y, h, w: fp.bbox_embedding(b, x, y, h, w, BOX_SPEC),
        lambda rng: (_boxes(rng), *(_normal(rng, 8, 3) for _ in range(4))),
        grad_arg=1,
        touched=lambda a: _rows_read(8, np.asarray(a[0])[:, [0, 2]]),  # x at x0 and x1
        reference=_bbox_sum64,
    ),
    "bbox_embedding_concat": Case(
        lambda b, x, y, h, w: fp.bbox_embedding(b, x, y, h, w, BOX_CONCAT),
        lambda rng: (_boxes(rng), _normal(rng, 8, 2), _normal(rng, 8, 2), _normal(rng, 8, 1), _normal(rng, 8, 1)),
        grad_arg=3,
        touched=lambda a: _rows_read(8, np.asarray(a[0])[:, 3] - np.asarray(a[0])[:, 1]),  # h at y1 - y0
        reference=_bbox_concat64,
    ),
}
GRAD_CASES = [name for name, case in CASES.items() if case.grad_arg is not None]
REFERENCE_CASES = [name for name, case in CASES.items() if case.reference is not None]


def _args(name: str, count: int | None = None):
    """One set of arguments (``count=None``) or ``count`` sets, the same on every call."""
    rng = np.random.default_rng(sum(map(ord, name)))  # deterministic per case
    if count is None:
        return CASES[name].make(rng)
    return [CASES[name].make(rng) for _ in range(count)]


def _stack(sets: list[tuple]) -> tuple:
    return tuple(np.stack(column) for column in zip(*sets, strict=True))


@functools.cache
def _compiled(name: str) -> Callable:
    """One compiled program per case: the call under jit, under vmap, and inside a scan."""
    fn = CASES[name].fn

    def flat(*a):
        return _flat(fn(*a))

    def body(carry, xs):  # one step per layer (stacked tables) or per decoding step (stacked inputs)
        out = flat(*xs)
        return carry + jnp.sum(out), out

    return jax.jit(lambda args, stacked: (flat(*args), jax.vmap(flat)(*stacked), jax.lax.scan(body, 0.0, stacked)))


@pytest.mark.parametrize("name", CASES)
def test_jit_vmap_scan_equal_eager_calls(name):
    """jit == eager; vmap over a leading batch axis == a Python loop; scan == the loop (and its
    running sum)."""
    case = CASES[name]
    sets = _args(name, 2)
    loop = [np.asarray(_flat(case.fn(*s)), np.float64) for s in sets]
    jitted, vmapped, (carry, ys) = _compiled(name)(sets[0], _stack(sets))
    assert_close(jitted, loop[0], case.ulps)
    assert_close(vmapped, np.stack(loop), case.ulps)
    assert_close(ys, np.stack(loop), case.ulps)
    np.testing.assert_allclose(float(carry), sum(float(v.sum()) for v in loop), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", REFERENCE_CASES)
def test_eager_equals_float64_numpy(name):
    case = CASES[name]
    args = _args(name)
    assert_close(_flat(case.fn(*args)), case.reference(args), case.ulps)


@pytest.mark.parametrize("name", GRAD_CASES)
def test_grad_flows_to_the_table(name):
    case = CASES[name]
    args = _args(name)
    weights = jnp.asarray(np.random.default_rng(7).standard_normal(_flat(case.fn(*args)).shape), jnp.float32)

    def loss(table):
        full = list(args)
        full[case.grad_arg] = table
        return jnp.sum(_flat(case.fn(*full)) * weights)

    grad = np.asarray(jax.jit(jax.grad(loss))(jnp.asarray(args[case.grad_arg])))
    assert grad.shape == np.shape(args[case.grad_arg])
    assert np.isfinite(grad).all()
    rows = np.abs(grad).reshape(grad.shape[0], -1).max(axis=1)
    if case.touched is None:
        assert (rows > 0).any()
        return
    touched = case.touched(args)
    assert (rows[touched] > 0).all(), f"rows read but without gradient: {np.flatnonzero(touched & (rows == 0))}"
    assert (rows[~touched] == 0).all(), f"rows not read but with gradient: {np.flatnonzero(~touched & (rows > 0))}"


def test_grad_of_a_linear_mechanism_is_the_scatter_of_the_weights():
    """window_bias is a gather: d/d table[r, h] of sum(bias * W) is the sum of W over the pairs reading row r."""
    table = jnp.zeros((WIN_ROWS, 2))
    weights = np.random.default_rng(3).standard_normal((2, 6, 6))
    grad = jax.jit(jax.grad(lambda t: jnp.sum(fp.window_bias(t, WINDOW) * jnp.asarray(weights, jnp.float32))))(table)
    expected = np.zeros((WIN_ROWS, 2))
    index = _window_index64(*WINDOW)
    for head in range(2):
        np.add.at(expected[:, head], index.ravel(), weights[head].ravel())
    assert_close(grad, expected, 8)


def test_vision_frame_sinusoid_under_jit_and_its_limit():
    """No traced input: jit of the call equals eager and float64 numpy; a clip past max_frames
    raises while tracing."""
    dim, grid = 4, [[1, 1, 2], [3, 1, 1]]
    eager = fp.vision_frame_sinusoid(grid, dim, 4)
    assert_close(jax.jit(lambda: fp.vision_frame_sinusoid(grid, dim, 4))(), eager)
    inv = 10000.0 ** (-np.arange(0, dim, 2) / dim)
    frames = np.arange(3)[:, None] * inv
    expected = np.concatenate([np.zeros((2, dim)), np.concatenate([np.sin(frames), np.cos(frames)], 1)])
    assert_close(eager, expected)
    with pytest.raises(PositionLimitError, match=r"^vision frame sinusoid holds 2 frames per clip .*clip of 3 frames"):
        jax.jit(lambda: fp.vision_frame_sinusoid(grid, dim, 2))()


# ----------------------------------------------------------------------------- limits under jit


LIMIT_LINE = r"holds {n} {unit}s \(0\.\.{last}\); asked for {what}, {past} past the end"


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


def test_bbox_past_the_table_under_jit_vmap_and_scan():
    rng = np.random.default_rng(0)
    args = (_boxes(rng), *(_normal(rng, 8, 3) for _ in range(4)))
    bad = args[0].copy()
    bad[1, 2] = 8  # x1 one past the 8 rows
    message = "bbox tables .*holds 8 coordinates \\(0\\.\\.7\\); asked for .*8, 1 past the end"
    f = jax.jit(lambda b, *t: fp.bbox_embedding(b, *t, BOX_SPEC))
    assert_close(f(*args), fp.bbox_embedding(*args, BOX_SPEC))  # no false alarm
    with pytest.raises(RUNTIME_ERRORS, match="PositionLimitError: " + message):
        jax.block_until_ready(f(bad, *args[1:]))
    with pytest.raises(PositionLimitError, match=f"^{message}$") as error:
        fp.position_errors(f)(bad, *args[1:])
    _one_line(error)
    v = fp.position_errors(jax.jit(jax.vmap(lambda b: fp.bbox_embedding(b, *args[1:], BOX_SPEC))))
    v(np.stack([args[0], args[0]]))
    with pytest.raises(PositionLimitError, match=message):
        v(np.stack([args[0], bad]))

    def decode(boxes):  # one box per step, from a traced step input
        return jax.lax.scan(lambda c, b: (c, fp.bbox_embedding(b, *args[1:], BOX_SPEC)), 0, boxes)[1]

    s = fp.position_errors(jax.jit(decode))
    assert_close(s(args[0]), fp.bbox_embedding(*args, BOX_SPEC))
    with pytest.raises(PositionLimitError, match=message):
        s(bad)
    # a height past the table (y1 < y0 is a negative side): also the guard's line
    neg = args[0].copy()
    neg[0, 1], neg[0, 3] = 3, 1
    with pytest.raises(PositionLimitError, match="bbox tables") as error:
        fp.position_errors(f)(neg, *args[1:])
    _one_line(error)


def test_bbox_clip_and_fill_under_jit():
    rng = np.random.default_rng(1)
    tables = tuple(_normal(rng, 8, 3) for _ in range(4))
    boxes = np.array([[1, 2, 9, 5]], np.int32)  # x1 = 9: one coordinate and one width past the tables
    clip = jax.jit(lambda b: fp.bbox_embedding(b, *tables, BOX_SPEC, on_overflow="clip"))(boxes)
    x, y, h, w = (np.asarray(t, np.float64) for t in tables)
    # corners clamp to 7, the width x1 - x0 = 8 clamps to 7
    assert_close(clip[0], x[1] + y[2] + x[7] + y[5] + h[3] + w[7])
    fill = jax.jit(lambda b: fp.bbox_embedding(b, *tables, BOX_SPEC, on_overflow="fill"))(boxes)
    assert np.isnan(np.asarray(fill)).all()


def test_vision_rope_past_the_grid_under_jit_vmap_and_nnx_jit():
    rng = np.random.default_rng(2)
    x, p = _normal(rng, 6, 2, 8), _patches(rng)
    bad = p.copy()
    bad[3, 1] = 4  # column 4 of a 4-patch side
    message = re.escape(
        "vision RoPE (4 patches per side) holds 4 positions (0..3); asked for position 4, 1 past the end"
    )
    f = jax.jit(lambda x, p: fp.apply_vision_rope(x, VROPE, p))
    with pytest.raises(PositionLimitError, match=f"^{message}$") as error:
        fp.position_errors(f)(x, bad)
    _one_line(error)
    with pytest.raises(PositionLimitError, match=f"^{message}"):  # known positions: while tracing
        jax.jit(lambda x: fp.apply_vision_rope(x, VROPE, bad))(x)
    v = fp.position_errors(jax.jit(jax.vmap(lambda p: fp.vision_rope_cos_sin(p, VROPE))))
    with pytest.raises(PositionLimitError, match=message):
        v(np.stack([p, bad]))
    rope = fp.nnx.VisionRotaryEmbedding(VROPE)
    g = fp.position_errors(nnx.jit(lambda m, x, p: m(x, p)))
    assert_close(g(rope, x, p), fp.apply_vision_rope(x, VROPE, p))
    with pytest.raises(PositionLimitError, match=message):
        g(rope, x, bad)
    clip = jax.jit(lambda p: fp.vision_rope_cos_sin(p, VROPE, on_overflow="clip"))(bad)
    clamped = bad.copy()
    clamped[3, 1] = 3
    assert_close(_flat(clip), _vision_rope_cos_sin64((clamped,)))


def test_static_limits_raise_while_tracing():
    rows, cols = jnp.zeros((5, 2)), jnp.zeros((5, 2))
    with pytest.raises(
        PositionLimitError,
        match=r"^learned DETR row table holds 5 feature-map rows \(0\.\.4\); asked for feature-map row 5, 1 past the end",
    ):
        jax.jit(lambda r, c: fp.detr_learned_embedding(jnp.ones((1, 6, 2), bool), r, c))(rows, cols)
    detr = fp.nnx.DetrLearnedPositionEmbedding(2, num_rows=5, rngs=nnx.Rngs(0))
    with pytest.raises(PositionLimitError, match="learned DETR column table holds 5 feature-map columns"):
        nnx.jit(lambda m, mask: m(mask))(detr, jnp.ones((1, 2, 6), bool))
    with pytest.raises(PositionLimitError) as error:  # 3 x 3 = 9 patches, a budget of 8
        jax.jit(lambda g: fp.naflex_positions(g, (3, 3), max_num_patches=8))(jnp.zeros((16, 2)))
    assert "8" in _one_line(error) and "9" in str(error.value)


# ----------------------------------------------------------------------------- the shells


@dataclasses.dataclass(frozen=True)
class Shell:
    """``nnx(rngs)`` / ``linen()``: the module; ``inputs(rng)``: call arguments; ``core(params,
    inputs)``: the functional core's value for the module's parameters (a dict by name)."""

    nnx: Callable[[nnx.Rngs], Any]
    linen: Callable[[], Any]
    inputs: Callable[[np.random.Generator], tuple]
    core: Callable[[dict, tuple], Any]  # (params by name, inputs) -> the functional core's value
    train: bool = True  # False: no gradient can reach it (no parameters, a mask input)


def _nnx_params(module) -> dict:
    return {"/".join(map(str, k)): v[...] for k, v in nnx.to_flat_state(nnx.state(module, nnx.Param))}


SHELLS: dict[str, Shell] = {
    "WindowRelativeBias": Shell(
        lambda r: fp.nnx.WindowRelativeBias(fp.WindowBiasSpec(2, WINDOW), rngs=r),
        lambda: fp.linen.WindowRelativeBias(fp.WindowBiasSpec(2, WINDOW)),
        lambda rng: (),
        lambda p, a: fp.window_bias(p["embedding"], WINDOW),
    ),
    "VisionRotaryEmbedding": Shell(
        lambda r: fp.nnx.VisionRotaryEmbedding(VROPE),
        lambda: fp.linen.VisionRotaryEmbedding(VROPE),
        lambda rng: (_normal(rng, 6, 2, 8), _patches(rng)),
        lambda p, a: fp.apply_vision_rope(a[0], VROPE, a[1]),
    ),
    "DecomposedRelativePosition": Shell(
        lambda r: fp.nnx.DecomposedRelativePosition(DecomposedRelPosSpec((2, 3), 4), rngs=r),
        lambda: fp.linen.DecomposedRelativePosition(DecomposedRelPosSpec((2, 3), 4)),
        lambda rng: (_normal(rng, 6, 4),),
        lambda p, a: fp.decomposed_rel_pos_bias(a[0], p["rel_pos_h"], p["rel_pos_w"], (2, 3), (2, 3)),
    ),
    "ConvPositionalEmbedding": Shell(
        lambda r: fp.nnx.ConvPositionalEmbedding(CONV, rngs=r),
        lambda: fp.linen.ConvPositionalEmbedding(CONV),
        lambda rng: (_normal(rng, 1, 6, 4),),
        lambda p, a: fp.conv_positions(a[0], p["kernel"], p["bias"], CONV),
    ),
    "BoundingBoxEmbedding": Shell(
        lambda r: fp.nnx.BoundingBoxEmbedding(BOX_SPEC, rngs=r),
        lambda: fp.linen.BoundingBoxEmbedding(BOX_SPEC),
        lambda rng: (_boxes(rng),),
        lambda p, a: fp.bbox_embedding(
            a[0], p["x_embedding"], p["y_embedding"], p["h_embedding"], p["w_embedding"], BOX_SPEC
        ),
    ),
    "DetrLearnedPositionEmbedding": Shell(
        lambda r: fp.nnx.DetrLearnedPositionEmbedding(2, num_rows=5, rngs=r),
        lambda: fp.linen.DetrLearnedPositionEmbedding(2, num_rows=5),
        lambda rng: (np.ones((1, 3, 2), bool),),
        lambda p, a: fp.detr_learned_embedding(a[0], p["row_embeddings"], p["column_embeddings"]),
    ),
    "DetrSinePositionEmbedding": Shell(
        lambda r: fp.nnx.DetrSinePositionEmbedding(DETR),
        lambda: fp.linen.DetrSinePositionEmbedding(DETR),
        lambda rng: (np.concatenate([np.ones((1, 2, 2), bool), rng.random((1, 2, 2)) < 0.5], -1),),
        lambda p, a: fp.detr_sine_embedding(a[0], DETR),
        train=False,
    ),
}


class Scaled(nnx.Module):
    """A shell in a model with one more parameter, so a parameterless shell has a training step."""

    def __init__(self, shell):
        self.shell = shell
        self.scale = nnx.Param(jnp.float32(1.5))

    def __call__(self, *inputs):
        return self.shell(*inputs) * self.scale[...]


def _target(shape) -> jax.Array:
    return jnp.asarray(np.random.default_rng(5).standard_normal(shape), jnp.float32)


LR = 0.05


def _has_params(tree) -> bool:
    return bool(jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("name", SHELLS)
def test_nnx_shell_under_nnx_jit_and_one_training_step(name):
    shell = SHELLS[name]
    args = shell.inputs(np.random.default_rng(4))
    module = shell.nnx(nnx.Rngs(0))
    # the shell is its functional core (eager) under nnx.jit
    core = np.asarray(shell.core(_nnx_params(module), args), np.float64)
    assert_close(nnx.jit(lambda m, *a: m(*a))(module, *args), core)
    if not shell.train:
        return

    trained = _has_params(_nnx_params(module))
    model = module if trained else Scaled(module)  # something to train
    target = _target(core.shape)
    loss0 = np.mean((core * (1.0 if trained else 1.5) - np.asarray(target, np.float64)) ** 2)

    def loss_fn(m):
        return jnp.mean((m(*args) - target) ** 2)

    before = _nnx_params(model)
    optimizer = nnx.Optimizer(model, optax.sgd(LR), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        value, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return value, grads

    value, grads = step(model, optimizer)
    np.testing.assert_allclose(float(value), loss0, rtol=1e-5)
    grads, after = _nnx_params_of(grads), _nnx_params(model)
    assert before.keys() == after.keys() == grads.keys()
    for key in before:
        g = np.asarray(grads[key])
        assert np.isfinite(g).all() and np.abs(g).max() > 0, f"{key}: no gradient"
        np.testing.assert_allclose(after[key], np.asarray(before[key]) - LR * g, rtol=1e-5, atol=1e-6, err_msg=key)
    assert float(step(model, optimizer)[0]) < loss0  # the next step's loss: lower after the first


def _nnx_params_of(grads: nnx.State) -> dict:
    return {"/".join(map(str, k)): v[...] for k, v in nnx.to_flat_state(grads)}


@pytest.mark.parametrize("name", SHELLS)
def test_linen_shell_under_jit_and_one_optax_step(name):
    shell = SHELLS[name]
    args = tuple(jnp.asarray(a) for a in shell.inputs(np.random.default_rng(4)))
    module = shell.linen()
    variables = module.init(jax.random.key(0), *args)
    params = nn.unbox(dict(variables.get("params", {})))
    core = np.asarray(shell.core(params, args), np.float64)
    assert_close(jax.jit(module.apply)(variables, *args), core)
    if not shell.train:
        return

    target = _target(core.shape)
    trainable = {"shell": params} if params else {"shell": {}, "scale": jnp.float32(1.5)}
    loss0 = np.mean((core * (1.5 if not params else 1.0) - np.asarray(target, np.float64)) ** 2)

    def loss_fn(p):
        out = module.apply({"params": p["shell"]} if p["shell"] else {}, *args)
        return jnp.mean((out * p.get("scale", 1.0) - target) ** 2)

    tx = optax.sgd(LR)

    @jax.jit
    def step(p, state):
        value, grads = jax.value_and_grad(loss_fn)(p)
        updates, state = tx.update(grads, state, p)
        return optax.apply_updates(p, updates), state, value, grads

    new, state, value, grads = step(trainable, tx.init(trainable))
    np.testing.assert_allclose(float(value), loss0, rtol=1e-5)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        g = np.asarray(g)
        assert np.isfinite(g).all() and np.abs(g).max() > 0, path
    jax.tree_util.tree_map(
        lambda a, b, g: np.testing.assert_allclose(b, np.asarray(a) - LR * np.asarray(g), rtol=1e-5, atol=1e-6),
        trainable,
        new,
        grads,
    )
    assert float(step(new, state)[2]) < loss0  # the next step's loss: lower after the first


@pytest.mark.parametrize("name", ["BoundingBoxEmbedding"])  # the guard inside nnx.scan; the others are plain gathers
def test_nnx_scan_over_stacked_layers_equals_a_loop(name):
    """Layers made by nnx.vmap (one table each), applied by nnx.scan inside nnx.jit: each layer's
    output is its functional core's on its own table."""
    shell = SHELLS[name]
    args = shell.inputs(np.random.default_rng(4))

    @nnx.split_rngs(splits=3)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make(rngs):
        return shell.nnx(rngs)

    layers = make(nnx.Rngs(0))

    @nnx.jit
    def run(layers, total):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
        def body(total, layer):
            out = layer(*args)
            return total + jnp.sum(out), out

        return body(total, layers)

    total, ys = run(layers, jnp.float32(0))
    stacked = _nnx_params(layers)
    loop = [np.asarray(shell.core({k: v[i] for k, v in stacked.items()}, args)) for i in range(3)]
    assert_close(ys, np.stack(loop))
    np.testing.assert_allclose(float(total), sum(float(v.sum()) for v in loop), rtol=1e-5, atol=1e-4)


def test_window_shell_resizes_under_nnx_jit_and_linen_jit():
    """Another window than the spec's: the table resized (timm), as the functional core does it."""
    module = fp.nnx.WindowRelativeBias(fp.WindowBiasSpec(2, WINDOW), rngs=nnx.Rngs(0))
    table = module.embedding[...]
    expected = fp.window_bias(fp.resize_window_table(table, WINDOW, 3), 3)
    assert_close(nnx.jit(lambda m: m(window=3))(module), expected)
    linen = fp.linen.WindowRelativeBias(fp.WindowBiasSpec(2, WINDOW))
    variables = {"params": {"embedding": table}}
    assert_close(jax.jit(lambda v: linen.apply(v, 3))(variables), expected)


def test_bbox_shell_past_the_table_under_nnx_jit_and_linen_jit():
    boxes = fp.nnx.BoundingBoxEmbedding(BOX_SPEC, rngs=nnx.Rngs(0))
    good = jnp.array([[[1, 2, 3, 5]]], jnp.int32)
    bad = jnp.array([[[1, 2, 8, 5]]], jnp.int32)
    f = fp.position_errors(nnx.jit(lambda m, b: m(b)))
    f(boxes, good)
    message = "bbox tables .*holds 8 coordinates \\(0\\.\\.7\\); asked for .*8, 1 past the end"
    with pytest.raises(PositionLimitError, match=f"^{message}$") as error:
        f(boxes, bad)
    _one_line(error)
    linen = fp.linen.BoundingBoxEmbedding(BOX_SPEC)
    variables = linen.init(jax.random.key(0), good)
    with pytest.raises(PositionLimitError, match=f"^{message}$"):
        fp.position_errors(jax.jit(linen.apply))(variables, bad)
