"""Positions while serving, measured: re-rotated keys, the context shift, LongRoPE's switch (docs/serving.md).

    python benchmarks/serving.py                  # ~3 min on 2 CPU cores; needs torch + transformers
    python benchmarks/serving.py --only rotate    # the key error sweep and its figure (~20 s, jax only)

- ``rotate``: keys rotated at positions ``d .. d + 7`` (float64 RoPE, rounded once to float32, as a
  cache holds them) moved back by ``d`` with :func:`flax_posenc.rotate_keys` (traced ``d`` under
  ``jit``: the device path), against float64 RoPE at ``0 .. 7``; beside it the float32 rotation
  others use (``cos``/``sin`` of ``float32(d) * float32(w)``, llama.cpp's ``ggml_rope`` shift).
  head_dim 128, theta 10000 and 500000, ``d`` from 1 to ``2**24``. Writes
  ``docs/figures/rotate_keys_error.png`` (``--figure``).
- ``shift``: examples/models/serving.py's context shift with attention sinks (4 sinks, window 16,
  40 new tokens) against transformers' ``LlamaForCausalLM`` re-run on the kept tokens at every
  step; 1 and 2 layers.
- ``switch``: LongRoPE's switch (original_max_position_embeddings 12, 14 new tokens from 8)
  against transformers' Phi-3 ``generate(do_sample=False)``; re-rotated keys and a new prefill.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
FIGURE = ROOT / "docs" / "figures" / "rotate_keys_error.png"
DELTAS = np.unique(np.round(2.0 ** np.linspace(0, 24, 49)).astype(np.int64))


def rotate_errors(theta: float, head_dim: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """Max |error| of keys moved back by each of :data:`DELTAS`: ours and the float32 rotation."""
    import jax
    import jax.numpy as jnp

    import flax_posenc as fp
    from flax_posenc.rope_config import rope_inverse_frequencies

    cfg = fp.RopeConfig(head_dim=head_dim, rope_theta=theta)
    inv, _ = rope_inverse_frequencies(cfg)
    raw = np.random.default_rng(0).standard_normal((8, 2, head_dim))
    half = head_dim // 2

    def rope64(positions):
        angle = positions[:, None, None].astype(np.float64) * inv
        c, s = np.cos(angle), np.sin(angle)
        x1, x2 = raw[..., :half], raw[..., half:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    move = jax.jit(lambda k, d, p: fp.rotate_keys(k, -d, cfg, positions=p))
    want = rope64(np.arange(8))
    ours, naive = [], []
    for d in DELTAS:
        old = np.arange(8) + d
        k = jnp.asarray(rope64(old).astype(np.float32))
        got = move(k, jnp.int32(d), jnp.asarray(old, jnp.int32))
        ours.append(np.abs(np.asarray(got, np.float64) - want).max())
        angle = np.float32(-d) * inv.astype(np.float32)
        c, s = np.cos(angle)[None, None], np.sin(angle)[None, None]
        naive.append(np.abs(np.asarray(fp.apply_rotary(k, c, s), np.float64) - want).max())
    return np.array(ours), np.array(naive)


def rotate_section(figure: Path | None) -> None:
    print("## Re-rotated keys against float64 (head_dim 128, 8 keys x 2 heads of N(0, 1) entries)\n")
    print("| theta | shift d | flax-posenc max abs error | float32 angle max abs error |")
    print("|---|---|---|---|")
    curves = {}
    for theta in (10000.0, 500000.0):
        ours, naive = rotate_errors(theta)
        curves[theta] = (ours, naive)
        for d in (1, 1024, 65536, 1 << 20, 1 << 24):
            i = int(np.searchsorted(DELTAS, d))
            print(f"| {theta:g} | {DELTAS[i]} | {ours[i]:.1e} | {naive[i]:.1e} |")
        print(f"| {theta:g} | worst over 1..2**24 | {ours.max():.1e} | {naive.max():.1e} |")
    if figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for (theta, (ours, naive)), colour in zip(curves.items(), ("C0", "C1"), strict=True):
            ax.loglog(DELTAS, naive, "--", color=colour, label=f"float32 angle, theta {theta:g}")
            ax.loglog(DELTAS, np.maximum(ours, 1e-9), "-", color=colour, label=f"fp.rotate_keys, theta {theta:g}")
        ax.set_xlabel("shift d (positions)")
        ax.set_ylabel("max |key error| vs float64")
        ax.set_title("Cached keys moved back by d: re-rotation error (head_dim 128)")
        ax.legend(fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        fig.tight_layout()
        figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(figure, dpi=110)
        print(f"\nfigure: {figure.relative_to(ROOT) if figure.is_relative_to(ROOT) else figure}")


def shift_section() -> None:
    import tempfile

    from model_checkpoints import build
    from test_serving import SINKS, STEPS, WINDOW, llama, reprefill_reference, serving

    print(f"\n## Context shift ({SINKS} sinks, window {WINDOW}, {STEPS} new tokens) vs transformers re-prefill\n")
    print("| layers | max abs logit difference / max abs logit | greedy ids equal |")
    print("|---|---|---|")
    prompt = np.random.default_rng(1).integers(0, 1000, (1, 10))
    for layers in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            torch_model = build(
                "llama", Path(d), num_hidden_layers=layers, rope_scaling=None, max_position_embeddings=24
            )
            model = llama.from_pretrained(d)
        ids, logits = serving.generate_with_sinks(
            model, prompt, STEPS, sink_tokens=SINKS, window=WINDOW, return_logits=True
        )
        want_ids, want = reprefill_reference(torch_model, prompt[0], STEPS, SINKS, WINDOW)
        same = np.array_equal(np.asarray(ids)[0, 10:], want_ids)
        first = int(np.argmax(np.asarray(ids)[0, 10:] != want_ids)) if not same else STEPS
        err = np.abs(np.asarray(logits[0, :first], np.float64) - want[:first]).max() / np.abs(want).max()
        print(f"| {layers} | {err:.1e} (steps before ids differ: {first}) | {same} |")


def switch_section() -> None:
    import tempfile

    from model_checkpoints import hf_generate
    from test_serving import ORIGINAL, _switch_reference_logits, llama, phi3_as_llama, serving

    print(f"\n## LongRoPE switch (original_max_position_embeddings {ORIGINAL}) vs transformers' Phi-3 generate\n")
    print("| layers | at the switch | max abs logit difference / max abs logit | greedy ids equal |")
    print("|---|---|---|---|")
    prompt = np.random.default_rng(2).integers(0, 1000, (2, 8))
    for layers in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            phi3 = phi3_as_llama(Path(d), layers)
            model = llama.from_pretrained(d)
        want_ids = hf_generate(phi3, prompt, 14)
        want = _switch_reference_logits(phi3, want_ids, 8)
        for mode in ("rotate", "prefill"):
            ids, logits = serving.generate_longrope(model, prompt, 14, at_switch=mode, return_logits=True)
            same = np.array_equal(np.asarray(ids), want_ids)
            # the first new token past the switch (position 12) is fed the same tokens either way
            past = ORIGINAL - 8 + 2  # new tokens 0 .. 5: the last one fed at position ORIGINAL
            err = np.abs(np.asarray(logits[:, :past], np.float64) - want[:, :past]).max()
            print(f"| {layers} | {mode} | {err / np.abs(want).max():.1e} (through the first step past it) | {same} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("rotate", "shift", "switch"))
    parser.add_argument("--figure", type=Path, default=FIGURE, help="where the rotate figure goes")
    args = parser.parse_args()
    if args.only in (None, "rotate"):
        rotate_section(args.figure)
    if args.only in (None, "shift"):
        shift_section()
    if args.only in (None, "switch"):
        switch_section()


if __name__ == "__main__":
    main()
