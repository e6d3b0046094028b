"""Transformer-XL relative sinusoids (the ``xl_relative`` kind): ours (float64 rounded once to float32)
and transformers' own float32 position modules, against the float64 formula, in float32 ulps of 1.0
(``2**-23``: every value lies in [-1, 1]).

For each row, the model's own position module is built at the released width (Parakeet CTC 1.1B and
Nemotron ASR: ``hidden_size`` 1024; FastSpeech2-Conformer: 384; wav2vec2-conformer large: 1024) and
called on ``L`` frames; its ``(2 L - 1, dim)`` rows are compared with
:func:`flax_posenc.conversion.xl_relative.xl_relative_sinusoids` (float64, the independent formula of
the module docstring) and with that rounded once to float32 (ours). The tables are built here, no
checkpoint is read. ~10 s on 2 shared cores.

    python benchmarks/xl_relative_parity.py            # the table of docs/vision-audio.md
"""

from __future__ import annotations

import numpy as np

from flax_posenc.conversion.xl_relative import xl_relative_sinusoids

ULP = 2.0**-23
LENGTHS = (250, 1500, 5000)


def modules():
    """``(model type, width, module)`` for each row, at the released width."""
    from transformers import FastSpeech2ConformerConfig, ParakeetEncoderConfig, Wav2Vec2ConformerConfig
    from transformers.models.fastspeech2_conformer.modeling_fastspeech2_conformer import (
        FastSpeech2ConformerRelPositionalEncoding,
    )
    from transformers.models.nemotron_asr_streaming.configuration_nemotron_asr_streaming import (
        NemotronAsrStreamingEncoderConfig,
    )
    from transformers.models.nemotron_asr_streaming.modeling_nemotron_asr_streaming import (
        NemotronAsrStreamingEncoderRelPositionalEncoding,
    )
    from transformers.models.parakeet.modeling_parakeet import ParakeetEncoderRelPositionalEncoding
    from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
        Wav2Vec2ConformerRelPositionalEmbedding,
    )

    fs2 = FastSpeech2ConformerConfig(hidden_size=384)
    return [
        ("parakeet_encoder", 1024, ParakeetEncoderRelPositionalEncoding(ParakeetEncoderConfig(hidden_size=1024))),
        (
            "nemotron_asr_streaming_encoder",
            1024,
            NemotronAsrStreamingEncoderRelPositionalEncoding(
                NemotronAsrStreamingEncoderConfig(hidden_size=1024, max_position_embeddings=10000)
            ),
        ),
        ("fastspeech2_conformer", 384, FastSpeech2ConformerRelPositionalEncoding(fs2, fs2.encoder_config)),
        (
            "wav2vec2-conformer",
            1024,
            Wav2Vec2ConformerRelPositionalEmbedding(Wav2Vec2ConformerConfig(hidden_size=1024)),
        ),
    ]


def measure() -> list[tuple[str, int, int, float, float]]:
    import torch

    rows = []
    for model_type, dim, module in modules():
        module.eval()
        for length in LENGTHS:
            with torch.no_grad():
                out = module(torch.zeros(1, length, dim))
            theirs = (out[-1] if isinstance(out, tuple) else out)[0].double().numpy()
            ref = xl_relative_sinusoids(length, dim)
            ours = ref.astype(np.float32).astype(np.float64)
            rows.append(
                (
                    model_type,
                    dim,
                    length,
                    float(np.abs(ours - ref).max() / ULP),
                    float(np.abs(theirs - ref).max() / ULP),
                )
            )
    return rows


def main() -> None:
    print(
        "| model type | width | frames L | ours vs float64 (ulps of 1) | transformers float32 vs float64 (ulps of 1) |"
    )
    print("|---|---|---|---|---|")
    for model_type, dim, length, ours, theirs in measure():
        print(f"| {model_type} | {dim} | {length} | {ours:.2f} | {theirs:.1f} |")


if __name__ == "__main__":
    main()
