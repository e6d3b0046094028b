"""Composite models (LLaVA, PaliGemma, Idefics 3, ...) read as their towers: labels, limits, the
unread towers, the CLI's --length / --image-size per tower, and bad sub-configs.

The values of each tower against transformers' own modules are checked by
``tests/test_conformance.py::test_composite_model_type_conforms``; here, what the record and the
CLI say about towers.
"""

from __future__ import annotations

import json

import pytest

from flax_posenc.conversion import inspect_source
from flax_posenc.errors import CheckpointError

_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 96,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


def _write(path, config):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    """A tiny LLaVA saved by transformers (Llama text tower: 64 positions; CLIP vision grid 32 px / 8)."""
    import torch
    from conformance.tiny import quiet, tiny_composite_config
    from transformers import AutoModel

    d = tmp_path_factory.mktemp("llava")
    torch.manual_seed(0)
    with quiet():
        AutoModel.from_config(tiny_composite_config("llava")).save_pretrained(d)
    return d


def test_llava_reads_both_towers(llava_dir):
    record = inspect_source(llava_dir)
    assert [(m.kind, m.tower) for m in record.mechanisms] == [("rope", "text"), ("grid", "vision")]
    assert record.unread == ()
    assert record.limit == 64  # the text tower's max_position_embeddings (tiny_config), not the grid's
    grid = record.mechanisms[1].record.table
    assert grid.image_size == (32, 32) and grid.patch_size == (8, 8) and grid.prefix_tokens == 1
    report = record.to_dict()
    assert report["towers"] == ["text", "vision"] and report["unread_towers"] == []
    assert [m["tower"] for m in report["mechanisms"]] == ["text", "vision"]
    assert "(vision tower)" in str(record)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--length", "64"], 0),
        (["--length", "65"], 1),
        (["--image-size", "32"], 0),
        (["--image-size", "64"], 1),
        (["--length", "64", "--image-size", "64"], 1),
    ],
)
def test_check_asks_each_tower(llava_dir, args, code):
    from flax_posenc.report.cli import main

    assert main(["check", str(llava_dir), *args]) == code


def test_partly_read_composite_names_its_unread_tower(tmp_path, capsys):
    """A Llama text tower is read; a vision tower that is not (RADIO: its cropped position embedding) is
    listed as not read, never passed over."""
    from flax_posenc.report.cli import main

    d = _write(
        tmp_path / "idefics3",
        {"model_type": "idefics3", "text_config": _LLAMA, "vision_config": {"model_type": "radio"}},
    )
    record = inspect_source(d)
    assert [(m.kind, m.tower) for m in record.mechanisms] == [("rope", "text")]
    assert [(u.tower, u.field, u.model_type) for u in record.unread] == [("vision", "vision_config", "radio")]
    assert "NOT READ" in str(record) and "radio" in str(record)
    assert record.to_dict()["unread_towers"][0]["model_type"] == "radio"
    assert main(["check", str(d), "--length", "96"]) == 0
    capsys.readouterr()
    assert main(["check", str(d), "--image-size", "32"]) == 2
    err = capsys.readouterr().err
    assert "vision tower (vision_config: radio) NOT READ" in err and len(err.strip().splitlines()) == 1


def test_composite_with_no_read_tower_is_refused(tmp_path):
    d = _write(tmp_path / "x", {"model_type": "no_such_vlm", "vision_config": {"model_type": "radio"}})
    with pytest.raises(CheckpointError, match="no_such_vlm"):
        inspect_source(d)


def test_video_llava_is_refused_by_name(tmp_path):
    d = _write(tmp_path / "v", {"model_type": "video_llava", "text_config": _LLAMA})
    with pytest.raises(CheckpointError, match="two vision towers"):
        inspect_source(d)


@pytest.mark.parametrize("sub", [{"hidden_size": 8}, "llama", {"model_type": 3}])
def test_bad_sub_config_is_one_line_naming_the_field(tmp_path, sub):
    d = _write(tmp_path / "bad", {"model_type": "no_such_vlm", "text_config": _LLAMA, "vision_config": sub})
    with pytest.raises(
        CheckpointError, match=r"vision_config: expected a sub-config object with a string model_type"
    ) as e:
        inspect_source(d)
    assert "\n" not in str(e.value)


def test_a_part_that_is_not_a_tower_is_listed_unread(tmp_path):
    """IDEFICS2-like: the perceiver's sub-config is neither a text, vision, audio tower nor a
    Q-Former: named, not skipped."""
    config = {
        "model_type": "no_such_vlm",
        "text_config": _LLAMA,
        "perceiver_config": {"model_type": "idefics2_perceiver"},
    }
    record = inspect_source(_write(tmp_path / "q", config))
    assert [(u.tower, u.field, u.model_type) for u in record.unread] == [
        ("perceiver", "perceiver_config", "idefics2_perceiver")
    ]


# ----------------------------------------------------------------------------- tower labels and units


def test_encoder_config_is_labelled_by_its_model_type():
    """``encoder_config`` is a speech encoder for the recognisers (Parakeet, LASR), but Dia's and BLT's
    are text encoders and the OCR models' vision encoders: the tower is what the sub-config is."""
    from flax_posenc.conversion.models import composite_towers, tower_of_field

    towers = {
        sub: composite_towers({"model_type": "x", "encoder_config": {"model_type": sub}})[0][1]
        for sub in ("parakeet_encoder", "lasr_encoder", "dia_encoder", "blt_local_encoder", "deepseek_ocr2_encoder")
    }
    assert towers == {
        "parakeet_encoder": "audio",
        "lasr_encoder": "audio",
        "dia_encoder": "text",
        "blt_local_encoder": "text",
        "deepseek_ocr2_encoder": "vision",
    }
    assert tower_of_field("encoder_config") == "audio"  # no model type given: the recognisers' default


def test_a_text_encoder_under_encoder_config_is_a_text_tower(tmp_path):
    """Dia's encoder (RoPE over text tokens) as a composite's ``encoder_config``: its mechanisms are the
    text tower's, its limit in tokens (an audio label would have put it in audio frames)."""
    from conformance.tiny import tiny_config

    config = {"model_type": "made_up_tts", "encoder_config": tiny_config("dia_encoder").to_dict()}
    record = inspect_source(_write(tmp_path, config))
    assert record.mechanisms and {(m.tower, m.unit) for m in record.mechanisms} == {("text", "tokens")}


def _tiny_composite_dir(tmp_path, model_type):
    from conformance.tiny import quiet, tiny_composite_config

    with quiet():
        config = tiny_composite_config(model_type).to_dict()
    return _write(tmp_path, config)


def test_an_audio_towers_rope_counts_audio_frames_not_prompt_tokens(tmp_path):
    """GLM-ASR's audio encoder RoPE (32 frames in the tiny config) beside its Llama text tower (64 tokens):
    the encoder's limit counts its frames, so a 40-token prompt fits; the record says the unit."""
    record = inspect_source(_tiny_composite_dir(tmp_path, "glmasr"))
    text, audio = record.mechanisms
    assert (text.tower, text.unit, text.limit) == ("text", "tokens", 64)
    assert (audio.tower, audio.unit, audio.limit) == ("audio", "audio frames", 32)
    assert audio.to_dict()["unit"] == "audio frames" and "unit" not in text.to_dict()
    assert "--- mechanism 2 of 2: rope (audio tower, limit in audio frames)" in str(record)
    assert record.check_length(40)[0] and not record.check_length(65)[0]


def test_an_audio_tower_alone_is_checked_in_its_frames(tmp_path):
    """LASR CTC reads only its encoder's RoPE: ``--length`` counts that encoder's frames (nothing else to count)."""
    record = inspect_source(_tiny_composite_dir(tmp_path, "lasr_ctc"))
    (audio,) = record.mechanisms
    assert (audio.tower, audio.unit) == ("audio", "audio frames")
    limit = audio.limit
    assert limit is not None and record.check_length(limit)[0] and not record.check_length(limit + 1)[0]
