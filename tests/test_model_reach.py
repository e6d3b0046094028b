"""The model types read or declared by the reach slice (issue 36): their records and refusals.

Values and limits against transformers' own classes are in the conformance suite
(``tests/test_conformance.py``: ctrl, roformer, led, pegasus_x, lfm2_moe, zamba and every
convolutional type); here: the one-line refusals of what is not read, the limit sentences and
the registry rows. Checkpoints are written by hand (config.json + safetensors): no model is built.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from flax_posenc.conversion import inspect_source
from flax_posenc.conversion.models import MODEL_MECHANISMS, REFUSED_MODEL_TYPES
from flax_posenc.errors import CheckpointError


def _checkpoint(tmp_path, config, tensors):
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({k: np.asarray(v, np.float32) for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    return tmp_path


def _led(tmp_path, encoder_rows, window):
    config = {
        "model_type": "led",
        "max_encoder_position_embeddings": encoder_rows,
        "max_decoder_position_embeddings": 32,
        "attention_window": window,
    }
    tensors = {
        "led.encoder.embed_positions.weight": np.zeros((encoder_rows, 8)),
        "led.decoder.embed_positions.weight": np.zeros((32, 8)),
    }
    return _checkpoint(tmp_path, config, tensors)


def test_led_reads_its_encoder_and_decoder_tables(tmp_path):
    rec = inspect_source(_led(tmp_path, 64, [16, 32]))
    assert [(m.kind, m.record.family, m.limit) for m in rec.mechanisms] == [
        ("learned", "led_encoder", 64),
        ("learned", "led_decoder", 32),
    ]
    assert rec.limit == 32


def test_led_refuses_a_table_that_is_not_a_multiple_of_its_attention_window(tmp_path):
    d = _led(tmp_path, 60, [16, 32])
    with pytest.raises(CheckpointError) as e:
        inspect_source(d)
    assert str(e.value) == (
        f"{d / 'config.json'}: expected led_encoder table rows (60) a multiple of the padding window "
        "attention_window 32 (the input is padded up to it; the padded limit 32 is not read), found 60 % 32 = 28"
    )


def test_led_refuses_an_attention_window_that_is_not_a_positive_integer(tmp_path):
    d = _led(tmp_path, 64, 0)
    with pytest.raises(CheckpointError) as e:
        inspect_source(d)
    assert str(e.value) == (
        f"{d / 'config.json'}: expected attention_window as a positive integer or a list of them, found 0"
    )


def _roformer(tmp_path, **extra):
    config = {
        "model_type": "roformer",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 96,
        **extra,
    }
    return _checkpoint(tmp_path, config, {"roformer.encoder.embed_positions.weight": np.zeros((96, 16))})


def test_roformer_reads_as_interleaved_rope_over_each_head(tmp_path):
    rec = inspect_source(_roformer(tmp_path, rotary_value=False))
    (mech,) = rec.mechanisms
    assert (mech.kind, mech.rope.head_dim, mech.rope.layout, mech.rope.rope_theta, mech.limit) == (
        "rope",
        16,
        "interleaved",
        10000.0,
        96,
    )


def test_roformer_refuses_rotated_values(tmp_path):
    d = _roformer(tmp_path, rotary_value=True)
    with pytest.raises(CheckpointError) as e:
        inspect_source(d)
    assert str(e.value) == (
        f"{d / 'config.json'}: expected rotary_value false (the value vectors rotated too is not read), found True"
    )


def test_ctrl_computed_sinusoids_have_its_rows_as_limit(tmp_path):
    d = _checkpoint(tmp_path, {"model_type": "ctrl", "n_embd": 8, "n_positions": 50}, {"transformer.w.weight": [[0.0]]})
    (mech,) = inspect_source(d).mechanisms
    assert (mech.kind, mech.limit) == ("sinusoidal", 50)
    assert mech.check_length(50)[0] and not mech.check_length(51)[0]
    assert mech.describe_limit() == f"ctrl computed sinusoid table of {d} holds 50 positions (0..49)"
    # [sin | cos] of p / 10000 ** (2 i / 8), written from the formula
    p, i = np.arange(50)[:, None], np.arange(4)[None, :]
    angle = p / 10000.0 ** (2 * i / 8)
    np.testing.assert_allclose(mech.record.values(np.arange(50)), np.hstack([np.sin(angle), np.cos(angle)]), atol=1e-15)


def test_ctrl_without_n_positions_is_refused_in_one_line(tmp_path):
    d = _checkpoint(tmp_path, {"model_type": "ctrl", "n_embd": 8}, {"transformer.w.weight": [[0.0]]})
    with pytest.raises(CheckpointError) as e:
        inspect_source(d)
    assert str(e.value) == f"{d / 'config.json'}: expected n_positions as an integer in 1..1048576, found None"


def test_pegasus_x_computed_sinusoids_start_at_position_zero_without_a_limit(tmp_path):
    d = _checkpoint(tmp_path, {"model_type": "pegasus_x", "d_model": 8, "pad_token_id": 0}, {"x": [[0.0]]})
    (mech,) = inspect_source(d).mechanisms
    assert (mech.kind, mech.limit, mech.record.offset) == ("sinusoidal", None, 0)
    angle = np.arange(3)[:, None] * np.exp(-np.arange(4) * np.log(10000.0) / 3)[None, :]
    np.testing.assert_allclose(mech.record.values(np.arange(3)), np.hstack([np.sin(angle), np.cos(angle)]), atol=1e-15)


@pytest.mark.parametrize(("model_type", "tower"), [("resnet", "vision"), ("dac", "audio"), ("zamba", "text")])
def test_models_without_positions_name_their_tower_and_reason(tmp_path, model_type, tower):
    d = _checkpoint(tmp_path, {"model_type": model_type}, {"x": [[0.0]]})
    (mech,) = inspect_source(d).mechanisms
    assert (mech.kind, mech.tower, mech.limit) == ("none", tower, None)
    reason = {"vision": "convolutions over the image", "audio": "convolutions over time", "text": "a recurrent state"}
    assert mech.describe_limit().startswith(
        f"{model_type} model {d} has no limit (no position encoding: {reason[tower]}"
    )


def test_not_declared_free_of_positions():
    """Models with attention biases by offset or a backbone with positions of its own are not declared
    free of positions. (CvT has no attention bias: convolutional projections only; UperNet's head is
    declared, its backbone read as the ``backbone`` tower beside it: tests/test_backbone_tower.py.)"""
    for model_type in ("levit", "efficientformer", "vitpose", "timm_backbone"):
        assert model_type not in MODEL_MECHANISMS
    for model_type in ("inkling_text", "inkling2_text", "inkling2_loop_text"):  # relative position biases
        assert model_type in REFUSED_MODEL_TYPES and model_type not in MODEL_MECHANISMS


def test_speech_to_text_sinusoids_serve_the_audio_encoder_and_the_text_decoder_without_a_limit(tmp_path):
    config = {"model_type": "speech_to_text", "d_model": 8, "pad_token_id": 1, "max_source_positions": 6000}
    rec = inspect_source(_checkpoint(tmp_path, config, {"x": [[0.0]]}))
    assert [(m.kind, m.tower, m.record.family, m.limit, m.record.offset) for m in rec.mechanisms] == [
        ("sinusoidal", "audio", "speech_to_text_encoder", None, 2),
        ("sinusoidal", "text", "speech_to_text_decoder", None, 2),
    ]


def test_zamba2_with_rope_in_its_shared_blocks_is_refused(tmp_path):
    d = _checkpoint(tmp_path, {"model_type": "zamba2", "use_mem_rope": True}, {"x": [[0.0]]})
    with pytest.raises(CheckpointError) as e:
        inspect_source(d)
    assert str(e.value) == (
        f"{d / 'config.json'}: expected use_mem_rope false "
        "(Zamba2's RoPE in its shared attention blocks is not read), found True"
    )
