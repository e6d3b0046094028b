"""Issue 36, the last text types: nanochat's ``half_reversed`` rotation against a float64 numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc.rope import apply_rotary


def _reference(x: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """nanochat's ``x * cos + cat(x2, -x1) * sin`` in float64: the half pairs turned by minus the angle."""
    half = angle.shape[-1]
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    c, s = np.cos(angle), np.sin(angle)
    return np.concatenate([x1 * c + x2 * s, x2 * c - x1 * s, x[..., 2 * half :]], -1)


def test_half_reversed_turns_the_half_pairs_by_minus_the_angle():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 10)).astype(np.float32)  # 8 rotated dims, 2 passed through
    angle = rng.uniform(-3, 3, (5, 4))
    ours = np.asarray(apply_rotary(x, np.cos(angle), np.sin(angle), layout="half_reversed"), np.float64)
    np.testing.assert_allclose(ours, _reference(x.astype(np.float64), angle), atol=2e-6)
    # and it is not the half layout (the pairs would turn the other way)
    half = np.asarray(apply_rotary(x, np.cos(angle), np.sin(angle), layout="half"), np.float64)
    assert np.max(np.abs(half - ours)) > 0.1


def test_half_reversed_rope_config_keeps_relative_scores():
    """q_p . k_s still depends on p - s only (both turned the same way)."""
    cfg = fp.RopeConfig(head_dim=8, max_position_embeddings=64, layout="half_reversed")
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 8)).astype(np.float32)
    pos = np.array([3, 10, 20, 27])
    rq = np.asarray(fp.apply_rope(np.tile(q, (4, 1))[:, None, :], cfg, pos, seq_axis=-3))[:, 0]
    rk = np.asarray(fp.apply_rope(np.tile(k, (4, 1))[:, None, :], cfg, pos, seq_axis=-3))[:, 0]
    assert rq[1] @ rk[0] == pytest.approx(rq[3] @ rk[2], abs=1e-5)  # offsets 7 and 7


def test_unknown_layout_names_the_three():
    with pytest.raises(ValueError, match="half_reversed"):
        apply_rotary(np.zeros(4, np.float32), np.zeros(2), np.zeros(2), layout="halves")


def test_bailing_hybrid_reads_model_max_length_and_the_rope_head(tmp_path):
    """A Hub-shaped Bailing-Hybrid config (head_dim 128 for its linear heads, qk_rope_head_dim 64,
    the limit as model_max_length) read as transformers' own config class reads it."""
    import json

    from transformers import CONFIG_MAPPING

    from flax_posenc.conversion import inspect_source

    fields = {
        "model_type": "bailing_hybrid",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "head_dim": 128,
        "qk_rope_head_dim": 64,
        "model_max_length": 4096,
        "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"],
    }
    (tmp_path / "config.json").write_text(json.dumps(fields))
    theirs = CONFIG_MAPPING["bailing_hybrid"](**{k: v for k, v in fields.items() if k != "model_type"})
    record = inspect_source(tmp_path)
    rope = next(m for m in record.mechanisms if m.kind == "rope")
    assert rope.limit == theirs.max_position_embeddings == 4096
    assert rope.record.rope.head_dim == theirs.head_dim == 64
    assert rope.record.rope.layout == "interleaved"
    assert "model_max_length 4096" in record.describe_limit()


def test_canine_with_more_hash_rows_than_positions_is_refused(tmp_path):
    """CANINE indexes its num_hash_buckets-row table with only max_position_embeddings positions:
    a checkpoint where they differ is refused in one line naming both, not read with the rows as limit
    (transformers' forward of max_position_embeddings + 1 characters fails there)."""
    import torch
    from transformers import CanineConfig, CanineModel

    from flax_posenc.conversion import inspect_source
    from flax_posenc.errors import CheckpointError

    config = CanineConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
        max_position_embeddings=32, num_hash_buckets=64, num_hash_functions=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = CanineModel(config).eval()
    model.save_pretrained(tmp_path)
    with torch.no_grad(), pytest.raises((IndexError, RuntimeError, ValueError)):
        model(input_ids=torch.full((1, 33), 5))
    with pytest.raises(CheckpointError, match="max_position_embeddings=64.*found max_position_embeddings=32"):
        inspect_source(tmp_path)


def test_reformer_limit_rounds_down_to_the_chunk_multiple(tmp_path):
    """A 4 x 10 axial grid (40 positions) under chunks of 16: inputs are padded to a multiple of 16,
    so 32 tokens are the most transformers' forward takes (33 pad to 48 > 40); the rows are the
    factors' concatenation, equal to the model's own position module."""
    import torch
    from transformers import ReformerConfig, ReformerModel

    from flax_posenc.conversion import inspect_source

    config = ReformerConfig(
        vocab_size=32, hidden_size=16, num_attention_heads=2, attention_head_size=8, feed_forward_size=16,
        attn_layers=["local", "lsh"], axial_pos_shape=[4, 10], axial_pos_embds_dim=[8, 8],
        lsh_attn_chunk_length=16, local_attn_chunk_length=16, num_buckets=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model = ReformerModel(config).eval()
    model.save_pretrained(tmp_path)
    record = inspect_source(tmp_path)
    (mech,) = record.mechanisms
    assert (mech.kind, mech.limit) == ("axial", 32)
    with torch.no_grad():
        model(input_ids=torch.full((1, 32), 5))
        with pytest.raises(ValueError):
            model(input_ids=torch.full((1, 33), 5))
        theirs = model.embeddings.position_embeddings(torch.arange(32)[None])[0].numpy()
    np.testing.assert_array_equal(mech.record.table.weights, theirs)
    assert "holds 32 positions" in record.describe_limit() and "axial_pos_shape 4 x 10" in record.describe_limit()


@pytest.mark.parametrize(("rows", "length"), [(8, 5), (64, 7), (64, 257), (5, 5), (3, 1)])
def test_linear_resize_matrix_is_torch_bilinear(rows, length):
    """The weights torch's F.interpolate(mode="bilinear", align_corners=False) gives each source row
    (resampling the identity), against ours: equal up to torch's float32 source index."""
    import torch
    import torch.nn.functional as F

    from flax_posenc.conversion.resampled_tables import linear_resize_matrix

    eye = torch.eye(rows, dtype=torch.float64).reshape(1, 1, rows, rows)
    theirs = F.interpolate(eye, size=(length, rows), mode="bilinear", align_corners=False)[0, 0].numpy()
    np.testing.assert_allclose(linear_resize_matrix(rows, length), theirs, atol=1e-12)
    aligned = F.interpolate(eye, size=(length, rows), mode="bilinear", align_corners=True)[0, 0].numpy()
    if 1 < length != rows:  # and the corner-aligned variant is not what we compute
        assert np.abs(linear_resize_matrix(rows, length) - aligned).max() > 0.01


def test_resampled_record_has_no_limit_and_refuses_a_bad_length(tmp_path):
    import json

    from safetensors.numpy import save_file

    from flax_posenc.conversion import inspect_source

    table = np.random.default_rng(0).standard_normal((1, 1, 6, 4)).astype(np.float32)
    save_file({"embeddings.position_embedding.position_embedding": table}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "sam3_lite_text_text_model", "max_position_embeddings": 6})
    )
    record = inspect_source(tmp_path)
    (mech,) = record.mechanisms
    assert (mech.kind, mech.limit) == ("resampled", None)
    assert record.check_length(10**6)[0]
    assert "num_positions" not in mech.record.to_dict() and "do not exist" not in str(mech.record)  # no row limit
    np.testing.assert_array_equal(mech.record.rows_for(6), table[0, 0])
    assert mech.record.rows_for(12).shape == (12, 4)
    with pytest.raises(ValueError, match="length: expected a positive integer"):
        mech.record.rows_for(0)
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "sam3_lite_text_text_model", "max_position_embeddings": 7})
    )
    from flax_posenc.errors import CheckpointError

    with pytest.raises(CheckpointError, match="max_position_embeddings=6 to match"):
        inspect_source(tmp_path)


def test_xlnet_relative_sinusoids_and_bi_data_refused(tmp_path):
    """XLNet's table against the float64 formula of its distances (independent of the record's own
    code path: written out here), clamp_len applied, and bi_data refused in one line."""
    import json

    from flax_posenc.conversion import inspect_source
    from flax_posenc.errors import CheckpointError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlnet", "d_model": 8, "clamp_len": 3}))
    (mech,) = inspect_source(tmp_path).mechanisms
    assert (mech.kind, mech.limit) == ("relative_sinusoid", None)
    r = np.clip(np.arange(6, -4, -1), -3, 3).astype(np.float64)  # klen 6 .. -qlen + 1, qlen 4
    w = 10000.0 ** (-np.array([0.0, 2.0, 4.0, 6.0]) / 8)
    expected = np.concatenate([np.sin(r[:, None] * w), np.cos(r[:, None] * w)], -1)
    np.testing.assert_allclose(mech.record.table(4, 6), expected, rtol=0, atol=1e-15)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlnet", "d_model": 8, "bi_data": True}))
    with pytest.raises(CheckpointError, match="bi_data false"):
        inspect_source(tmp_path)
