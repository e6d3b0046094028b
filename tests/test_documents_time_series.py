"""Documents and time series.

2-D bounding-box tables (kind ``bbox_2d``): the core against float64 numpy, its guard, the
reader's refusals, the shells and ``check --bbox-max``. Time series sinusoids (kind
``sinusoidal``, rows of time steps): ``check --steps``.

Agreement with transformers' own LayoutLM, LayoutLMv3, LiLT, TimeSeriesTransformer, Informer and
Autoformer is the conformance case of each (``tests/test_conformance.py`` through
``conformance.reference``); here the bounding-box hook is shown to fail when our reading is wrong.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance.reference import _bbox_problems, random_boxes
from conformance.tiny import quiet, tiny_model
from flax import nnx

import flax_posenc as fp
from flax_posenc.conversion import inspect_source, load_bbox_tables
from flax_posenc.errors import CheckpointError, PositionLimitError
from flax_posenc.report.cli import main

ROWS = 16


def _tables(coord: int, shape: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((ROWS, d)).astype(np.float32) for d in (coord, coord, shape, shape)]


def _reference(bbox, tables, combine, clip=None):
    """Float64 numpy, from the formula: x[x0], y[y0], x[x1], y[y1], h[y1 - y0], w[x1 - x0]."""
    x, y, h, w = (t.astype(np.float64) for t in tables)
    b = np.asarray(bbox)
    hh, ww = b[..., 3] - b[..., 1], b[..., 2] - b[..., 0]
    if clip is not None:
        hh, ww = np.clip(hh, 0, clip), np.clip(ww, 0, clip)
    parts = [x[b[..., 0]], y[b[..., 1]], x[b[..., 2]], y[b[..., 3]], h[hh], w[ww]]
    return sum(parts) if combine == "sum" else np.concatenate(parts, -1)


@pytest.mark.parametrize("combine,coord,shape", [("sum", 8, 8), ("concat", 4, 2)])
def test_core_matches_float64_numpy_eager_jit_and_vmap(combine, coord, shape):
    spec = fp.BboxSpec(ROWS, coord, shape, combine)
    tables = _tables(coord, shape)
    bbox = random_boxes(ROWS, 24, seed=1)
    ref = _reference(bbox, tables, combine)
    eager = np.asarray(fp.bbox_embedding(bbox, *tables, spec))
    jitted = np.asarray(jax.jit(lambda b: fp.bbox_embedding(b, *tables, spec))(bbox))
    mapped = np.asarray(jax.vmap(lambda b: fp.bbox_embedding(b, *tables, spec))(jnp.asarray(bbox[0])[:, None]))
    assert eager.shape == (1, 24, spec.out_dim)
    # float32 sum of six float32 rows: within 6 ulps of the float64 sum's magnitude; a concat is exact
    tol = 0 if combine == "concat" else 6 * np.spacing(np.float32(np.abs(ref).max()))
    assert np.max(np.abs(eager - ref)) <= tol
    np.testing.assert_array_equal(jitted, eager)
    np.testing.assert_array_equal(mapped[:, 0], eager[0])


def test_shape_clip_is_applied_before_the_lookup():
    spec = fp.BboxSpec(ROWS, 2, 2, "concat", shape_clip=3)
    tables = _tables(2, 2)
    bbox = np.array([[0, 0, 10, 12]])
    np.testing.assert_array_equal(
        np.asarray(fp.bbox_embedding(bbox, *tables, spec)), _reference(bbox, tables, "concat", 3)
    )


@pytest.mark.parametrize(
    "box,message",
    [
        (
            [1, 2, 16, 5],
            "bbox: bbox tables hold 16 coordinates (0..15); asked for x1 16 in box [1, 2, 16, 5], 1 past the end",
        ),
        (
            [1, -1, 3, 5],
            "bbox: bbox tables hold 16 coordinates (0..15); asked for y0 -1 in box [1, -1, 3, 5], below the first row",
        ),
        (
            [5, 2, 3, 4],
            "bbox: expected x0 <= x1 and y0 <= y1 (a box's width and height index its w/h tables); "
            "asked for box [5, 2, 3, 4] (x1 3 < x0 5)",
        ),
        (
            [1, 6, 3, 4],
            "bbox: expected x0 <= x1 and y0 <= y1 (a box's width and height index its w/h tables); "
            "asked for box [1, 6, 3, 4] (y1 4 < y0 6)",
        ),
    ],
)
def test_known_bad_boxes_are_one_line_while_tracing(box, message):
    spec = fp.BboxSpec(ROWS, 2, 2)
    tables = _tables(2, 2)
    with pytest.raises(PositionLimitError) as e:
        fp.bbox_embedding(np.array([box]), *tables, spec)
    assert str(e.value) == message
    with pytest.raises(PositionLimitError) as e:  # a numpy box closed over by a jitted function is known
        jax.jit(lambda: fp.bbox_embedding(np.array([box]), *tables, spec))()
    assert str(e.value) == message


@pytest.mark.parametrize(
    "box,needle",
    [
        ([1, 2, 16, 5], "bbox tables (x0, y0, x1, y1) holds 16 coordinates (0..15); asked for coordinate 16"),
        ([5, 2, 3, 4], "(h at y1 - y0, w at x1 - x0) holds 16 box sides (0..15); asked for box side -2"),
    ],
)
def test_traced_bad_boxes_fail_at_run_time_under_plain_jit(box, needle):
    spec = fp.BboxSpec(ROWS, 2, 2)
    tables = _tables(2, 2)
    f = fp.position_errors(jax.jit(lambda b: fp.bbox_embedding(b, *tables, spec)))
    with pytest.raises(PositionLimitError, match=None) as e:
        f(jnp.array([box]))
    assert needle in str(e.value)
    clipped = jax.jit(lambda b: fp.bbox_embedding(b, *tables, spec, on_overflow="fill"))(jnp.array([box]))
    assert np.isnan(np.asarray(clipped)).all()


@pytest.fixture(scope="module")
def layoutlm_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("layoutlm")
    model = tiny_model("layoutlm")
    with quiet():
        model.save_pretrained(d)
    return d, model


def test_reader_and_shells_reproduce_the_checkpoint_tables(layoutlm_dir):
    d, model = layoutlm_dir
    rec = load_bbox_tables(d)
    assert (rec.limit, rec.spec.combine, rec.unit) == (model.config.max_2d_position_embeddings, "sum", "coordinates")
    bbox = random_boxes(rec.limit, 8, seed=2)
    ref = np.asarray(fp.bbox_embedding(bbox, *rec.weights, rec.spec))
    nnx_module = fp.nnx.BoundingBoxEmbedding.from_pretrained(d)
    linen_module, variables = fp.linen.BoundingBoxEmbedding.from_pretrained(d)
    np.testing.assert_array_equal(np.asarray(nnx_module(bbox)), ref)
    np.testing.assert_array_equal(np.asarray(linen_module.apply(variables, bbox)), ref)
    np.testing.assert_array_equal(np.asarray(nnx.jit(lambda m, b: m(b))(nnx_module, bbox)), ref)
    np.testing.assert_array_equal(
        np.asarray(nnx_module.x_embedding[...]), model.embeddings.x_position_embeddings.weight.detach().numpy()
    )


def test_the_conformance_hook_fails_on_a_wrong_reading(layoutlm_dir):
    """The hook is not vacuous: x and y swapped, concat for sum, or a limit off by one are caught."""
    d, model = layoutlm_dir
    mech = next(m for m in inspect_source(d).mechanisms if m.kind == "bbox_2d")
    assert _bbox_problems(model, mech, d) == []
    x, y, h, w = mech.record.weights
    for wrong in (
        dataclasses.replace(mech.record, weights=(y, x, h, w)),
        dataclasses.replace(mech.record, spec=dataclasses.replace(mech.record.spec, rows=mech.limit - 1)),
    ):
        assert _bbox_problems(model, dataclasses.replace(mech, record=wrong), d) != []


def test_a_layoutlmv3_whose_config_claims_a_spatial_bias_it_lacks_is_one_line(tmp_path, monkeypatch):
    """Its relative biases are read (issue 36, kind layout_relative_bias); a config saying
    ``has_spatial_attention_bias`` over weights without the x/y tables names the flag and the tensor."""
    from conformance import tiny

    monkeypatch.setitem(
        tiny.OVERRIDES, "layoutlmv3", {**tiny.OVERRIDES["layoutlmv3"], "has_spatial_attention_bias": False}
    )
    model = tiny_model("layoutlmv3")
    with quiet():
        model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["has_spatial_attention_bias"] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        inspect_source(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / 'model.safetensors'}: expected encoder.rel_pos_x_bias.weight (has_spatial_attention_bias "
        "is true), found no such tensor"
    )


@pytest.mark.parametrize(
    "argv,code,needle",
    [
        (["--bbox-max", "1023"], 0, "ok: coordinate 1023 fits; layoutlm bbox tables"),
        (["--bbox-max", "1024"], 1, "hold 1024 coordinates (0..1023); asked for coordinate 1024, 1 past the end"),
        (["--bbox-max", "-1"], 2, "--bbox-max: expected a coordinate (an integer, 0 or more), got '-1'"),
        (["--bbox-max", "1000", "--length", "65"], 1, "holds 64 positions (0..63); asked for 65 positions"),
    ],
)
def test_check_bbox_max(layoutlm_dir, capsys, argv, code, needle):
    d, _ = layoutlm_dir
    assert main(["check", str(d), *argv]) == code
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()
    assert any(needle in line for line in lines), lines
    if code:
        assert len(out.err.strip().splitlines()) == 1


def test_check_bbox_max_on_a_model_without_boxes_is_bad_input(capsys):
    assert main(["check", "sinusoidal:8:8", "--bbox-max", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "--bbox-max: expected a SOURCE whose positions count coordinates, found sinusoidal" in err[0]
    )


# ----------------------------------------------------------------------------- time series: check --steps


@pytest.fixture(scope="module")
def informer_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("informer")
    with quiet():
        tiny_model("informer").save_pretrained(d)
    return d


@pytest.mark.parametrize(
    "argv,code,needle",
    [
        (
            ["--steps", "12"],
            0,
            "ok: 12 time steps fit; informer computed sinusoid table (context_length + prediction_length)",
        ),
        (["--steps", "13"], 1, "holds 12 time steps (0..11); asked for 13 time steps (0..12): 1 past the limit"),
        (["--steps", "-3"], 2, "--steps: expected a number of time steps (1 or more), got '-3'"),
        (
            ["--length", "8"],
            2,
            "expected a model with token positions for --length, found time steps only (use --steps)",
        ),
    ],
)
def test_check_steps(informer_dir, capsys, argv, code, needle):
    assert main(["check", str(informer_dir), *argv]) == code
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()
    assert any(needle in line for line in lines), lines
    if code:
        assert len(out.err.strip().splitlines()) == 1


def test_check_steps_on_a_token_model_is_bad_input(capsys):
    assert main(["check", "sinusoidal:8:8", "--steps", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--steps: expected a SOURCE whose positions count time steps" in err[0]


# ----------------------------------------------------------------------------- PatchTST: a table over patches


@pytest.fixture(scope="module")
def patchtst_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("patchtst")
    model = tiny_model("patchtst")
    with quiet():
        model.save_pretrained(d)
    return d, model


@pytest.mark.parametrize(
    "steps,code,needle",
    [
        ("16", 0, "ok: 16 time steps fit; patchtst patch position table (encoder.positional_encoder.position_enc)"),
        (
            "12",
            1,
            "holds 4 patches: exactly context_length 16 time steps (patch_length 4, patch_stride 4); asked for 12",
        ),
        ("20", 1, "asked for 20 time steps (the table is added whole)"),
    ],
)
def test_check_steps_of_a_patch_table_is_exact(patchtst_dir, capsys, steps, code, needle):
    d, _ = patchtst_dir
    assert main(["check", str(d), "--steps", steps]) == code
    out = capsys.readouterr()
    assert needle in out.out + out.err


def test_the_patch_table_hook_fails_on_a_wrong_reading(patchtst_dir):
    from conformance.reference import _patch_table_problems

    d, model = patchtst_dir
    mech = inspect_source(d).mechanisms[0]
    assert (mech.kind, mech.unit, mech.limit) == ("learned", "time steps", 16)
    assert _patch_table_problems(model, mech) == []
    longer = dataclasses.replace(mech.record, context_length=20)
    shuffled = dataclasses.replace(
        mech.record, table=dataclasses.replace(mech.record.table, weights=mech.record.table.weights[::-1])
    )
    for wrong in (longer, shuffled):
        assert _patch_table_problems(model, dataclasses.replace(mech, record=wrong)) != []
