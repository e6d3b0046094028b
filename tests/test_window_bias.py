"""Window relative position bias (issue 35): the index, SwinV2's coordinates and the resizes against
independent references (brute-force integers, float64 formulas, transformers' own modules, timm's
``resize_rel_pos_bias_table`` transcribed in torch); the reader's bad input, one line each; the
conformance hook is not vacuous. The per-model-type parity runs in ``tests/test_conformance.py``.
"""

from __future__ import annotations

import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conformance.reference import conformance_problems, timm_resize_rel_pos_bias_table
from conformance.tiny import quiet, tiny_model
from flax import nnx

import flax_posenc as fp
from flax_posenc.conversion import CheckpointError, inspect_source, load_window_bias
from flax_posenc.window_bias_config import log_spaced_coords, relative_position_index, resize_table

WINDOWS = [(1, 1), (2, 2), (2, 3), (4, 4), (3, 5)]


def _brute_index(h: int, w: int, class_token: bool) -> np.ndarray:
    """The index from its definition, one pair at a time with Python integers."""
    n = h * w
    rows = (2 * h - 1) * (2 * w - 1)
    size = n + 1 if class_token else n
    out = np.zeros((size, size), np.int64)
    for i in range(size):
        for j in range(size):
            if class_token and i == 0 and j == 0:
                out[i, j] = rows + 2
            elif class_token and i == 0:
                out[i, j] = rows
            elif class_token and j == 0:
                out[i, j] = rows + 1
            else:
                a, b = (i - 1, j - 1) if class_token else (i, j)
                (ri, ci), (rj, cj) = divmod(a, w), divmod(b, w)
                out[i, j] = (ri - rj + h - 1) * (2 * w - 1) + (ci - cj + w - 1)
    return out


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("class_token", [False, True])
def test_index_equals_the_definition_and_transformers(window, class_token):
    from transformers.models.beit.modeling_beit import BeitRelativePositionBias
    from transformers.models.swin.modeling_swin import SwinRelativePositionBias

    ours = relative_position_index(window, class_token=class_token)
    np.testing.assert_array_equal(ours, _brute_index(*window, class_token))
    if class_token:
        ref = BeitRelativePositionBias.generate_relative_position_index(tuple(window)).numpy()
    else:
        ref = SwinRelativePositionBias(2, tuple(window))._create_relative_position_index().numpy()
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize(("window", "pretrained"), [((4, 4), 0), ((5, 5), 3), ((1, 1), 0), ((3, 4), 0)])
def test_log_spaced_coords_equal_the_formula_and_swinv2(window, pretrained):
    from transformers import Swinv2Config
    from transformers.models.swinv2.modeling_swinv2 import Swinv2SelfAttention

    h, w = window
    by_h, by_w = (pretrained - 1, pretrained - 1) if pretrained else ((h - 1, w - 1) if h > 1 else (1, 1))
    expected = [
        [math.copysign(math.log2(abs(8 * v / d) + 1) / 3, v) if v else 0.0 for v, d in ((dy, by_h), (dx, by_w))]
        for dy in range(-(h - 1), h)
        for dx in range(-(w - 1), w)
    ]
    ours = log_spaced_coords(window, pretrained)
    np.testing.assert_allclose(ours, np.array(expected), rtol=1e-15, atol=0)
    module = Swinv2SelfAttention(Swinv2Config(), 8, 2, window, (pretrained, pretrained))
    ref = module.relative_coords_table.reshape(-1, 2).numpy()
    assert np.abs(ours - ref).max() <= 2 * np.spacing(np.float32(1.06))


def test_window_bias_under_jit_vmap_and_grad():
    table = jnp.asarray(np.random.default_rng(0).standard_normal((25, 3)), jnp.float32)
    eager = fp.window_bias(table, 3)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(table)[_brute_index(3, 3, False)].transpose(2, 0, 1))
    np.testing.assert_array_equal(np.asarray(jax.jit(fp.window_bias, static_argnums=1)(table, 3)), np.asarray(eager))
    batched = jax.vmap(lambda t: fp.window_bias(t, 3))(jnp.stack([table, 2 * table]))
    np.testing.assert_array_equal(np.asarray(batched[1]), 2 * np.asarray(eager))
    grad = jax.grad(lambda t: fp.window_bias(t, 3).sum())(table)
    counts = np.bincount(_brute_index(3, 3, False).ravel(), minlength=25)  # each row's uses
    np.testing.assert_array_equal(np.asarray(grad), np.repeat(counts[:, None], 3, 1).astype(np.float32))


def test_continuous_bias_equals_a_float64_mlp():
    rng = np.random.default_rng(1)
    w1, b1, w2 = rng.standard_normal((16, 2)), rng.standard_normal(16), rng.standard_normal((2, 16))
    ours = np.asarray(fp.continuous_window_bias(w1, b1, w2, (3, 3), pretrained_window=4, dtype=jnp.float32))
    idx = _brute_index(3, 3, False)
    coords = log_spaced_coords(3, 4)
    table = np.array(
        [[sum(w2[k, j] * max(0.0, w1[j] @ c + b1[j]) for j in range(16)) for k in range(2)] for c in coords]
    )
    expected = 16.0 / (1.0 + np.exp(-table[idx].transpose(2, 0, 1)))
    assert np.abs(ours - expected).max() <= 8 * np.spacing(np.float32(16))


@pytest.mark.parametrize(("grid", "new"), [((4, 4), (6, 6)), ((3, 3), (5, 2))])  # grow; non-square (its reshape)
def test_transformers_resize_equals_beit_forward(grid, new):
    """BeitRelativePositionBias.forward resizes its table to any grid (its (2w-1) x (2h-1) reshape included)."""
    from transformers import BeitConfig
    from transformers.models.beit.modeling_beit import BeitRelativePositionBias

    config = BeitConfig(image_size=[8 * grid[0], 8 * grid[1]], patch_size=8, num_attention_heads=2)
    module = BeitRelativePositionBias(config)
    torch.manual_seed(0)
    with torch.no_grad():
        module.relative_position_bias_table.normal_()
        ref = module(new, interpolate_pos_encoding=False)[0].numpy()
        # the interpolate_pos_encoding path resizes the bias again, to the token count: the same size
        again = module(new, interpolate_pos_encoding=True, dim_size=new[0] * new[1] + 1)[0].numpy()
    np.testing.assert_array_equal(again, ref)
    table = module.relative_position_bias_table.detach().numpy()
    ours = fp.window_bias(
        fp.resize_window_table(table, grid, new, class_token=True, convention="transformers"), new, class_token=True
    )
    scale = np.spacing(np.float32(np.abs(table).max()))  # torch weighs in float32: 8 ulps, as the conformance hook
    assert np.abs(np.asarray(ours, np.float64) - ref).max() <= 8 * scale
    f64 = resize_table(table, grid, new, class_token=True, convention="transformers")[
        relative_position_index(new, class_token=True)
    ]
    assert np.abs(f64.transpose(2, 0, 1) - ref).max() <= 8 * scale


@pytest.mark.parametrize(("window", "new", "extra"), [(4, 7, 0), (7, 4, 0), (3, 5, 3)])  # grow, shrink, BEiT rows
def test_timm_resize_equals_timm(window, new, extra):
    rows = (2 * window - 1) ** 2 + extra
    table = np.random.default_rng(2).standard_normal((rows, 3)).astype(np.float32)
    new_rows = (2 * new - 1) ** 2 + extra
    ref = timm_resize_rel_pos_bias_table(torch.from_numpy(table), (new, new), (new_rows, 3)).numpy()
    ours = np.asarray(fp.resize_window_table(table, window, new, class_token=bool(extra), convention="timm"))
    assert ours.shape == ref.shape == (new_rows, 3)
    assert np.abs(ours.astype(np.float64) - ref).max() <= 8 * np.spacing(np.float32(np.abs(table).max()))


def test_the_shells_equal_the_model(tmp_path):
    model = tiny_model("beit")
    with torch.no_grad():
        for p in (p for n, p in model.named_parameters() if n.endswith("relative_position_bias_table")):
            p.normal_()
    with quiet():
        model.save_pretrained(tmp_path)
    own = model.layers[1].relative_position_bias if hasattr(model, "layers") else None
    own = own or [m for n, m in model.named_modules() if type(m).__name__ == "BeitRelativePositionBias"][1]
    with torch.no_grad():
        ref = own((4, 4), interpolate_pos_encoding=False)[0].numpy()
        big = own((6, 6), interpolate_pos_encoding=False)[0].numpy()
    bias = fp.nnx.WindowRelativeBias.from_pretrained(tmp_path, layer=1, convention="transformers")
    np.testing.assert_array_equal(np.asarray(bias()), ref)
    linen, variables = fp.linen.WindowRelativeBias.from_pretrained(tmp_path, layer=1, convention="transformers")
    np.testing.assert_array_equal(np.asarray(linen.apply(variables)), ref)
    assert np.abs(np.asarray(bias((6, 6)), np.float64) - big).max() <= 4 * np.spacing(np.float32(np.abs(ref).max()))
    assert fp.nnx.WindowRelativeBias(2, 2, rngs=nnx.Rngs(0))().shape == (2, 4, 4)


@pytest.fixture(scope="module")
def swin(tmp_path_factory):
    path = tmp_path_factory.mktemp("swin")
    with quiet():
        tiny_model("swin").save_pretrained(path)
    return path


def _copy(path, tmp_path, **changes):
    out = tmp_path / "copy"
    shutil.copytree(path, out)
    config = json.loads((out / "config.json").read_text())
    config.update(changes)
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"window_size": 8},
            "config.json:window_size: expected a window within stage 1's 4 x 4 patches (image_size 32 / patch_size 4 / 2**1), found 8 x 8",
        ),
        ({"image_size": 30}, "config.json:image_size: expected image_size divisible by patch_size 4, found 30 x 30 px"),
        (
            {"window_size": 3},
            "expected 25 rows ((2*3-1) x (2*3-1) offsets of a 3 x 3 window), found 49 rows",
        ),
        (
            {"use_absolute_embeddings": True},
            "config.json:use_absolute_embeddings: expected use_absolute_embeddings false (its absolute grid is not read), found true",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_field(swin, tmp_path, changes, line):
    with pytest.raises(CheckpointError) as e:
        load_window_bias(_copy(swin, tmp_path, **changes))
    message = str(e.value)
    assert "\n" not in message and message.endswith(line), message


def test_a_table_of_other_rows_is_one_line():
    with pytest.raises(CheckpointError) as e:
        fp.window_bias(jnp.zeros((10, 2)), 2, class_token=True)  # BEiT's + 3 rows
    assert str(e.value) == (
        "table: expected 12 rows ((2*2-1) x (2*2-1) offsets of a 2 x 2 window + 3 class-token rows), found 10 rows"
    )


def test_the_record_says_the_window(swin):
    rec = inspect_source(swin)
    (mech,) = rec.mechanisms
    assert mech.kind == "window_bias" and mech.tower == "vision" and rec.limit is None
    assert "swin window bias (2 tables) of " in mech.record.describe_limit()
    assert "holds the offsets of a 4 x 4 window of patches (49 rows per head)" in mech.record.describe_limit()
    assert mech.record.check_image_size(32)[0] and not mech.record.check_image_size(16)[0]
    assert json.loads(json.dumps(rec.to_dict()))["mechanisms"][0]["window"] == [4, 4]


def test_conformance_notices_a_wrong_index(tmp_path, monkeypatch):
    """The hook is not vacuous: an index read transposed (query and key swapped) is caught."""
    from flax_posenc import windows

    monkeypatch.setattr(
        windows,
        "relative_position_index",
        lambda w, class_token=False: relative_position_index(w, class_token=class_token).T,
    )
    problems = conformance_problems("donut-swin", tmp_path)
    assert any("bias differs from the model's" in p for p in problems), problems


def test_a_window_we_refuse_fails_in_transformers():
    """The refusal of a window larger than a Swin stage's grid is transformers' own: its forward fails."""
    from transformers import SwinConfig, SwinModel

    config = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=8)
    with quiet():
        model = SwinModel(config).eval()
    with pytest.raises(RuntimeError, match="must match the size"), torch.no_grad():
        model(torch.zeros(1, 3, 32, 32))


def test_beit_with_shared_and_per_layer_tables_conforms(tmp_path, monkeypatch):
    from conformance import tiny

    monkeypatch.setitem(tiny.OVERRIDES, "beit", {**tiny.OVERRIDES["beit"], "use_shared_relative_position_bias": True})
    assert conformance_problems("beit", tmp_path) == []
    labels = [layer.label for layer in load_window_bias(tmp_path).layers]
    assert labels == ["shared", "layer 0", "layer 1"]


def test_conformance_notices_swinv2_read_without_its_pretrained_window(tmp_path, monkeypatch):
    """The hook is not vacuous for the MLP: coordinates normalised by the layer's own window instead
    of ``pretrained_window_sizes`` (the tiny SwinV2's stage 0 has 3) are caught."""
    from flax_posenc import windows

    real = windows.log_spaced_coords
    monkeypatch.setattr(windows, "log_spaced_coords", lambda window, pretrained=0: real(window, 0))
    problems = conformance_problems("swinv2", tmp_path)
    assert any(p.startswith("stage 0 block 0: bias differs") for p in problems), problems


def test_check_image_size_asks_the_window(swin, capsys):
    from flax_posenc.report.cli import main

    assert main(["check", str(swin), "--image-size", "64"]) == 0  # stages of 16 and 8 patches: the 4 x 4 window fits
    assert "a 16 x 16 grid fits (last stage 8 x 8)" in capsys.readouterr().out
    assert (
        main(["check", str(swin), "--image-size", "16", "--json"]) == 1
    )  # a 2 x 2 last stage: smaller than the window
    report = json.loads(capsys.readouterr().out)
    assert report["fits"] is False and report["scheme"] == "window_bias" and report["window"] == [4, 4]
    assert report["message"].endswith("a 4 x 4 grid leaves 2 x 2 patches at the last stage, smaller than the window")
