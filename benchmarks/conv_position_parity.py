"""Convolutional position embeddings: ours (float32, jax) and transformers' (float32, torch) against
float64 numpy, in float32 ulps at the output's largest magnitude.

For each model type read by the ``conv_position`` kind, a random checkpoint at the released base
sizes of its position convolution (width 768, kernel 128 in 16 groups; Data2Vec-Audio: 5 layers of
kernel 19; SEW/SEW-D: squeeze 2) is built by transformers (one transformer layer), its ``g`` and
bias drawn at random, saved, and read back by :func:`flax_posenc.conversion.load_conv_positions`.
The model's own ``pos_conv_embed`` (OmniASR: ``encode_positions``, which returns ``hidden +
positions``: there the sums are compared) runs on random hidden states ``(2, 200, 768)``; the
float64 reference is ``tests/helpers.py``'s ``conv_positions_float64`` on the float64 weight
``g * v / ||v||`` computed here from the stored tensors.

    python benchmarks/conv_position_parity.py            # the table of docs/vision-audio.md
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

BASE = {
    "hidden_size": 768,
    "num_attention_heads": 12,
    "num_conv_pos_embeddings": 128,
    "num_conv_pos_embedding_groups": 16,
}
SIZES = {
    "wav2vec2": BASE,
    "hubert": BASE,
    "unispeech": BASE,
    "unispeech-sat": BASE,
    "sew": {**BASE, "squeeze_factor": 2},
    "sew-d": {**BASE, "squeeze_factor": 2},
    "data2vec-audio": {**BASE, "num_conv_pos_embeddings": 5, "conv_pos_kernel_size": 19},
    "omniasr_audio": BASE,
}
FRAMES = 200


def measure(model_type: str) -> tuple[str, float, float, float]:
    import torch
    from conformance import tiny
    from conformance.tiny import quiet, tiny_model
    from helpers import conv_positions_float64

    from flax_posenc.conv_position import conv_positions
    from flax_posenc.conversion import load_conv_positions

    tiny.OVERRIDES[model_type] = {**tiny.OVERRIDES[model_type], **SIZES[model_type]}
    model = tiny_model(model_type)
    module = next(m for m in model.modules() if type(m).__name__.endswith("PositionalConvEmbedding"))
    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv1d)]
    gen = torch.Generator().manual_seed(0)
    weights, biases = [], []
    with torch.no_grad():
        for conv in convs:
            conv.bias.normal_(0, 0.1, generator=gen)
            if hasattr(conv, "parametrizations"):
                g = conv.parametrizations.weight.original0
                g.mul_(torch.rand(g.shape, generator=gen) + 0.5)
                v = conv.parametrizations.weight.original1.double().numpy()
                g64 = g.double().numpy()
                weights.append(g64 * v / np.sqrt(np.sum(v * v, axis=(0, 1), keepdims=True)))
            else:
                weights.append(conv.weight.double().numpy())
            biases.append(conv.bias.double().numpy())
    spec_kernel = convs[0].kernel_size[0]
    with tempfile.TemporaryDirectory() as d, quiet():
        model.save_pretrained(d)
        loaded = load_conv_positions(d)
    x = np.random.default_rng(0).standard_normal((2, FRAMES, module_width(model))).astype(np.float32)
    t = torch.from_numpy(x)
    channels_first = model_type in ("sew", "sew-d")
    with torch.no_grad():
        theirs = module(t.transpose(1, 2)).transpose(1, 2) if channels_first else module(t)
    theirs = theirs.double().numpy()
    spec = loaded.spec
    ours = np.asarray(conv_positions(x, loaded.kernel, loaded.bias, spec), np.float64)
    ref = conv_positions_float64(
        x, weights, biases, groups=spec.groups, stride=spec.stride, trim=spec.trim, layer_norm=spec.layer_norm
    )
    if model_type == "omniasr_audio":  # its module returns hidden + positions
        ref, ours = ref + x, np.asarray(x + ours.astype(np.float32), np.float64)
    ulp = float(np.spacing(np.float32(np.abs(ref).max())))
    label = f"{model_type} ({spec.dim} wide, kernel {spec_kernel}, {spec.groups} groups" + (
        f", {spec.num_layers} layers)"
        if spec.num_layers > 1
        else f", stride {spec.stride})"
        if spec.stride > 1
        else ")"
    )
    return (
        label,
        float(np.abs(ours - ref).max()) / ulp,
        float(np.abs(theirs - ref).max()) / ulp,
        float(np.abs(ours - theirs).max()) / ulp,
    )


def module_width(model) -> int:
    return int(model.config.hidden_size)


def main() -> None:
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    print(
        "| model type (position convolution) | ours vs float64 | transformers float32 vs float64 | ours vs transformers |"
    )
    print("|---|---|---|---|")
    for model_type in SIZES:
        label, a, b, c = measure(model_type)
        print(f"| {label} | {a:.2f} | {b:.2f} | {c:.2f} |")


if __name__ == "__main__":
    main()
