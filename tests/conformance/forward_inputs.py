"""What the forward check feeds a model that does not take ``input_ids`` of shape ``(1, n)``.

The RoPE forward check (:func:`conformance.reference._forward_problems`) runs a tiny model once on
``n`` positions and watches every rotation its attention applies. Audio encoders, codecs, time
series models and the inner towers of composite models take other inputs; :func:`run_forward`
gives each the input that yields exactly ``n`` positions where its rotary module is called, so
that every rotation is seen at positions ``0 .. n - 1`` (the arithmetic of each input length is
stated beside it, from the modeling file's own convolutions). It returns ``False`` for a model
it has no rule for (the caller then feeds ``input_ids``).
"""

from __future__ import annotations

import inspect
from typing import Any


def _params(model) -> list[str]:
    return list(inspect.signature(model.forward).parameters)


def _random(*shape: int):
    """Seeded normal inputs: zeros would give zero queries and keys (transformers initialises the
    convolutions' biases to zero), and every rotation would compare equal."""
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _embeds(model, n: int, width: int | None = None):
    return _random(1, n, width or model.config.hidden_size)


def _codec_transformers(model, n: int) -> None:
    """Mimi, PocketTTS's audio tokenizer: each transformer stack of the codec (``encoder_transformer``
    before its downsampling, ``decoder_transformer`` after its upsampling; the full codec's in its
    ``encoder`` and ``decoder`` halves) on ``n`` frames: the frames are its positions (the
    convolutional front end only decides how many there are)."""
    stacks = [m for name, m in model.named_modules() if name.split(".")[-1].endswith("_transformer")]
    if not stacks:
        raise ValueError(f"{type(model).__name__}: no *_transformer stack")
    for stack in stacks:
        stack(hidden_states=_embeds(model, n), use_cache=False)


def _glmasr(model, n: int) -> None:
    """GLM-ASR's encoder: conv1 (kernel 3, padding 1) keeps the frames, conv2 (kernel 3, stride 2,
    padding 1) gives ``(L - 1) // 2 + 1``: ``L = 2n`` mel frames are ``n`` positions."""

    model(input_features=_random(1, model.config.num_mel_bins, 2 * n))


def _lasr(model, n: int) -> None:
    """LASR's encoder: two convolutions (kernel ``k``, stride ``s``, no padding), each
    ``(L - k) // s + 1``: ``L = s * (s * (n - 1) + k - 1) + k`` frames are ``n`` positions."""

    c = model.config
    k, s = c.subsampling_conv_kernel_size, c.subsampling_conv_stride
    frames = s * (s * (n - 1) + k - 1) + k
    model(input_features=_random(1, frames, c.num_mel_bins))


def _timesfm(model, n: int) -> None:
    """TimesFM 2.5: one position per patch of ``patch_length`` time steps: ``n`` patches."""

    model(past_values=_random(1, n * model.config.patch_length))


def _embeds_only(model, n: int) -> None:
    """A tower whose forward takes ``inputs_embeds`` (no token ids, or ids it refuses): ``n`` of them."""
    model(inputs_embeds=_embeds(model, n), **({"use_cache": False} if "use_cache" in _params(model) else {}))


def _deepseek_ocr2_encoder(model, n: int) -> None:
    """DeepSeek-OCR 2's vision encoder: ``n`` embeddings, the first half image patches (bidirectional
    among themselves), the rest causal queries; one position each, ``0 .. n - 1``."""
    model(inputs_embeds=_embeds(model, n), num_patches=n // 2)


def _muse_glimmer_assistant(model, n: int) -> None:
    """Muse Glimmer's DFlash assistant: ``n`` noise embeddings after an empty context (its queries
    take the last ``n`` of the context + noise positions: here all of them, ``0 .. n - 1``)."""
    import torch

    width = len(model.config.target_layer_ids) * model.config.hidden_size
    model(noise_embeds=_embeds(model, n), context_hidden_states=torch.zeros(1, 0, width), use_cache=False)


def _blt_local_encoder(model, n: int) -> None:
    """BLT's local (byte) encoder: ``n`` byte embeddings in 2 patches (positions are bytes, ``0 .. n - 1``)."""
    import torch

    ids = torch.tensor([[0] * (n // 2) + [1] * (n - n // 2)])
    model(inputs_embeds=_embeds(model, n), num_patches=2, patch_ids=ids)


def _blt_local_decoder(model, n: int) -> None:
    """BLT's local (byte) decoder: ``n`` byte embeddings cross-attending to 2 global patch states."""
    model(inputs_embeds=_embeds(model, n), patch_embeds=_embeds(model, 2, model.config.hidden_size_global))


def _dia_decoder(model, n: int) -> None:
    """Dia's decoder: ``n`` audio frames of ``num_channels`` codebook ids (one position per frame),
    cross-attending to 5 encoder states."""
    import torch

    c = model.config
    ids = torch.full((1, n, c.num_channels), 3, dtype=torch.long)
    model(input_ids=ids, encoder_hidden_states=_embeds(model, 5, c.cross_hidden_size), use_cache=False)


def _dots3_note_audio(model, n: int) -> None:
    """dots.ocr 3's audio encoder: three convolutions (kernel 3, stride 2, padding 1), each
    ``(T - 1) // 2 + 1``: ``8n`` feature frames (``8n * hop_length`` samples) are ``n`` positions."""
    import torch

    c = model.config
    frames = 8 * n
    features = _random(1, c.feature_size, frames)
    model(input_features=features, chunk_sample_lengths=torch.tensor([frames * c.hop_length]))


def _mllama_text(model, n: int) -> None:
    """Mllama's text tower: ``n`` tokens and 5 image states, so that its cross-attention layers run
    (they skip without image states)."""
    import torch

    ids = torch.full((1, n), 5, dtype=torch.long)
    model(input_ids=ids, cross_attention_states=_embeds(model, 5), use_cache=False)


#: ``model_type -> run(model, n)``: the forward that gives ``n`` positions.
FORWARD_RUNS: dict[str, Any] = {
    "mimi": _codec_transformers,
    "mimi_encoder": _codec_transformers,
    "mimi_decoder": _codec_transformers,
    "pocket_tts_audio_tokenizer": _codec_transformers,
    "pocket_tts_audio_tokenizer_encoder": _codec_transformers,
    "pocket_tts_audio_tokenizer_decoder": _codec_transformers,
    "glmasr_encoder": _glmasr,
    "lasr_encoder": _lasr,
    "timesfm2_5": _timesfm,
    "blt_local_encoder": _blt_local_encoder,
    "dia_decoder": _dia_decoder,
    "mllama_text_model": _mllama_text,
    "dots3_note_audio_encoder": _dots3_note_audio,
    "blt_local_decoder": _blt_local_decoder,
    "deepseek_ocr2_encoder": _deepseek_ocr2_encoder,
    "muse_glimmer_assistant": _muse_glimmer_assistant,
    "qwen3_omni_moe_talker_code_predictor": _embeds_only,  # its forward refuses input_ids
}


def run_forward(model, n: int) -> bool:
    """Run ``model`` on ``n`` positions by its rule (:data:`FORWARD_RUNS`, else ``inputs_embeds``
    when its forward takes no ``input_ids``); ``False`` when neither applies."""
    run = FORWARD_RUNS.get(getattr(model.config, "model_type", ""))
    if run is None and "input_ids" not in _params(model) and "inputs_embeds" in _params(model):
        run = _embeds_only
    if run is None:
        return False
    run(model, n)
    return True
