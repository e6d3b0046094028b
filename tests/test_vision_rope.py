"""Vision-tower RoPE (issue 35, item 2): the functional core against float64 numpy written from
the models' formulas, the patch orders against transformers' own ``vision_utils``, the shells, the
reader's bad input, and the conformance hook against a wrong reading. The per-model parity with
each tower's own rotary module and apply function is ``tests/test_conformance.py``'s
(``pixtral``, ``qwen2_vl_vision``, ``qwen2_5_vl_vision``, ``dinov3_vit``, ``qwen2_vl``,
``qwen2_5_vl`` and the composites built on them)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import flax_posenc as fp
from flax_posenc.errors import CheckpointError, PositionLimitError

THETA = 10000.0


def reference_angles(positions: np.ndarray, head_dim: int, split: str, theta: float, normalized: bool) -> np.ndarray:
    """float64 angles ``(patches, head_dim // 2)`` from the models' formulas (not our code):
    Pixtral ``inv_freq = theta ** (-arange(0, D, 2) / D)``, h with ``[0::2]``, w with ``[1::2]``;
    Qwen-VL/DINOv3 ``inv_freq = theta ** (-arange(0, D/2, 2) / (D/2))``, h then w; DINOv3 times 2 pi."""
    d = head_dim
    if split == "pixtral":
        inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        h, w = inv[0::2], inv[1::2]
    else:
        inv = theta ** (-np.arange(0, d // 2, 2, dtype=np.float64) / (d // 2))
        h = w = inv
    p = np.asarray(positions, np.float64) * (2 * np.pi if normalized else 1.0)
    return np.concatenate([p[:, :1] * h, p[:, 1:] * w], -1)


def rotate_half_reference(x: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """``x cos + rotate_half(x) sin`` with ``cos = [cos | cos]`` (transformers' apply, float64)."""
    cos, sin = np.concatenate([np.cos(angle)] * 2, -1), np.concatenate([np.sin(angle)] * 2, -1)
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


CONFIGS = {
    "pixtral": fp.VisionRopeConfig(head_dim=16, split="pixtral", patches_per_side=8),
    "qwen2_vl": fp.VisionRopeConfig(head_dim=16, spatial_merge_size=2),
    "qwen2_5_vl": fp.VisionRopeConfig(head_dim=16, spatial_merge_size=2, window_size=8, patch_size=2),
    "dinov3": fp.VisionRopeConfig(head_dim=16, rope_theta=100.0, coordinates="normalized", prefix_tokens=3),
}
GRID = [[1, 4, 8], [2, 4, 4]]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cos_sin_and_rotation_equal_float64(name):
    cfg = CONFIGS[name]
    grid = GRID[:1] if name in ("pixtral", "dinov3") else GRID
    positions = cfg.positions(grid)
    angle = reference_angles(positions, 16, cfg.split, cfg.rope_theta, cfg.coordinates == "normalized")
    cos, sin = fp.vision_rope_cos_sin(positions, cfg)
    assert cos.shape == sin.shape == (positions.shape[0], 8) and cos.dtype == jnp.float32
    eps = np.finfo(np.float32).eps
    assert np.max(np.abs(np.asarray(cos, np.float64) - np.cos(angle))) <= eps  # known positions: float64, rounded once
    assert np.max(np.abs(np.asarray(sin, np.float64) - np.sin(angle))) <= eps
    rng = np.random.default_rng(0)
    x = rng.standard_normal((cfg.prefix_tokens + positions.shape[0], 2, 16)).astype(np.float32)
    out = np.asarray(jax.jit(lambda x: fp.apply_vision_rope(x, cfg, positions))(x), np.float64)
    ref = rotate_half_reference(x[cfg.prefix_tokens :].astype(np.float64), angle[:, None, :])
    assert np.max(np.abs(out[cfg.prefix_tokens :] - ref)) <= 4 * eps * np.max(np.abs(x))
    assert np.array_equal(out[: cfg.prefix_tokens], x[: cfg.prefix_tokens])  # the class/register tokens: untouched


def test_traced_positions_jit_vmap_scan():
    cfg = CONFIGS["qwen2_vl"]
    positions = cfg.positions([[1, 4, 4]])
    q = np.random.default_rng(1).standard_normal((3, 16, 2, 16)).astype(np.float32)
    eager = np.stack([np.asarray(fp.apply_vision_rope(q[i], cfg, positions)) for i in range(3)])
    traced = jax.jit(jax.vmap(lambda x, p: fp.apply_vision_rope(x, cfg, p), in_axes=(0, None)))(
        q, jnp.asarray(positions)
    )
    assert np.max(np.abs(np.asarray(traced) - eager)) <= 1e-6
    _, scanned = jax.lax.scan(lambda c, x: (c, fp.apply_vision_rope(x, cfg, jnp.asarray(positions))), 0, q)
    assert np.max(np.abs(np.asarray(scanned) - eager)) <= 1e-6
    # DINOv3's coordinates traced: float32 on device, within float32 rounding of the angle (< 2 pi)
    d = CONFIGS["dinov3"]
    centres = d.positions([[1, 4, 8]])
    angle = reference_angles(centres, 16, "axial", 100.0, True)
    cos, _ = jax.jit(lambda p: fp.vision_rope_cos_sin(p, d))(jnp.asarray(centres, jnp.float32))
    assert np.max(np.abs(np.asarray(cos, np.float64) - np.cos(angle))) <= 8 * np.finfo(np.float32).eps


def test_patch_orders_equal_transformers():
    import torch
    from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

    grids = [[1, 4, 8], [2, 4, 6], [1, 6, 2]]
    theirs = get_vision_position_ids(torch.tensor(grids), 2).numpy()
    assert np.array_equal(fp.vision_patch_positions(grids, spatial_merge_size=2), theirs)
    for window, patch in ((8, 2), (4, 2), (16, 2)):
        index, cu = get_vision_window_index(
            torch.tensor(grids), spatial_merge_size=2, window_size=window, patch_size=patch
        )
        ours_index, ours_cu = fp.vision_window_index(grids, spatial_merge_size=2, window_size=window, patch_size=patch)
        assert np.array_equal(ours_index, index.numpy()) and np.array_equal(ours_cu, cu.numpy())


def test_the_grid_limit_is_checked():
    cfg = CONFIGS["pixtral"]
    with pytest.raises(PositionLimitError) as info:
        fp.vision_rope_cos_sin(np.array([[0, 8]]), cfg)
    assert (
        str(info.value)
        == "vision RoPE (8 patches per side) holds 8 positions (0..7); asked for position 8, 1 past the end"
    )
    cos, _ = jax.jit(lambda p: fp.vision_rope_cos_sin(p, cfg, on_overflow="fill"))(jnp.array([[0, 1], [9, 0]]))
    assert np.isfinite(np.asarray(cos[0])).all() and np.isnan(np.asarray(cos[1])).all()
    clipped, _ = jax.jit(lambda p: fp.vision_rope_cos_sin(p, cfg, on_overflow="clip"))(jnp.array([[0, 9]]))
    assert np.array_equal(np.asarray(clipped), np.asarray(fp.vision_rope_cos_sin(np.array([[0, 7]]), cfg)[0]))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: fp.VisionRopeConfig(head_dim=6), "head_dim: expected a positive multiple of 4 (two axes of rotated pairs), got 6"),
        (lambda: fp.VisionRopeConfig(head_dim=8, split="radial"), "split: expected one of ('axial', 'pixtral', 'axial_interleaved', 'axial_columns_first'), got 'radial'"),
        (lambda: fp.VisionRopeConfig(head_dim=8, window_size=8), "window_size and patch_size: expected both or neither (the window order), got 8 and None"),
        (lambda: fp.vision_patch_positions([[1, 3, 4]], spatial_merge_size=2), "grid_thw: expected h and w multiples of spatial_merge_size 2, got [1, 3, 4]"),
        (lambda: fp.vision_window_index([[1, 4, 4]], spatial_merge_size=2, window_size=2, patch_size=2), "window_size: expected at least spatial_merge_size * patch_size = 4 px (one merged block), got 2"),
        (lambda: fp.vision_rope_cos_sin(np.zeros((4, 3), np.int32), CONFIGS["qwen2_vl"]), "positions: expected (..., patches, 2) rows and columns, got shape (4, 3)"),
        (lambda: fp.apply_vision_rope(jnp.ones((5, 2, 16)), CONFIGS["dinov3"], CONFIGS["dinov3"].positions([[1, 2, 2]])), "x: expected 7 tokens on axis -3 (3 prefix tokens + 4 patches), got shape (5, 2, 16)"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


def test_shells_equal_the_core_and_read_a_checkpoint(tmp_path):
    cfg = CONFIGS["qwen2_5_vl"]
    positions = cfg.positions([[1, 4, 8]])
    q = jnp.asarray(np.random.default_rng(2).standard_normal((32, 2, 16)), jnp.float32)
    core = fp.apply_vision_rope(q, cfg, positions)
    nnx_out = nnx.jit(lambda m, q: m(q, positions))(fp.nnx.VisionRotaryEmbedding(cfg), q)
    linen_out = fp.linen.VisionRotaryEmbedding(cfg).apply({}, q, positions)
    for out in (nnx_out, linen_out):  # jitted or not: within float32 roundings of the eager core
        assert np.max(np.abs(np.asarray(out) - np.asarray(core))) <= 1e-6
    rq, rk = fp.linen.VisionRotaryEmbedding(cfg).apply({}, q, q, positions, method="rotate_qk")
    for out in (rq, rk):  # one cos/sin for both, rotated as the core does (float32 roundings apart)
        assert np.max(np.abs(np.asarray(out) - np.asarray(core))) <= 1e-6
    vision = {"model_type": "pixtral", "hidden_size": 32, "num_attention_heads": 2, "head_dim": 16,
              "image_size": 32, "patch_size": 4, "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(vision))
    assert fp.nnx.VisionRotaryEmbedding.from_pretrained(tmp_path).config == CONFIGS["pixtral"]
    module, variables = fp.linen.VisionRotaryEmbedding.from_pretrained(tmp_path)
    assert module.config == CONFIGS["pixtral"] and variables == {}
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": 16, "num_attention_heads": 2, "max_position_embeddings": 8})
    )
    with pytest.raises(CheckpointError) as info:
        fp.nnx.VisionRotaryEmbedding.from_pretrained(tmp_path)
    assert str(info.value) == (
        f"{tmp_path}: expected a checkpoint with a vision-tower RoPE (Pixtral, Qwen2/2.5-VL, DINOv3), found rope positions"
    )


def test_composite_record_names_both_towers(tmp_path):
    from flax_posenc.conversion import inspect_source

    config = {
        "model_type": "qwen2_5_vl",
        "text_config": {"model_type": "qwen2_5_vl_text", "hidden_size": 64, "num_attention_heads": 4,
                        "max_position_embeddings": 64, "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3]}},
        "vision_config": {"model_type": "qwen2_5_vl_vision", "hidden_size": 64, "num_heads": 2, "window_size": 112,
                          "patch_size": 14, "spatial_merge_size": 2},
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    record = inspect_source(tmp_path)
    assert [(m.kind, m.tower) for m in record.mechanisms] == [("mrope", "text"), ("vision_rope", "vision")]
    vision = record.mechanisms[1]
    assert vision.record.config == fp.VisionRopeConfig(
        head_dim=32, spatial_merge_size=2, window_size=112, patch_size=14
    )
    assert vision.to_dict()["window_size"] == 112 and vision.limit is None
    assert record.limit == 64  # the text tower's; the vision RoPE limits no token count
    assert vision.record.check_image_size(28 * 5) == (
        True,
        f"qwen2_5_vl vision RoPE of {tmp_path} has no limit (the angles are computed for any grid of patches); "
        "a 140 x 140 px image fits (10 x 10 patches)",
    )


@pytest.mark.parametrize(
    ("vision", "message"),
    [
        ({"hidden_size": 20, "num_heads": 2}, "a head width (head_dim) that is a positive multiple of 4 (two axes of pairs), found 10"),
        ({"window_size": 14}, "window_size of at least spatial_merge_size * patch_size = 28 px, found 14"),
        ({"rope_parameters": {"rope_type": "axial", "rope_theta": -1}}, "rope_theta as a finite number above 1, found -1"),
    ],
)  # fmt: skip
def test_reader_refuses_bad_vision_configs(tmp_path, vision, message):
    from flax_posenc.conversion import inspect_source

    config = {"model_type": "qwen2_5_vl_vision", "hidden_size": 64, "num_heads": 2, **vision}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        inspect_source(tmp_path)
    assert str(info.value) == f"{tmp_path / 'config.json'}: expected {message}"


def test_pixtral_image_size_check(tmp_path):
    from flax_posenc.conversion import inspect_source

    vision = {
        "model_type": "pixtral",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "image_size": 1024,
        "patch_size": 16,
    }
    (tmp_path / "config.json").write_text(json.dumps(vision))
    record = inspect_source(tmp_path).mechanisms[0].record
    assert record.patches_per_side == 64
    fits, line = record.check_image_size((1024, 512))
    assert fits and line.endswith("a 1024 x 512 px image fits (64 x 32 patches)")
    fits, line = record.check_image_size(1040)
    assert not fits and line.endswith("a 1040 x 1040 px image needs 65 x 65 patches: 1 past the trained side")
    with pytest.raises(CheckpointError, match="image_size divisible by patch_size 16"):
        record.check_image_size(1000)


def test_conformance_notices_a_wrong_split(tmp_path, monkeypatch):
    """The hook is not vacuous: Pixtral read with Qwen's axial split, and Qwen2.5-VL without its
    window order, disagree with their own towers."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import vision_rope
    from flax_posenc.conversion.mechanisms import MECHANISMS

    rows = dict(vision_rope.VISION_ROPE_FAMILIES)
    rows["pixtral"] = dataclasses.replace(rows["pixtral"], split="axial")
    rows["qwen2_5_vl"] = dataclasses.replace(rows["qwen2_5_vl"], window_field=None)
    kind = dataclasses.replace(MECHANISMS["vision_rope"], registries=(("test", rows),))
    monkeypatch.setattr(MECHANISMS, "_kinds", {**MECHANISMS._kinds, "vision_rope": kind})
    monkeypatch.setattr(MECHANISMS, "_derived", {})
    assert conformance_problems("pixtral", tmp_path / "p") == ["vision inv_freq (8,) differs from ours (8,)"]
    problems = conformance_problems("qwen2_5_vl_vision", tmp_path / "q")
    assert problems and all(p.startswith("apply_rotary_pos_emb_vision(") for p in problems), problems


def test_cli_check_image_size(tmp_path, capsys):
    from flax_posenc.report.cli import main

    vision = {
        "model_type": "pixtral",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "image_size": 1024,
        "patch_size": 16,
    }
    (tmp_path / "config.json").write_text(json.dumps(vision))
    assert main(["check", str(tmp_path), "--image-size", "1024x512"]) == 0
    assert capsys.readouterr().out.strip().endswith("a 1024 x 512 px image fits (64 x 32 patches)")
    assert main(["check", str(tmp_path), "--image-size", "1040", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["fits"], out["patches_per_side"], out["scheme"]) == (False, 64, "vision_rope")
    assert main(["check", str(tmp_path), "--image-size", "1000"]) == 2  # not a whole number of patches
    assert "image_size divisible by patch_size 16" in capsys.readouterr().err
    assert main(["check", str(tmp_path), "--length", "10"]) == 2  # a vision RoPE limits no token count
    assert "it limits the image size; ask with --image-size PX" in capsys.readouterr().err
