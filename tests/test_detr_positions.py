"""DETR-family 2-D position embeddings: the core against a float64 reference written here from
transformers' formulas, the bad-input lines, the checkpoint record, and the conformance hook's
teeth (a wrong offset and a learned checkpoint). Each model type's own case is in
``tests/test_conformance.py`` (derived from the registry)."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc.errors import CheckpointError, PositionLimitError


def reference(mask: np.ndarray, f: int, *, th=10000.0, tw=10000.0, normalize=True, scale=2 * math.pi,
              eps=1e-6, offset=0.0, layout="interleaved") -> np.ndarray:  # fmt: skip
    """float64, from DetrSinePositionEmbedding / DeformableDetr... / DabDetr... / RT-DETR's
    build_2d_sinusoidal_position_embedding, written out: (batch, 2f, H, W), y then x."""
    m = mask.astype(np.float64)
    out = []
    for axis, t in ((1, th), (2, tw)):
        c = np.cumsum(m, axis)
        last = np.take(c, [-1], axis)
        p = (c + offset) / (last + eps) * scale if normalize else c + offset
        dim_t = t ** (2 * (np.arange(f) // 2) / f)
        pos = p[..., None] / dim_t  # (b, h, w, f): pairs of equal frequencies
        if layout == "interleaved":
            e = np.stack([np.sin(pos[..., 0::2]), np.cos(pos[..., 1::2])], -1).reshape(*pos.shape)
        else:
            e = np.concatenate([np.sin(pos[..., 0::2]), np.cos(pos[..., 0::2])], -1)
        out.append(e)
    return np.concatenate(out, -1).transpose(0, 3, 1, 2)


def _mask(seed: int = 0, batch: int = 3, h: int = 23, w: int = 29) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mask = np.zeros((batch, h, w), bool)
    for b in range(batch):
        mask[b, : rng.integers(1, h + 1), : rng.integers(1, w + 1)] = True
    mask[0] = True
    return mask


VARIANTS = {
    "detr": ({}, {}),
    "deformable_detr": ({"offset": -0.5}, {"offset": -0.5}),
    "dab_detr": (
        {"temperature_height": 20.0, "temperature_width": 30.0},
        {"th": 20.0, "tw": 30.0},
    ),
    "rt_detr_style": (
        {"normalize": False, "offset": -1.0, "layout": "blocks"},
        {"normalize": False, "offset": -1.0, "layout": "blocks"},
    ),
}


def _valid(mask: np.ndarray, f: int) -> np.ndarray:
    """Channels of a row/column that has a valid cell (a fully padded one under an offset is -0.5/eps rad)."""
    y = np.broadcast_to(mask.any(1, keepdims=True)[:, None], (mask.shape[0], f, *mask.shape[1:]))
    x = np.broadcast_to(mask.any(2, keepdims=True)[:, None], (mask.shape[0], f, *mask.shape[1:]))
    return np.concatenate([y, x], 1)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_sine_within_one_float32_ulp_of_float64_under_jit_vmap_and_scan(variant):  # noqa: D103
    ours_kw, ref_kw = VARIANTS[variant]
    f = 32
    cfg = fp.DetrSineConfig(f, **ours_kw)
    mask = _mask()
    ref = reference(mask, f, **ref_kw)
    valid = _valid(mask, f)
    fn = jax.jit(lambda m: fp.detr_sine_embedding(m, cfg))
    ulp = 2.0**-23  # one float32 ulp of 1.0; measured: 0.5
    outputs = [fn(mask)]
    if variant == "detr":  # the transformations once (each a compilation)
        outputs.append(jax.vmap(lambda m: fp.detr_sine_embedding(m[None], cfg)[0])(mask))
        scan = jax.lax.scan(lambda c, m: (c, fp.detr_sine_embedding(m[None], cfg)[0]), None, jnp.asarray(mask))
        outputs.append(scan[1])
    for got in outputs:
        d = np.abs(np.asarray(got, np.float64) - ref)
        assert d[valid].max() <= ulp, d[valid].max() / ulp
        assert np.isfinite(np.asarray(got)).all()
    assert np.asarray(fp.detr_sine_embedding(mask, cfg, dtype=jnp.bfloat16)).dtype == jnp.bfloat16


def test_sine_float32_is_closer_than_the_naive_float32_formula():
    """The exact angle is not vacuous: the plain float32 formula is several ulps off where ours is within one."""
    f, mask = 64, np.ones((1, 61, 61), bool)
    ref = reference(mask, f)
    ours = np.abs(np.asarray(fp.detr_sine_embedding(mask, fp.DetrSineConfig(f)), np.float64) - ref).max()
    c = np.cumsum(mask.astype(np.float32), 2)
    naive = (c / (c[:, :, -1:] + np.float32(1e-6)) * np.float32(2 * math.pi))[..., None] / (
        np.float32(10000.0) ** (2 * (np.arange(f, dtype=np.float32) // 2) / np.float32(f))
    )
    naive_err = np.abs(np.sin(naive[..., 0::2]).astype(np.float64) - np.moveaxis(ref[:, f::2], 1, -1)).max()
    assert ours <= 2.0**-23 < 2 * 2.0**-23 <= naive_err, (ours, naive_err)


def test_a_padded_cell_takes_the_count_before_it():
    mask = np.array([[[1, 1, 0, 0]]], bool)
    e = np.asarray(fp.detr_sine_embedding(mask, fp.DetrSineConfig(2, normalize=False)))
    np.testing.assert_allclose(e[0, 2, 0], np.sin([1, 2, 2, 2]), atol=2**-24)


def test_learned_layout_and_limit():
    rng = np.random.default_rng(0)
    rows, cols = rng.standard_normal((50, 4)).astype(np.float32), rng.standard_normal((50, 4)).astype(np.float32)
    e = np.asarray(jax.jit(lambda m: fp.detr_learned_embedding(m, rows, cols))(np.ones((2, 3, 5), bool)))
    assert e.shape == (2, 8, 3, 5)
    np.testing.assert_array_equal(e[1, :4, 2, 4], cols[4])  # x first
    np.testing.assert_array_equal(e[1, 4:, 2, 4], rows[2])
    assert fp.detr_learned_embedding(np.ones((1, 50, 50), bool), rows, cols).shape == (1, 8, 50, 50)
    with pytest.raises(PositionLimitError) as info:
        jax.jit(lambda m: fp.detr_learned_embedding(m, rows, cols))(np.ones((1, 4, 51), bool))
    assert str(info.value) == (
        "learned DETR column table holds 50 feature-map columns (0..49); asked for feature-map column 50, "
        "1 past the end"
    )


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (np.ones((3, 4), bool), "mask: expected a (batch, height, width) boolean or integer array, got shape (3, 4)"),
        (
            np.ones((1, 3, 4), np.float32),
            "mask: expected a boolean or integer mask (1 = pixel, 0 = padding), got dtype float32",
        ),
        (np.ones((1, 0, 4), bool), "mask: expected a height of 1..4096 feature-map cells, got 0"),
    ],
)
def test_bad_masks_are_one_line(mask, message):
    for call in (
        lambda: fp.detr_sine_embedding(mask, fp.DetrSineConfig(4)),
        lambda: fp.detr_learned_embedding(mask, np.zeros((50, 2)), np.zeros((50, 2))),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_pos_feats": 5}, "num_pos_feats: expected a positive even integer, got 5"),
        ({"num_pos_feats": 4, "temperature_width": 0}, "temperature_width: expected a positive finite number, got 0"),
        ({"num_pos_feats": 4, "layout": "halves"}, "layout: expected one of interleaved, blocks, got 'halves'"),
    ],
)
def test_bad_configs_are_one_line(kwargs, message):
    with pytest.raises(ValueError) as info:
        fp.DetrSineConfig(**kwargs)
    assert str(info.value) == message


def test_feature_mask_is_torchs_nearest():
    torch = pytest.importorskip("torch")  # a dependency of the test environment (pyproject's test extra)
    pixel = np.zeros((2, 41, 53), np.int64)
    pixel[0], pixel[1, :30, :17] = 1, 1
    for size in ((5, 7), (41, 53), (13, 2)):
        ref = torch.nn.functional.interpolate(torch.from_numpy(pixel)[None].float(), size=size).bool()[0].numpy()
        np.testing.assert_array_equal(np.asarray(fp.detr_feature_mask(pixel, size)), ref)
    with pytest.raises(ValueError, match=r"^size: expected \(height, width\) feature-map cells, got \(0, 2\)$"):
        fp.detr_feature_mask(pixel, (0, 2))


def _write(folder, config: dict, tensors: dict | None = None):
    from safetensors.numpy import save_file

    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors or {"backbone.conv.weight": np.zeros((2, 2), np.float32)}, str(folder / "model.safetensors"))
    return folder


def test_records_say_what_they_limit(tmp_path):
    from flax_posenc.conversion import inspect_source

    sine = inspect_source(_write(tmp_path, {"model_type": "deformable_detr", "d_model": 32}))
    (mech,) = sine.mechanisms
    assert (mech.kind, mech.tower, mech.limit) == ("detr_positions", "vision", None)
    assert mech.record.sine == fp.DetrSineConfig(16, offset=-0.5)
    assert mech.describe_limit() == (
        f"deformable_detr sine 2-D position embedding of {tmp_path} has no limit "
        "(sine of the pixel mask: any feature map, unit feature-map cells)"
    )
    assert mech.to_dict()["offset"] == -0.5
    rt_dir = tmp_path / "rt"
    rt_dir.mkdir()
    rt = inspect_source(_write(rt_dir, {"model_type": "rt_detr_v2", "encoder_hidden_dim": 64})).mechanisms[0].record
    assert rt.sine == fp.DetrSineConfig(32, normalize=False, offset=-1.0, layout="blocks")
    learned_dir = tmp_path / "learned"
    learned_dir.mkdir()
    tables = {
        "model.position_embedding.row_embeddings.weight": np.ones((50, 16), np.float32),
        "model.position_embedding.column_embeddings.weight": np.zeros((50, 16), np.float32),
    }
    config = {"model_type": "detr", "d_model": 32, "position_embedding_type": "learned"}
    rec = inspect_source(_write(learned_dir, config, tables)).mechanisms[0].record
    assert rec.feature_limit == (50, 50)
    assert rec.check_feature_map(50, 50)[0] and not rec.check_feature_map(51, 40)[0]
    assert rec.check_feature_map(51, 40)[1].endswith("asked for a 51 x 40 feature map: 1 rows past the limit")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "detr", "d_model": 32, "position_embedding_type": "rope"}, "position_embedding_type: expected 'sine' or 'learned', found 'rope'"),
        ({"model_type": "detr", "d_model": 30}, "d_model: expected d_model as a positive multiple of 4, found 30"),
        ({"model_type": "dab-detr", "hidden_size": 32, "temperature_width": -1}, "temperature_width: expected temperature_width as a positive finite number, found -1"),
        ({"model_type": "detr", "d_model": 32, "position_embedding_type": "learned"}, "expected one learned DETR table *position_embedding.row_embeddings.weight, found none"),
        ({"model_type": "rt_detr", "encoder_hidden_dim": 32, "eval_size": [640, 640]}, "eval_size: expected eval_size null (with eval_size set, transformers' eval forward adds no position embedding), found [640, 640]"),
    ],
)  # fmt: skip
def test_bad_checkpoints_are_one_line(tmp_path, config, message):
    from flax_posenc.conversion import inspect_source

    with pytest.raises(CheckpointError) as info:
        inspect_source(_write(tmp_path, config))
    assert str(info.value).endswith(message) and "\n" not in str(info.value)


def test_conformance_notices_a_wrong_offset(tmp_path, monkeypatch):
    """Deformable DETR read without its -0.5 offset disagrees with its own position module."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import detr_positions

    rows = dict(detr_positions.DETR_POSITION_FAMILIES)
    rows["deformable_detr"] = dataclasses.replace(rows["deformable_detr"], offset=0.0)
    monkeypatch.setattr(detr_positions, "DETR_POSITION_FAMILIES", rows)
    monkeypatch.setattr(detr_positions, "sine_config", _patched_sine_config(rows))
    problems = conformance_problems("deformable_detr", tmp_path)
    assert any(p.startswith("y: detr_sine_embedding differs") for p in problems), problems


def test_conformance_notices_rt_detr_read_interleaved(tmp_path, monkeypatch):
    """RT-DETR read with DETR's interleaved layout disagrees with its own build_2d_sinusoidal_position_embedding."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import detr_positions

    rows = dict(detr_positions.DETR_POSITION_FAMILIES)
    rows["rt_detr_v2"] = dataclasses.replace(rows["rt_detr_v2"], layout="interleaved")
    monkeypatch.setattr(detr_positions, "DETR_POSITION_FAMILIES", rows)
    monkeypatch.setattr(detr_positions, "sine_config", _patched_sine_config(rows))
    problems = conformance_problems("rt_detr_v2", tmp_path)
    assert any(p.startswith("y: detr_sine_embedding differs") for p in problems), problems


def _patched_sine_config(rows):
    from flax_posenc.conversion import detr_positions

    real = detr_positions.sine_config
    return lambda row, config, where="config.json": real(rows.get(row.name, row), config, where)


@pytest.mark.parametrize("model_type", ["detr", "deformable_detr"])
def test_learned_variant_conforms(model_type, tmp_path, monkeypatch):
    """position_embedding_type "learned": tables bit-equal, output bit-equal, 50 x 50 cells in both, 51 in neither."""
    from conformance import tiny
    from conformance.reference import conformance_problems

    monkeypatch.setitem(
        tiny.OVERRIDES, model_type, {**tiny.OVERRIDES[model_type], "position_embedding_type": "learned"}
    )
    assert conformance_problems(model_type, tmp_path) == []


def test_plot_detr_sine_writes_a_png(tmp_path):
    mask = np.zeros((1, 6, 9), bool)
    mask[0, :, :7] = True
    e = np.asarray(fp.detr_sine_embedding(mask, fp.DetrSineConfig(16)))[0]
    path = fp.plots.plot_detr_sine(e, mask[0], tmp_path / "detr.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
