"""The RoPE forward check reaches towers, audio encoders and codecs (``conformance.forward_inputs``).

Their conformance cases (``tests/test_conformance.py``) pass; these show the forward part of them is
not vacuous: a wrong reading of each is caught by the rotations transformers' own forward applies
on inputs other than ``(1, n)`` token ids (byte embeddings, mel frames, codec frames).
"""

from __future__ import annotations

import dataclasses

import pytest
from conformance.forward_inputs import FORWARD_RUNS, run_forward
from conformance.reference import FORWARD_TOKENS, conformance_problems

from flax_posenc.conversion import relative_config


def _replace_family(monkeypatch, name: str, **changes):
    rows = dict(relative_config.RELATIVE_FAMILIES)
    rows[name] = dataclasses.replace(rows[name], **changes)
    monkeypatch.setattr(relative_config, "RELATIVE_FAMILIES", rows)


@pytest.mark.parametrize(
    ("model_type", "row", "changes", "called"),
    [
        # BLT's local encoder (byte embeddings in 2 patches): its pairs are interleaved; read in halves
        ("blt_local_encoder", "blt", {"layout": "half"}, "apply_rotary_pos_emb"),
        # GLM-ASR's encoder (14 mel frames, a stride-2 convolution): half-layout pairs; read interleaved
        ("glmasr_encoder", "rope_towers", {"layout": "interleaved"}, "apply_rotary_pos_emb"),
    ],
)
def test_forward_check_notices_a_wrong_tower_reading(tmp_path, monkeypatch, model_type, row, changes, called):
    _replace_family(monkeypatch, row, **changes)
    problems = conformance_problems(model_type, tmp_path)
    forward = [p for p in problems if p.startswith("layer ") and f"forward rotates with {called}" in p]
    assert forward, problems


def test_codec_transformers_run_at_the_forward_positions():
    """Mimi's encoder: its transformer stack sees exactly FORWARD_TOKENS frames (positions 0 .. n - 1)."""
    import torch
    from conformance.tiny import tiny_model

    model = tiny_model("mimi_encoder")
    seen = []
    rotary = model.encoder_transformer.rotary_emb
    hook = rotary.register_forward_hook(lambda _m, args, _out: seen.append(args[1].tolist()))
    try:
        with torch.no_grad():
            assert run_forward(model, FORWARD_TOKENS)
    finally:
        hook.remove()
    assert seen == [[list(range(FORWARD_TOKENS))]]


def test_forward_runs_name_read_model_types():
    from flax_posenc.conversion.models import MODEL_MECHANISMS

    assert set(FORWARD_RUNS) <= set(MODEL_MECHANISMS)


def test_composite_audio_tower_rotation_is_checked(tmp_path, monkeypatch):
    """GLM-ASR (composite): its audio tower's forward (random mel frames) is compared with the audio
    tower's own RoPE, not the text tower's; read interleaved, the audio tower's layers disagree."""
    from conformance.reference import composite_problems

    _replace_family(monkeypatch, "rope_towers", layout="interleaved")
    problems = composite_problems("glmasr", tmp_path)
    audio = [p for p in problems if p.startswith("audio tower: layer ") and "layout interleaved" in p]
    assert audio and not [p for p in problems if p.startswith("text tower")], problems


def test_forward_check_notices_mllama_cross_attention_layers_given_rope(tmp_path, monkeypatch):
    """Mllama's text tower: without its cross-attention rule, layer 3 (cross-attention in the tiny 4)
    would be given RoPE; its forward (with image states, so the layer runs) rotates nothing there."""
    _replace_family(monkeypatch, "mllama_text", layer_types_rule=None, rope_layer_rule=None)
    problems = conformance_problems("mllama_text_model", tmp_path)
    assert "layer 3: we give RoPE; transformers' forward applies no rotation there" in problems, problems
