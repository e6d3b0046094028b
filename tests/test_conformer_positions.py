"""Conformer relative positions (issue 36): the ``xl_relative`` sinusoids against a float64 formula
written out here, the ``clipped_relative`` rows against the modeling files' rules, their limit
sentences, and bad input (one line each). Checkpoints are a few hand-written tensors (no torch);
the models' own modules are compared in ``tests/test_conformance.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from flax_posenc.conversion import inspect_source
from flax_posenc.conversion.clipped_relative import CLIPPED_RELATIVE_FAMILIES, read_clipped_relative
from flax_posenc.conversion.xl_relative import XL_RELATIVE_FAMILIES, read_xl_relative, xl_relative_sinusoids
from flax_posenc.errors import CheckpointError


def _reference(length: int, dim: int) -> np.ndarray:
    """Transformer-XL's rows, one value at a time: row r is distance L - 1 - r; sin, cos interleaved."""
    out = np.zeros((2 * length - 1, dim))
    for r in range(2 * length - 1):
        d = length - 1 - r
        for k in range(dim // 2):
            angle = d * math.exp(-2 * k * math.log(10000.0) / dim)
            out[r, 2 * k], out[r, 2 * k + 1] = math.sin(angle), math.cos(angle)
    return out


@pytest.mark.parametrize(("length", "dim"), [(1, 2), (5, 8), (40, 6)])
def test_xl_sinusoids_equal_the_formula(length, dim):
    np.testing.assert_allclose(xl_relative_sinusoids(length, dim), _reference(length, dim), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ((0, 4), "length: expected a positive integer number of frames, found 0"),
        ((3, 5), "dim: expected a positive even integer, found 5"),
        ((3, 4, 1.0), "base: expected a number above 1, found 1.0"),
    ],
)
def test_xl_sinusoids_refuse_bad_arguments(args, line):
    with pytest.raises(ValueError) as e:
        xl_relative_sinusoids(*args)
    assert str(e.value) == line


def _checkpoint(tmp_path: Path, config: dict, tensors: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({k: np.zeros(v, np.float32) for k, v in tensors.items()}, tmp_path / "model.safetensors")
    return tmp_path


PARAKEET = {"model_type": "parakeet_encoder", "hidden_size": 8, "num_attention_heads": 2}


def _parakeet_tensors(u_shape=(2, 4)) -> dict:
    return {
        "layers.0.self_attn.bias_u": u_shape,
        "layers.0.self_attn.bias_v": (2, 4),
        "layers.0.self_attn.relative_k_proj.weight": (8, 8),
    }


def test_parakeet_has_no_limit_and_says_it(tmp_path):
    rec = inspect_source(_checkpoint(tmp_path, PARAKEET, _parakeet_tensors()))
    (mech,) = rec.mechanisms
    assert (mech.kind, mech.limit, mech.record.layers) == ("xl_relative", None, 1)
    ok, line = rec.check_length(100_000)
    assert ok and "has no limit (relative: sinusoids of the distances -(L-1)..L-1" in line


def test_nemotron_limit_in_frames(tmp_path):
    config = {**PARAKEET, "model_type": "nemotron_asr_streaming_encoder", "max_position_embeddings": 64}
    rec = inspect_source(_checkpoint(tmp_path, config, _parakeet_tensors()))
    assert rec.limit == 64
    ok, line = rec.check_length(67)
    assert not ok and line.endswith(
        "(max_position_embeddings 64) holds 64 frames (0..63); asked for 67 positions (0..66): 3 past the limit"
    )


def test_xl_bad_shape_is_one_line(tmp_path):
    d = _checkpoint(tmp_path, PARAKEET, _parakeet_tensors(u_shape=(4, 2)))
    with pytest.raises(CheckpointError) as e:
        read_xl_relative(XL_RELATIVE_FAMILIES["parakeet_xl"], PARAKEET, d, d / "config.json")
    assert str(e.value) == (
        f"{d / 'model.safetensors'}: layers.0.self_attn.bias_u: expected shape (2, 4) "
        "(2 heads, hidden_size 8 in config.json), found (4, 2)"
    )


@pytest.mark.parametrize(
    ("config", "line"),
    [
        ({**PARAKEET, "hidden_size": 0}, "expected hidden_size as an integer in 1..65536, found 0"),
        (
            {**PARAKEET, "hidden_size": 9, "num_attention_heads": 3},
            "expected an even hidden_size (sin/cos pairs of the relative sinusoids), found 9",
        ),
        ({**PARAKEET, "num_attention_heads": 3}, "expected num_attention_heads dividing hidden_size 8, found 3"),
    ],
)
def test_xl_bad_config_is_one_line(tmp_path, config, line):
    d = _checkpoint(tmp_path, config, _parakeet_tensors())
    with pytest.raises(CheckpointError) as e:
        read_xl_relative(XL_RELATIVE_FAMILIES["parakeet_xl"], config, d, d / "config.json")
    assert str(e.value) == f"{d / 'config.json'}: {line}"


def test_rotary_conformer_is_refused_in_one_line(tmp_path):
    config = {"model_type": "wav2vec2-conformer", "hidden_size": 8, "num_attention_heads": 2}
    config["position_embeddings_type"] = "rotary"
    d = _checkpoint(tmp_path, config, {})
    with pytest.raises(CheckpointError) as e:
        read_xl_relative(XL_RELATIVE_FAMILIES["wav2vec2_conformer_xl"], config, d, d / "config.json")
    assert str(e.value) == (
        f"{d / 'config.json'}: expected position_embeddings_type 'relative' or null "
        "(its 'rotary' positions are not read), found 'rotary'"
    )


W2V_BERT = {
    "model_type": "wav2vec2-bert",
    "hidden_size": 8,
    "num_attention_heads": 2,
    "position_embeddings_type": "relative_key",
    "left_max_position_embeddings": 3,
    "right_max_position_embeddings": 1,
}


def test_wav2vec2_bert_rows_follow_its_rule(tmp_path):
    """``clamp(j - i, -left, right) + left`` (``_apply_relative_key_position_encoding``), written out."""
    d = _checkpoint(tmp_path, W2V_BERT, {"encoder.layers.0.self_attn.distance_embedding.weight": (5, 4)})
    (rec,) = read_clipped_relative(CLIPPED_RELATIVE_FAMILIES["wav2vec2_bert_relative_key"], W2V_BERT, d, d / "c")
    i, j = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    expected = [[min(max(b - a, -3), 1) + 3 for b in range(9)] for a in range(9)]
    assert rec.index(i, j).tolist() == expected
    assert rec.limit is None and "distances below -3 or above 1 share the end rows" in rec.describe_limit()


def test_vits_rows_are_zero_past_the_window():
    row = CLIPPED_RELATIVE_FAMILIES["vits_window"]
    assert (row.sign, row.beyond) == (1, "zero")


@pytest.mark.parametrize(
    ("change", "tensors", "line"),
    [
        (
            {"position_embeddings_type": "rotary"},
            {},
            "expected position_embeddings_type 'relative_key' or null (its 'rotary' positions are not read), "
            "found 'rotary'",
        ),
        (
            {},
            {"encoder.layers.0.self_attn.distance_embedding.weight": (6, 4)},
            "encoder.layers.0.self_attn.distance_embedding.weight: expected shape (5, 4) "
            "(left_max_position_embeddings/right_max_position_embeddings and head width in config.json), found (6, 4)",
        ),
        (
            {"left_max_position_embeddings": -1},
            {},
            "expected left_max_position_embeddings as an integer in 0..1048576, found -1",
        ),
    ],
)
def test_clipped_bad_input_is_one_line(tmp_path, change, tensors, line):
    config = {**W2V_BERT, **change}
    d = _checkpoint(tmp_path, config, tensors)
    with pytest.raises(CheckpointError) as e:
        read_clipped_relative(CLIPPED_RELATIVE_FAMILIES["wav2vec2_bert_relative_key"], config, d, d / "config.json")
    assert "\n" not in str(e.value) and str(e.value).endswith(line)
