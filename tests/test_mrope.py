"""Qwen2-VL / Qwen2.5-VL multimodal RoPE (M-RoPE) against transformers' own classes.

Tiny random Qwen2-VL and Qwen2.5-VL models are built with transformers; the references are their
``get_rope_index`` (position ids), their rotary modules (``cos``/``sin``) and the modeling file's
``apply_rotary_pos_emb`` (the rotation), plus a float64 numpy formula for ``cos``/``sin``.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import flax_posenc as fp
from flax_posenc.conversion import inspect_source
from flax_posenc.errors import CheckpointError, PositionLimitError

IMAGE, VIDEO = 100, 101
TEXT = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6},
)
VISION = dict(depth=1, hidden_size=64, num_heads=2, patch_size=2, spatial_merge_size=2, temporal_patch_size=1)


def build_tiny_qwen_vl(kind: str):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLModel, Qwen2VLConfig, Qwen2VLModel

    if kind == "qwen2_vl":
        config_cls, model_cls, vision = Qwen2VLConfig, Qwen2VLModel, {**VISION, "embed_dim": 32}
    else:
        config_cls, model_cls = Qwen2_5_VLConfig, Qwen2_5_VLModel
        vision = {**VISION, "out_hidden_size": 64, "intermediate_size": 64, "tokens_per_second": 3}
        vision.update(fullatt_block_indexes=[0], window_size=8)
    config = config_cls(text_config=TEXT, vision_config=vision, image_token_id=IMAGE, video_token_id=VIDEO)
    torch.manual_seed(0)
    return model_cls(config).eval()


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl"])
def tiny(request, tmp_path_factory):
    """(model, its saved directory, the MRopeConfig read from it)."""
    model = build_tiny_qwen_vl(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return model, path, fp.conversion.load_mrope_config(path)


def _theirs(model, ids, images=None, videos=None, mask=None, seconds=None):
    """transformers' get_rope_index, its token types built from the token ids as the processor does."""
    ids_t = torch.as_tensor(np.asarray(ids))
    types = (ids_t == IMAGE).int() + 2 * (ids_t == VIDEO).int()
    kwargs = {}
    if seconds is not None:
        kwargs["second_per_grid_ts"] = torch.tensor(seconds, dtype=torch.float32)
    with torch.no_grad():
        pos, deltas = model.get_rope_index(
            ids_t,
            mm_token_type_ids=types,
            image_grid_thw=None if images is None else torch.tensor(images),
            video_grid_thw=None if videos is None else torch.tensor(videos),
            attention_mask=None if mask is None else torch.as_tensor(np.asarray(mask)),
            **kwargs,
        )
    return pos.numpy(), deltas.numpy()


def _prompt(rng, *pieces):
    """Concatenate text runs (an int: that many random text ids) and placeholder runs ((token, count))."""
    out = []
    for p in pieces:
        out += list(rng.integers(3, 90, p)) if isinstance(p, int) else [p[0]] * p[1]
    return out


CASES = {
    # name: (rows of pieces, image grids, video grids, left padding per row, seconds per video)
    "text_only": ([[7], [7]], None, None, [0, 0], None),
    "one_image": ([[3, (IMAGE, 6), 4]], [[1, 4, 6]], None, [0], None),
    "two_images": ([[2, (IMAGE, 4), 1, (IMAGE, 12), 3]], [[1, 4, 4], [3, 4, 4]], None, [0], None),
    "video": ([[2, (VIDEO, 12), 5]], None, [[3, 4, 4]], [0], [0.5]),
    "left_padded_mixed": (
        [[2, (IMAGE, 4), 3, (VIDEO, 8), 2], [1, (VIDEO, 6), 4], [9]],
        [[1, 4, 4]],
        [[2, 4, 4], [1, 4, 6]],
        [0, 6, 10],
        [1.25, 2.0],
    ),
}


def _case(name, seed=0):
    rows, images, videos, pads, seconds = CASES[name]
    rng = np.random.default_rng(seed)
    seqs = [_prompt(rng, *r) for r in rows]
    width = max(len(s) + p for s, p in zip(seqs, pads))
    ids = np.zeros((len(seqs), width), np.int64)
    mask = np.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, width - len(s) :] = s  # left padding, as generation pads
        mask[b, width - len(s) :] = 1
    return ids, images, videos, mask if any(pads) or width > min(map(len, seqs)) else None, seconds


@pytest.mark.parametrize("name", sorted(CASES))
def test_positions_equal_get_rope_index(tiny, name):
    model, _, cfg = tiny
    ids, images, videos, mask, seconds = _case(name)
    theirs, their_deltas = _theirs(model, ids, images, videos, mask, seconds)
    ours, deltas = fp.mrope_positions(
        jnp.asarray(ids),  # a concrete jax array is accepted
        image_grid_thw=images,
        video_grid_thw=videos,
        attention_mask=mask,
        second_per_grid_ts=seconds,
        config=cfg,
        return_deltas=True,
    )
    assert ours.shape == (3,) + ids.shape
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(deltas, their_deltas)


def test_qwen2_5_video_positions_step_by_seconds_and_qwen2_by_one(tiny):
    """The temporal scale differs between the two: a check that the cases above can tell them apart."""
    model, _, cfg = tiny
    ids, _, videos, _, seconds = _case("video")
    ours = fp.mrope_positions(ids, video_grid_thw=videos, second_per_grid_ts=seconds, config=cfg)
    temporal = np.unique(ours[0, 0, 2:14])
    step = 1.0 if cfg.tokens_per_second is None else 3 * 0.5  # Qwen2.5-VL: 3 tokens/s x 0.5 s per grid step
    np.testing.assert_array_equal(temporal, 2 + np.floor(step * np.arange(3)))  # [2, 3, 5]: truncated


def _module_cos_sin(model, positions):
    rotary = model.language_model.rotary_emb
    x = torch.zeros(1, positions.shape[-1], 8)
    with torch.no_grad():
        cos, sin = rotary(x, torch.as_tensor(positions))
    half = cos.shape[-1] // 2
    return cos[..., :half].double().numpy(), sin[..., :half].double().numpy()


def test_cos_sin_equal_the_rotary_module_and_float64(tiny):
    model, _, cfg = tiny
    ids, images, videos, mask, seconds = _case("left_padded_mixed")
    positions = fp.mrope_positions(
        ids, image_grid_thw=images, video_grid_thw=videos, attention_mask=mask, second_per_grid_ts=seconds, config=cfg
    )
    cos, sin = jax.jit(lambda p: fp.mrope_cos_sin(p, cfg))(positions)
    cos, sin = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    their_cos, their_sin = _module_cos_sin(model, positions)
    # float64 reference from the formula: frequency j turns with component j's section
    inv = 1e6 ** (-np.arange(0, 16, 2) / 16)
    component = np.repeat([0, 1, 2], [2, 3, 3])
    angle = positions[component, :, :].transpose(1, 2, 0) * inv  # (batch, seq, 8)
    assert np.max(np.abs(cos - np.cos(angle))) <= 2e-6 and np.max(np.abs(sin - np.sin(angle))) <= 2e-6
    tol = 2.0**-22 * (1 + angle)  # transformers' float32 angle and cos
    assert np.all(np.abs(cos - their_cos) <= tol) and np.all(np.abs(sin - their_sin) <= tol)


def test_rotation_equals_apply_rotary_pos_emb_under_jit_and_vmap(tiny):
    import sys

    model, _, cfg = tiny
    apply = sys.modules[type(model).__module__].apply_rotary_pos_emb
    ids, images, videos, mask, seconds = _case("left_padded_mixed")
    positions = fp.mrope_positions(
        ids, image_grid_thw=images, video_grid_thw=videos, attention_mask=mask, second_per_grid_ts=seconds, config=cfg
    )
    batch, seq = ids.shape
    rng = np.random.default_rng(1)
    q = rng.standard_normal((batch, 4, seq, 16)).astype(np.float32)  # Hugging Face's (batch, heads, seq, dim)
    k = rng.standard_normal((batch, 2, seq, 16)).astype(np.float32)
    x = torch.zeros(1, seq, 8)
    with torch.no_grad():
        cos, sin = model.language_model.rotary_emb(x, torch.as_tensor(positions))
        rq, rk = apply(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    rotate = jax.jit(lambda a, p: fp.apply_mrope(a, cfg, p, seq_axis=-2))
    for ours, ref in ((rotate(q, positions), rq), (rotate(k, positions), rk)):
        assert np.max(np.abs(np.asarray(ours) - ref.numpy())) <= 1e-5
    # Flax layout (batch, seq, heads, dim), one example at a time under vmap, positions traced
    flax_q = np.swapaxes(q, 1, 2)
    per_example = jax.jit(jax.vmap(lambda a, p: fp.apply_mrope(a[None], cfg, p[:, None])[0], in_axes=(0, 1)))
    out = np.swapaxes(np.asarray(per_example(flax_q, positions)), 1, 2)
    assert np.max(np.abs(out - rq.numpy())) <= 1e-5


def test_limit_is_checked_on_the_largest_component(tiny):
    _, _, cfg = tiny  # max_position_embeddings 64
    positions = np.zeros((3, 1, 4), np.int64)
    positions[:, 0] = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 70, 3]]  # only the width component passes 63
    with pytest.raises(PositionLimitError, match=r"holds 64 positions \(0\.\.63\); asked for position 70, 7 past"):
        jax.jit(lambda q: fp.apply_mrope(q, cfg, positions))(jnp.ones((1, 4, 2, 16)))
    with pytest.raises(PositionLimitError, match="asked for position 70"):  # traced positions: at run time
        fp.position_errors(jax.jit(lambda p: fp.mrope_cos_sin(p, cfg)))(jnp.asarray(positions))
    fp.mrope_cos_sin(np.minimum(positions, 63), cfg)  # the same positions within the limit pass


def test_config_and_inspect_read_the_checkpoint(tiny):
    model, path, cfg = tiny
    text = model.config.text_config
    assert cfg.mrope_section == (2, 3, 3) and cfg.image_token_id == IMAGE and cfg.video_token_id == VIDEO
    assert cfg.spatial_merge_size == model.config.vision_config.spatial_merge_size
    assert cfg.rope.head_dim == 16 and cfg.rope.rope_theta == text.rope_parameters["rope_theta"]
    assert cfg.limit == text.max_position_embeddings == 64
    tps = getattr(model.config.vision_config, "tokens_per_second", None)
    assert cfg.tokens_per_second == tps
    rec = inspect_source(path)
    assert [(m.kind, m.tower) for m in rec.mechanisms] == [("mrope", "text"), ("vision_rope", "vision")]
    assert rec.limit == 64  # the text M-RoPE's: the vision tower's patch rotary has no limit
    assert rec.check_length(65)[0] is False and rec.to_dict()["mechanisms"][0]["mrope"]["mrope_section"] == [2, 3, 3]
    # the vision tower's 2-D patch rotary, against transformers' vision blocks and rotary module
    vision = rec.to_dict()["mechanisms"][1]
    attn, vcfg = model.visual.blocks[0].attn, model.config.vision_config
    assert vision["limit"] is None and vision["split"] == "axial" and vision["layout"] == "half"
    assert vision["head_dim"] == attn.head_dim and vision["spatial_merge_size"] == vcfg.spatial_merge_size
    assert vision["patch_size"] == vcfg.patch_size and vision["window_size"] == getattr(vcfg, "window_size", None)
    quarter = vision["head_dim"] // 2  # frequencies per axis: rows and columns each take half of head_dim
    inv_freq = 1.0 / vision["rope_theta"] ** (np.arange(0, quarter, 2, dtype=np.float64) / quarter)
    np.testing.assert_allclose(model.visual.rotary_pos_emb.inv_freq.double().numpy(), inv_freq, rtol=1e-6)


def test_text_tower_model_types_are_read(tmp_path):
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    model = Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(**TEXT))
    model.save_pretrained(tmp_path)
    cfg = fp.conversion.load_mrope_config(tmp_path)
    assert cfg.image_token_id is None and cfg.mrope_section == (2, 3, 3) and cfg.limit == 64
    ids = np.arange(5)[None] + 3
    np.testing.assert_array_equal(fp.mrope_positions(ids, config=cfg), np.broadcast_to(np.arange(5), (3, 1, 5)))


# --- bad input: one line each ---------------------------------------------------------------------


def test_mrope_section_not_half_the_rotary_width():
    with pytest.raises(ValueError) as e:
        fp.MRopeConfig(fp.RopeConfig(head_dim=16), mrope_section=(2, 3, 4))
    assert str(e.value) == (
        "mrope_section: expected sections summing to rotary_dim // 2 = 8 (half the rotary width of head_dim 16), "
        "got (2, 3, 4) (sum 9)"
    )


def test_mrope_section_in_a_config_json(tmp_path):
    config = {"model_type": "qwen2_vl", "text_config": {**TEXT, "rope_parameters": {"mrope_section": [16, 24, 24]}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        inspect_source(tmp_path)
    line = str(e.value)
    assert "\n" not in line and str(tmp_path / "config.json") in line
    assert "mrope_section: expected sections summing to rotary_dim // 2 = 8" in line and "(sum 64)" in line


@pytest.fixture(scope="module")
def small_cfg():
    rope = fp.RopeConfig(head_dim=16, max_position_embeddings=64)
    return fp.MRopeConfig(rope, mrope_section=(2, 3, 3), image_token_id=IMAGE, video_token_id=VIDEO)


def test_grid_rows_fewer_than_image_runs(small_cfg):
    ids = [[1, IMAGE, IMAGE, IMAGE, IMAGE, 2, IMAGE, IMAGE, IMAGE, IMAGE]]
    with pytest.raises(ValueError) as e:
        fp.mrope_positions(ids, image_grid_thw=[[1, 4, 4]], config=small_cfg)
    assert str(e.value) == (
        "image_grid_thw: expected a row for every run of image tokens (image_token_id 100) in input_ids, "
        "got 1 rows for more runs (batch row 0)"
    )


def test_grid_rows_more_than_image_runs(small_cfg):
    with pytest.raises(ValueError) as e:
        fp.mrope_positions([[1, IMAGE, IMAGE, IMAGE, IMAGE]], image_grid_thw=[[1, 4, 4], [1, 4, 4]], config=small_cfg)
    assert str(e.value) == (
        "image_grid_thw: expected 1 rows, one per run of image tokens (image_token_id 100) in input_ids, got 2"
    )


def test_grid_that_does_not_cover_its_run(small_cfg):
    with pytest.raises(ValueError) as e:
        fp.mrope_positions([[1, VIDEO, VIDEO, VIDEO, 2]], video_grid_thw=[[2, 4, 4]], config=small_cfg)
    assert str(e.value) == (
        "video_grid_thw: expected row 0 (2, 4, 4) to cover its run of video tokens, "
        "t * (h // 2) * (w // 2) = 8, found 3 tokens (batch row 0)"
    )


def test_traced_input_ids_are_refused(small_cfg):
    with pytest.raises(TypeError, match=r"^input_ids: expected a concrete array \(M-RoPE positions are computed"):
        jax.jit(lambda ids: fp.mrope_positions(ids, config=small_cfg))(jnp.ones((1, 4), jnp.int32))


def test_positions_of_the_wrong_shape(small_cfg):
    with pytest.raises(
        ValueError, match=r"^positions: expected \(3, \.\.\., seq\) M-RoPE positions .* got shape \(1, 4\)$"
    ):
        fp.mrope_cos_sin(np.zeros((1, 4), np.int64), small_cfg)


def test_conformance_notices_a_wrong_section_order(tmp_path, monkeypatch):
    """The conformance case of qwen2_vl is not vacuous: sections read in reverse order are caught."""
    from conformance.reference import conformance_problems

    import flax_posenc.mrope

    monkeypatch.setattr(flax_posenc.mrope, "section_components", lambda s, **_: np.repeat([2, 1, 0], s))
    problems = conformance_problems("qwen2_vl", tmp_path)
    assert any("cos/sin differ" in p for p in problems), problems


def test_conformance_notices_a_dropped_temporal_scale(tmp_path, monkeypatch):
    """Qwen2.5-VL read as Qwen2-VL (videos' temporal positions stepping by 1) is caught by get_rope_index."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import relative_config

    rows = dict(relative_config.RELATIVE_FAMILIES)
    rows["qwen2_5_vl"] = dataclasses.replace(rows["qwen2_5_vl"], mrope_temporal_field=None)
    monkeypatch.setattr(relative_config, "RELATIVE_FAMILIES", rows)
    problems = conformance_problems("qwen2_5_vl", tmp_path)
    assert problems == ["mrope_positions differ from the model's get_rope_index"], problems


def test_conformance_notices_glm4v_read_with_halves(tmp_path, monkeypatch):
    """GLM-4V's interleaved pairs read as Qwen2-VL's halves are caught (cos/sin and the rotation)."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import relative_config

    rows = dict(relative_config.RELATIVE_FAMILIES)
    rows["glm4v"] = dataclasses.replace(rows["glm4v"], layout="half")
    monkeypatch.setattr(relative_config, "RELATIVE_FAMILIES", rows)
    problems = conformance_problems("glm4v_text", tmp_path)
    assert any("cos/sin differ" in p for p in problems), problems


def test_glm4v_video_frames_are_separate_runs():
    """GLM-4V: a (t, h, w) video row stands for t runs of (h/m)(w/m) tokens, each frame its own grid."""
    rope = fp.RopeConfig(head_dim=16, partial_rotary_factor=0.5, layout="interleaved", max_position_embeddings=64)
    cfg = fp.MRopeConfig(rope, mrope_section=(1, 2, 1), video_token_id=VIDEO, split_video_frames=True)
    ids = [[5, VIDEO, VIDEO, VIDEO, VIDEO, 7, VIDEO, VIDEO, VIDEO, VIDEO, 8]]
    positions = fp.mrope_positions(ids, video_grid_thw=[[2, 4, 4]], config=cfg)[:, 0]
    # text 0; frame 1 at 1 (t 1, h 1..2, w 1..2); text 3; frame 2 at 4; text 6: each frame restarts t
    np.testing.assert_array_equal(positions[0], [0, 1, 1, 1, 1, 3, 4, 4, 4, 4, 6])
    np.testing.assert_array_equal(positions[1], [0, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6])
    np.testing.assert_array_equal(positions[2], [0, 1, 2, 1, 2, 3, 4, 5, 4, 5, 6])


def test_mrope_config_and_positions_stay_numpy_only(tiny):
    """``load_mrope_config`` and ``mrope_positions`` import neither jax nor torch."""
    import subprocess
    import sys
    import textwrap

    _, path, _ = tiny
    code = textwrap.dedent(
        f"""
        import sys
        from flax_posenc.conversion import load_mrope_config
        from flax_posenc.mrope_config import mrope_positions
        cfg = load_mrope_config({str(path)!r})
        assert mrope_positions([[1, 2, 3]], config=cfg).shape == (3, 1, 3)
        print("HEAVY", sorted(m for m in ("jax", "torch", "transformers", "flax") if m in sys.modules))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout


def test_cli_check_and_inspect_an_mrope_checkpoint(tiny, capsys):
    from flax_posenc.report.cli import main

    _, path, _ = tiny
    assert main(["check", str(path), "--length", "64"]) == 0
    capsys.readouterr()
    assert main(["check", str(path), "--length", "65"]) == 1
    assert "M-RoPE (mrope_section 2/3/3)" in capsys.readouterr().err
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mechanisms"][0]["kind"] == "mrope" and report["mrope"]["mrope_section"] == [2, 3, 3]


def test_flat_4x_config_reads_as_transformers_parses_it(tmp_path):
    """A 4.x Hub config (flat text fields, ``rope_scaling: {"type": "mrope", ...}``, top-level
    ``rope_theta``) reads as transformers' own ``Qwen2_5_VLConfig`` parses it."""
    from transformers import Qwen2_5_VLConfig

    flat = {
        "model_type": "qwen2_5_vl",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "vocab_size": 128,
        "max_position_embeddings": 96,
        "rope_theta": 500000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 4]},
        "image_token_id": 120,
        "video_token_id": 121,
        "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
    }
    (tmp_path / "config.json").write_text(json.dumps(flat))
    cfg = fp.conversion.load_mrope_config(tmp_path)
    theirs = Qwen2_5_VLConfig(**flat)
    text = theirs.text_config
    assert cfg.rope.rope_type == text.rope_parameters["rope_type"] == "default"
    assert cfg.rope.rope_theta == text.rope_parameters["rope_theta"] == 500000.0
    assert list(cfg.mrope_section) == text.rope_parameters["mrope_section"]
    assert cfg.limit == text.max_position_embeddings == 96
    assert cfg.rope.head_dim == text.hidden_size // text.num_attention_heads
    assert (cfg.image_token_id, cfg.video_token_id) == (theirs.image_token_id, theirs.video_token_id)
    assert cfg.tokens_per_second == theirs.vision_config.tokens_per_second == 2
    assert cfg.spatial_merge_size == theirs.vision_config.spatial_merge_size


def test_conformance_notices_qwen3_vl_read_with_contiguous_sections(tmp_path, monkeypatch):
    """Qwen3-VL's interleaved sections (T H W T H W ...) read as Qwen2-VL's contiguous ones are caught."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import relative_config

    rows = dict(relative_config.RELATIVE_FAMILIES)
    rows["qwen3_vl"] = dataclasses.replace(rows["qwen3_vl"], mrope_interleaved_sections=False)
    monkeypatch.setattr(relative_config, "RELATIVE_FAMILIES", rows)
    problems = conformance_problems("qwen3_vl", tmp_path)
    assert any("cos/sin differ" in p for p in problems), problems


def test_rotary_from_pretrained_gives_the_text_rope_of_an_mrope_model(tiny):
    """``RotaryEmbedding.from_pretrained`` on an M-RoPE checkpoint: the text tower's RoPE, equal to
    ``apply_mrope`` with three equal components (what transformers makes of 1-D position ids)."""
    from flax import nnx

    model, path, cfg = tiny
    rotary = fp.nnx.RotaryEmbedding.from_pretrained(path)
    assert rotary.config == cfg.rope
    positions = np.arange(20)[None]
    q = np.random.default_rng(3).standard_normal((1, 20, 2, 16)).astype(np.float32)
    ours = nnx.jit(lambda m, x: m(x))(rotary, q)
    assert np.max(np.abs(np.asarray(ours) - np.asarray(fp.apply_mrope(q, cfg, np.stack([positions] * 3))))) <= 1e-6
