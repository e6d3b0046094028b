"""M-RoPE while decoding: a tiny Qwen2-VL with an image and a left-padded batch.

At every step of transformers' ``Qwen2VLForConditionalGeneration.generate(do_sample=False)``, the
position ids and ``cos``/``sin`` its text rotary module receives and returns are recorded; ours
come from the prompt's ``rope_deltas`` (:func:`flax_posenc.mrope_positions`) and a traced step
under ``jit`` (:func:`flax_posenc.mrope_decode_positions`, :func:`flax_posenc.mrope_cos_sin`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from conformance.tiny import quiet, tiny_config  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc.conversion import load_mrope_config  # noqa: E402

STEPS = 5


def test_decoding_positions_and_cos_sin_equal_transformers_generate(tmp_path):
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    config = tiny_config("qwen2_vl")
    torch.manual_seed(0)
    with quiet():
        model = Qwen2VLForConditionalGeneration(config).eval()
        model.save_pretrained(tmp_path)
    seen = []
    model.model.language_model.rotary_emb.register_forward_hook(
        lambda module, args, out: seen.append(
            (args[1].numpy().copy(), out[0].double().numpy(), out[1].double().numpy())
        )
    )
    image = config.image_token_id
    row = [5, 6] + [image] * 6 + [7, 8]  # text, a 1 x 4 x 6 patch grid (2 x 3 tokens), text
    ids = np.array([[0, 0, 0] + row, [5, 9, 10] + row])  # the first row left-padded
    mask = np.array([[0] * 3 + [1] * len(row), [1] * (3 + len(row))])
    grid = [[1, 4, 6], [1, 4, 6]]
    pixels = torch.randn(48, 3 * 2 * 2 * 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), quiet():
        model.generate(
            torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            pixel_values=pixels,
            image_grid_thw=torch.tensor(grid),
            mm_token_type_ids=torch.tensor((ids == image).astype(np.int32)),
            max_new_tokens=STEPS,
            min_new_tokens=STEPS,
            do_sample=False,
            pad_token_id=0,
        )
    assert len(seen) == STEPS  # the prefill, then one call per decoding step
    cfg = load_mrope_config(tmp_path)
    prompt_positions, deltas = fp.mrope_positions(
        ids, image_grid_thw=grid, attention_mask=mask, config=cfg, return_deltas=True
    )
    np.testing.assert_array_equal(np.where(mask[None] == 1, prompt_positions, seen[0][0]), seen[0][0])
    lengths = mask.sum(axis=1, keepdims=True)

    @jax.jit
    def step(i, deltas):  # new token i is fed at text position lengths + i - 1
        positions = fp.mrope_decode_positions(jnp.asarray(lengths) + i - 1, deltas)
        return (positions, *fp.mrope_cos_sin(positions, cfg))

    inv, _ = fp.rope_inverse_frequencies(cfg.rope)
    half = inv.size
    for i in range(1, STEPS):
        theirs, their_cos, their_sin = seen[i]
        positions, cos, sin = step(jnp.int32(i), jnp.asarray(deltas))
        np.testing.assert_array_equal(np.asarray(positions), theirs)
        tol = 2.0**-22 * (1 + np.abs(theirs[0, :, :, None] * inv))
        assert np.all(np.abs(np.asarray(cos, np.float64) - their_cos[..., :half]) <= tol)
        assert np.all(np.abs(np.asarray(sin, np.float64) - their_sin[..., :half]) <= tol)
    # a stale (zero) rope_deltas, as other projects lose it, would give other positions
    stale, _, _ = step(jnp.int32(1), jnp.zeros_like(jnp.asarray(deltas)))
    assert not np.array_equal(np.asarray(stale), seen[1][0])


def test_decode_positions_bad_input_one_line():
    import pytest

    with pytest.raises(
        ValueError, match=r"^rope_deltas: expected \(2, 1\) integers \(one per row\), got shape \(3, 1\)"
    ):
        fp.mrope_decode_positions(np.zeros((2, 1), int), np.zeros((3, 1), int))
    with pytest.raises(ValueError, match=r"^text_positions: expected \(batch, seq\) integers, got shape \(2,\)"):
        fp.mrope_decode_positions(np.zeros(2, int), np.zeros((2, 1), int))
