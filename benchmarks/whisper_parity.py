"""Whisper's two position tables against transformers and float64: what docs/vision-audio.md claims.

    python benchmarks/whisper_parity.py      # ~40 s on 2 shared cores; needs torch + transformers

1. The encoder table at every released Whisper width (d_model 384, 512, 768, 1024, 1280; 1500
   rows): transformers' ``sinusoids()`` (what ``_init_weights`` stores, float32 angles) and
   ``fp.sinusoidal_table(1500, d, layout="concatenated", endpoint=True)`` (float64, rounded once)
   against the float64 formula.
2. A tiny random ``WhisperModel`` (d_model 64) read with ``inspect_source``: the encoder input
   (conv stack + our table under ``jax.jit``) and the decoder input (token embedding + our table,
   positions 0..9 and 438..447) against the hidden states transformers feeds its first layers.
3. The limits ``inspect_source`` reports, in seconds and tokens.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def sinusoid_errors() -> list[tuple[int, float, float]]:
    from transformers.models.whisper.modeling_whisper import sinusoids

    import flax_posenc as fp

    rows = []
    for d in (384, 512, 768, 1024, 1280):
        w = np.exp(-np.log(10000.0) / (d // 2 - 1) * np.arange(d // 2))
        angle = np.arange(1500)[:, None] * w
        ref = np.concatenate([np.sin(angle), np.cos(angle)], 1)
        theirs = np.abs(sinusoids(1500, d).double().numpy() - ref).max()
        ours = np.abs(np.asarray(fp.sinusoidal_table(1500, d, layout="concatenated", endpoint=True), np.float64) - ref)
        rows.append((d, float(theirs), float(ours.max())))
    return rows


def embedding_parity() -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    import torch
    from safetensors.numpy import load_file
    from test_whisper import TINY
    from transformers import WhisperConfig, WhisperModel

    import flax_posenc as fp
    from flax_posenc.conversion import inspect_source

    torch.manual_seed(0)
    model = WhisperModel(WhisperConfig(**TINY)).eval()
    path = Path(tempfile.mkdtemp())
    model.save_pretrained(path)
    record = inspect_source(path)
    enc = next(m for m in record.mechanisms if m.unit == "seconds")
    dec = next(m for m in record.mechanisms if m.unit == "tokens")
    out = {
        "limits": f"{enc.record.seconds_limit:g} s ({enc.limit} positions); {dec.limit} tokens",
    }
    seen = {}

    def grab(name):
        return lambda mod, args, kwargs: seen.update({name: (args[0] if args else kwargs["hidden_states"]).clone()})

    hooks = [
        model.encoder.layers[0].register_forward_pre_hook(grab("enc"), with_kwargs=True),
        model.decoder.layers[0].register_forward_pre_hook(grab("dec"), with_kwargs=True),
    ]
    features = torch.randn(2, TINY["num_mel_bins"], 3000, generator=torch.Generator().manual_seed(1))
    ids = np.random.default_rng(2).integers(0, TINY["vocab_size"], (2, 10))
    words = jnp.asarray(load_file(path / "model.safetensors")["decoder.embed_tokens.weight"])
    table_e, table_d = jnp.asarray(enc.table.weights), jnp.asarray(dec.table.weights)
    with torch.no_grad():
        model.encoder(features)
        e = model.encoder
        conv = torch.nn.functional.gelu(e.conv2(torch.nn.functional.gelu(e.conv1(features)))).permute(0, 2, 1)
    ours_e = jax.jit(lambda c: c + fp.lookup_positions(table_e, jnp.arange(c.shape[1])))(conv.numpy())
    out["encoder input, largest abs difference ours vs transformers"] = float(
        np.abs(np.asarray(ours_e) - seen["enc"].numpy()).max()
    )
    embed = jax.jit(lambda i, p: words[i] + fp.lookup_positions(table_d, p))
    for start in (0, 438):
        positions = np.broadcast_to(np.arange(start, start + 10), ids.shape).copy()
        with torch.no_grad():
            model.decoder(input_ids=torch.from_numpy(ids), position_ids=torch.from_numpy(positions))
        diff = np.abs(np.asarray(embed(ids, positions)) - seen["dec"].numpy()).max()
        out[f"decoder input at positions {start}..{start + 9}, largest abs difference ours vs transformers"] = float(
            diff
        )
    for h in hooks:
        h.remove()
    return out


def main() -> None:
    print("| d_model | transformers sinusoids() vs float64 | fp.sinusoidal_table vs float64 |")
    print("| --- | --- | --- |")
    for d, theirs, ours in sinusoid_errors():
        print(f"| {d} | {theirs:.2e} | {ours:.2e} |")
    print()
    print("| tiny random WhisperModel (d_model 64) | value |")
    print("| --- | --- |")
    for name, value in embedding_parity().items():
        print(f"| {name} | {value if isinstance(value, str) else f'{value:.3g}'} |")


if __name__ == "__main__":
    main()
