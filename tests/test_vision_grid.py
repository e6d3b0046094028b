"""The learned grid beside a vision tower's RoPE (issue 35, item 2, second round: Qwen3-VL's
``pos_embed``, GLM-4V's ``embeddings.position_embedding``): ``fp.vision_grid_positions`` against
the float64 resampling written out from each model's definition (not our code), against
transformers' own ``get_vision_interpolation_indices_and_weights`` and ``grid_sample``, its bad
input, the reader's record and errors, and the conformance hook against a wrong reading. Each
model type's parity with its own tower is ``tests/test_conformance.py``'s."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance.reference import _resampled_grid_float64

import flax_posenc as fp
from flax_posenc.errors import CheckpointError

EPS = 2.0**-23
GRIDS = [[1, 4, 6], [2, 6, 2], [1, 10, 8], [1, 2, 2]]  # up, down, a 2-frame video, one merged block


@pytest.mark.parametrize("convention", ["big_vision", "torch_bicubic", "torch_bilinear"])
@pytest.mark.parametrize("merge", [1, 2])
def test_grid_positions_equal_the_float64_definition(convention, merge):
    table = np.random.default_rng(3).standard_normal((25, 8)).astype(np.float32)  # a 5 x 5 grid
    exact = _resampled_grid_float64(table, GRIDS, merge, convention)
    ours = jax.jit(lambda t: fp.vision_grid_positions(t, GRIDS, spatial_merge_size=merge, convention=convention))(table)
    assert ours.dtype == jnp.float32 and ours.shape == exact.shape == (24 + 24 + 80 + 4, 8)
    assert np.abs(np.asarray(ours, np.float64) - exact).max() <= 4 * EPS * np.abs(table).max()
    # vmapped over a batch of tables (the summation order may differ: the same bound, each table)
    batch = jax.vmap(lambda t: fp.vision_grid_positions(t, GRIDS, spatial_merge_size=merge, convention=convention))(
        jnp.stack([table, 2 * table])
    )
    for k in (1, 2):
        err = np.abs(np.asarray(batch[k - 1], np.float64) - k * exact).max()
        assert err <= 4 * EPS * k * np.abs(table).max()


def test_grid_positions_equal_transformers():
    """Qwen3-VL's gather and GLM-4V's ``grid_sample`` (transformers' own float32), merged blocks."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    table = np.random.default_rng(4).standard_normal((36, 8)).astype(np.float32)  # 6 x 6
    scale = EPS * np.abs(table).max()
    grid = [[1, 4, 8], [1, 10, 6]]
    idx, w = get_vision_interpolation_indices_and_weights(
        torch.tensor(grid), 6, mode="bilinear", align_corners=True, spatial_merge_size=2
    )
    theirs = (torch.from_numpy(table)[idx] * w[:, :, None]).sum(1).numpy()
    ours = np.asarray(fp.vision_grid_positions(table, grid, spatial_merge_size=2))
    assert np.abs(ours - theirs).max() <= 8 * scale
    pos = fp.vision_patch_positions(grid, spatial_merge_size=2)
    sizes = np.repeat(np.array(grid)[:, 1:], [t * h * w for t, h, w in grid], axis=0)
    norm = (pos + 0.5) / sizes * 2 - 1  # GLM-4V's sample points, (h, w)
    points = torch.from_numpy(norm[:, ::-1].copy()).float()[None, :, None]  # grid_sample takes (x, y)
    image = torch.from_numpy(table).view(6, 6, 8).permute(2, 0, 1)[None]
    theirs = F.grid_sample(image, points, mode="bicubic", align_corners=False, padding_mode="border")
    theirs = theirs[0, :, :, 0].T.numpy()
    ours = np.asarray(fp.vision_grid_positions(table, grid, spatial_merge_size=2, convention="torch_bicubic"))
    assert np.abs(ours - theirs).max() <= 8 * scale


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fp.vision_grid_positions(np.zeros((24, 4)), [[1, 2, 2]]), "table: expected (side * side, dim) rows of a square grid, got shape (24, 4)"),
        (lambda: fp.vision_grid_positions(np.zeros((16,)), [[1, 2, 2]]), "table: expected (side * side, dim) rows of a square grid, got shape (16,)"),
        (lambda: fp.vision_grid_positions(np.zeros((16, 4)), [[1, 3, 2]], spatial_merge_size=2), "spatial_merge_size"),
        (lambda: fp.vision_grid_positions(np.zeros((16, 4)), [[1, 2, 2]], convention="nearest"), "convention: expected one of"),
    ],
)  # fmt: skip
def test_grid_positions_bad_input(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)


def _qwen3_vision(**fields):
    return {"model_type": "qwen3_vl_vision", "hidden_size": 64, "num_heads": 2, "num_position_embeddings": 16, **fields}


def test_reader_records_the_grid(tmp_path):
    from flax_posenc.conversion import inspect_source

    (tmp_path / "config.json").write_text(json.dumps(_qwen3_vision()))
    mech = inspect_source(tmp_path).mechanisms[0]
    record = mech.record
    assert (mech.kind, mech.tower, mech.limit) == ("vision_rope", "vision", None)
    assert record.config == fp.VisionRopeConfig(head_dim=32, spatial_merge_size=2)
    assert (record.grid_side, record.grid_key, record.grid_convention) == (4, "pos_embed.weight", "big_vision")
    assert mech.to_dict()["grid_side"] == 4
    assert "grid:        a learned 4 x 4 position grid (pos_embed.weight) resampled to every image" in str(record)
    glm = {"model_type": "glm4v_vision", "hidden_size": 64, "num_heads": 2, "image_size": 336, "patch_size": 14}
    (tmp_path / "config.json").write_text(json.dumps(glm))
    record = inspect_source(tmp_path).mechanisms[0].record
    assert (record.grid_side, record.grid_convention) == (24, "torch_bicubic")
    assert record.describe_limit().endswith("(bicubic at the patch centres))")


def test_reader_refuses_a_grid_that_is_not_square(tmp_path):
    from flax_posenc.conversion import inspect_source

    (tmp_path / "config.json").write_text(json.dumps(_qwen3_vision(num_position_embeddings=20)))
    with pytest.raises(CheckpointError) as info:
        inspect_source(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'config.json'}: expected num_position_embeddings a square number (a side x side grid), found 20"
    )


def test_load_vision_grid_names_a_missing_or_wrong_tensor(tmp_path):
    from safetensors.numpy import save_file

    from flax_posenc.conversion import inspect_source
    from flax_posenc.conversion.vision_rope import load_vision_grid

    (tmp_path / "config.json").write_text(json.dumps(_qwen3_vision()))
    record = inspect_source(tmp_path).mechanisms[0].record
    save_file({"blocks.0.attn.qkv.weight": np.zeros((4, 4), np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"expected one position grid \*pos_embed.weight, found none$"):
        load_vision_grid(tmp_path, record)
    save_file({"pos_embed.weight": np.ones((9, 4), np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"expected pos_embed.weight of 16 rows \(4 x 4\), found 9 rows$"):
        load_vision_grid(tmp_path, record)
    table = np.arange(64, dtype=np.float32).reshape(16, 4)
    save_file({"visual.pos_embed.weight": table}, str(tmp_path / "model.safetensors"))
    np.testing.assert_array_equal(load_vision_grid(tmp_path, record), table)


def test_conformance_notices_a_wrong_grid_convention(tmp_path, monkeypatch):
    """The grid check is not vacuous: GLM-4V's grid read with Qwen3-VL's bilinear convention."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import vision_rope
    from flax_posenc.conversion.mechanisms import MECHANISMS

    rows = dict(vision_rope.VISION_ROPE_FAMILIES)
    rows["glm4v"] = dataclasses.replace(rows["glm4v"], grid_convention="big_vision")
    kind = dataclasses.replace(MECHANISMS["vision_rope"], registries=(("test", rows),))
    monkeypatch.setattr(MECHANISMS, "_kinds", {**MECHANISMS._kinds, "vision_rope": kind})
    monkeypatch.setattr(MECHANISMS, "_derived", {})
    problems = conformance_problems("glm4v_vision", tmp_path)
    assert problems and all("vision learned grid differs from the tower's own" in p for p in problems[:1]), problems


def test_axial_interleaved_split_equals_kimi_k25_formula():
    """Kimi K2.5's recomposition ``freq.transpose(1, 2).flip(-1).flatten(1)``: pair ``2i`` turns
    with the column, pair ``2i + 1`` with the row, both at ``theta ** (-4i / D)`` (float64 here)."""
    cfg = fp.VisionRopeConfig(head_dim=16, split="axial_interleaved")
    positions = fp.vision_patch_positions([[1, 3, 5]])
    inv = 10000.0 ** (-np.arange(0, 8, 2, dtype=np.float64) / 8)
    p = positions.astype(np.float64)
    angle = np.stack([p[:, 1:] * inv, p[:, :1] * inv], -1).reshape(len(p), 8)  # (w, h) per frequency
    cos, sin = fp.vision_rope_cos_sin(positions, cfg)
    assert np.abs(np.asarray(cos, np.float64) - np.cos(angle)).max() <= 2**-22 * (1 + np.abs(angle).max())
    assert np.abs(np.asarray(sin, np.float64) - np.sin(angle)).max() <= 2**-22 * (1 + np.abs(angle).max())


def test_frame_sinusoid_equals_the_formula_and_refuses_a_long_clip():
    grid = [[1, 2, 2], [3, 1, 2]]
    ours = np.asarray(fp.vision_frame_sinusoid(grid, 6, 4), np.float64)
    inv = 10000.0 ** (-np.arange(0, 6, 2) / 6)
    expect = [np.zeros(6)] * 4 + [np.concatenate([np.sin(f * inv), np.cos(f * inv)]) for f in (0, 0, 1, 1, 2, 2)]
    assert np.abs(ours - np.array(expect)).max() <= EPS
    with pytest.raises(fp.PositionLimitError) as info:
        fp.vision_frame_sinusoid([[5, 1, 1]], 6, 4)
    assert str(info.value) == (
        "vision frame sinusoid holds 4 frames per clip (0..3); grid_thw asks for a clip of 5 frames"
    )
    with pytest.raises(ValueError, match=r"^dim: expected a positive even width, got 5$"):
        fp.vision_frame_sinusoid(grid, 5, 4)


def test_kimi_k25_refuses_what_transformers_cannot_run(tmp_path):
    """transformers indexes past its 1 + pos_emb_time rows for a longer clip; a non-square grid is refused."""
    torch = pytest.importorskip("torch")
    from transformers import CONFIG_MAPPING
    from transformers.models.kimi_k25 import modeling_kimi_k25 as kimi

    from flax_posenc.conversion import inspect_source

    hf = CONFIG_MAPPING["kimi_k25_vision"](hidden_size=8, pos_emb_height=4, pos_emb_width=4, pos_emb_time=2)
    module = kimi.Kimi_K25VisionPositionEmbeddings(hf)
    with pytest.raises(IndexError):
        module(torch.zeros(3 * 4, 8), torch.tensor([[3, 2, 2]]))
    config = {"model_type": "kimi_k25_vision", "hidden_size": 64, "num_attention_heads": 2, "pos_emb_width": 32}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        inspect_source(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'config.json'}: expected pos_emb_width equal to pos_emb_height 64 (a square grid), found 32"
    )
    (tmp_path / "config.json").write_text(json.dumps({**config, "pos_emb_width": 64}))
    record = inspect_source(tmp_path).mechanisms[0].record
    assert (record.grid_side, record.frames, record.config.split) == (64, 4, "axial_interleaved")
    assert "sinusoid per frame of a clip of up to 4 frames" in record.describe_limit()


def test_torch_bilinear_matrices_reproduce_f_interpolate():
    """PaddleOCR-VL's recipe (bilinear, corners not aligned, no antialias), growing and shrinking,
    equals ``F.interpolate`` in float64 (the new ``torch_bilinear`` row of GRID_CONVENTIONS)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from flax_posenc.grid_config import GRID_CONVENTIONS, resize_matrix

    rng = np.random.default_rng(6)
    rule = GRID_CONVENTIONS["torch_bilinear"]
    for old, new in ((4, 9), (9, 4), (14, 24), (37, 16), (3, 1)):
        grid = rng.standard_normal((old, old + 2, 2))
        ours = np.einsum("oh,hwd,pw->opd", resize_matrix(old, new, rule), grid, resize_matrix(old + 2, new + 1, rule))
        ref = F.interpolate(torch.tensor(grid).permute(2, 0, 1)[None], size=(new, new + 1), mode="bilinear")
        np.testing.assert_allclose(ours, ref[0].permute(1, 2, 0).numpy(), rtol=0, atol=1e-13)


def test_prefix_angles_turn_the_class_token():
    """MLCD: the class token (first) turns by learned angles ``[a | a]`` (rotate_half), float64 formula."""
    cfg = fp.VisionRopeConfig(head_dim=8, prefix_tokens=1)
    positions = cfg.positions([[1, 2, 3]])
    angles = np.array([[0.3, -1.2, 2.0, 0.7]], np.float32)
    q = np.random.default_rng(7).standard_normal((7, 2, 8)).astype(np.float32)
    out = np.asarray(jax.jit(lambda x: fp.apply_vision_rope(x, cfg, positions, prefix_angles=angles))(q), np.float64)
    a = np.concatenate([angles[0], angles[0]]).astype(np.float64)
    x = q[0].astype(np.float64)
    expect = x * np.cos(a) + np.concatenate([-x[:, 4:], x[:, :4]], -1) * np.sin(a)
    assert np.abs(out[0] - expect).max() <= 4 * EPS * np.abs(x).max()
    plain = np.asarray(jax.jit(lambda x: fp.apply_vision_rope(x, cfg, positions))(q))
    np.testing.assert_allclose(out[1:], plain[1:], rtol=0, atol=4 * EPS * np.abs(q).max())  # patches as before
    with pytest.raises(ValueError, match=r"^prefix_angles: expected shape \(1, 4\), got \(1, 3\)$"):
        fp.apply_vision_rope(q, cfg, positions, prefix_angles=angles[:, :3])


def test_conformance_notices_unread_class_angles(tmp_path, monkeypatch):
    """MLCD read without its learned class-token angles disagrees with its own tower."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import vision_rope
    from flax_posenc.conversion.mechanisms import MECHANISMS

    rows = dict(vision_rope.VISION_ROPE_FAMILIES)
    rows["mlcd"] = dataclasses.replace(rows["mlcd"], prefix_angle_key=None)
    kind = dataclasses.replace(MECHANISMS["vision_rope"], registries=(("test", rows),))
    monkeypatch.setattr(MECHANISMS, "_kinds", {**MECHANISMS._kinds, "vision_rope": kind})
    monkeypatch.setattr(MECHANISMS, "_derived", {})
    problems = conformance_problems("mlcd_vision_model", tmp_path)
    assert "position parameters not read: class_pos_emb" in problems
    assert any(p.startswith("apply_rotary_pos_emb_vision(q) differs") for p in problems), problems
