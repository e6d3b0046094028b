"""Batches equal their rows: positions of a padded or packed batch are those of each row alone.

Hypothesis draws ragged batches (row lengths, padding side, segment splits, image runs); for each
position rule the library implements, the batch's positions (and the RoPE rotation they drive) on
the real tokens equal those of every row computed alone, and equal transformers' own position ids
for that model type: RoBERTa's ``create_position_ids_from_input_ids`` (learned table, reserved
offset), Llama's ``generate`` (``cumsum(mask) - 1``, left padding), Qwen2-VL's ``get_rope_index``
(M-RoPE with images, left padding).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flax_posenc as fp

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: one width for every batch (few shapes: few compilations)
WIDTH = 10
rows = st.lists(st.integers(1, WIDTH), min_size=1, max_size=4)


def _mask(lengths, width, left: bool) -> np.ndarray:
    index = np.arange(width)[None]
    lengths = np.asarray(lengths)[:, None]
    return (index >= width - lengths) if left else (index < lengths)


@SETTINGS
@given(lengths=rows, left=st.booleans())
def test_learned_table_offsets_roberta(lengths, left):
    import torch
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

    width, pad = WIDTH, 1  # RoBERTa: padding_idx 1, offset 2
    mask = _mask(lengths, width, left)
    ids = np.where(mask, 5, pad)
    batch = np.asarray(fp.padding_aware_positions(mask)) + pad + 1  # padding -> -1 + 2 = row 1
    theirs = RobertaEmbeddings.create_position_ids_from_input_ids(torch.tensor(ids), pad).numpy()
    np.testing.assert_array_equal(batch, theirs)
    for r, n in enumerate(lengths):
        alone = np.asarray(fp.padding_aware_positions(np.ones((1, n), bool)))[0] + pad + 1
        np.testing.assert_array_equal(batch[r][mask[r]], alone)


@SETTINGS
@given(segments=st.lists(st.integers(1, 6), min_size=1, max_size=5))
def test_packed_rows_equal_each_sequence_alone(segments):
    used = sum(segments)
    segment_ids = np.zeros((1, 30), np.int64)  # padding: segment 0 after the sequences
    segment_ids[0, :used] = np.repeat(np.arange(1, len(segments) + 1), segments)
    packed = np.asarray(fp.packed_positions(segment_ids))[0, :used]
    alone = np.concatenate([np.asarray(fp.sequential_positions(n)) for n in segments])
    np.testing.assert_array_equal(packed, alone)


@SETTINGS
@given(lengths=rows, seed=st.integers(0, 2**16))
def test_rope_left_padded_batch_equals_rows_and_llama_generate(lengths, seed):
    cfg = fp.RopeConfig(head_dim=8, max_position_embeddings=32)
    width = WIDTH
    mask = _mask(lengths, width, left=True)
    # transformers' generate: position_ids = cumsum(mask) - 1, padding filled with 1
    theirs = np.where(mask, np.cumsum(mask, axis=1) - 1, 1)
    ours = np.maximum(np.asarray(fp.padding_aware_positions(mask)), 0)  # padding at 0 (examples/models)
    np.testing.assert_array_equal(ours[mask], theirs[mask])
    k = np.random.default_rng(seed).standard_normal((len(lengths), width, 2, 8)).astype(np.float32)
    batch = np.asarray(fp.apply_rope(k, cfg, ours))
    for r, n in enumerate(lengths):
        alone = np.asarray(fp.apply_rope(k[r : r + 1, width - n :], cfg))[0]
        np.testing.assert_array_equal(batch[r, width - n :], alone)


IMAGE = 9


@st.composite
def mrope_rows(draw):
    """Rows of text and image runs (grid rows ``(1, 2h, 2w)``: ``h * w`` tokens each)."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        tokens, grids = [], []
        for _ in range(draw(st.integers(1, 4))):
            if draw(st.booleans()):  # an image run, then text (adjacent runs would be one)
                h, w = draw(st.integers(1, 2)), draw(st.integers(1, 3))
                tokens += [IMAGE] * (h * w) + [draw(st.integers(1, 8))]
                grids.append([1, 2 * h, 2 * w])
            else:
                tokens += draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))
        out.append((tokens, grids))
    return out


@SETTINGS
@given(batch=mrope_rows(), extra=st.integers(0, 2))
def test_mrope_left_padded_batch_equals_rows(batch, extra):
    cfg = fp.MRopeConfig(
        fp.RopeConfig(head_dim=16, max_position_embeddings=64), mrope_section=(2, 3, 3), image_token_id=IMAGE
    )
    width = max(len(t) for t, _ in batch) + extra
    ids = np.zeros((len(batch), width), np.int64)
    mask = np.zeros_like(ids)
    grids = []
    for r, (tokens, g) in enumerate(batch):
        ids[r, width - len(tokens) :], mask[r, width - len(tokens) :] = tokens, 1
        grids += g
    positions, deltas = fp.mrope_positions(
        ids, image_grid_thw=grids or None, attention_mask=mask, config=cfg, return_deltas=True
    )
    for r, (tokens, g) in enumerate(batch):
        alone, delta = fp.mrope_positions(np.array([tokens]), image_grid_thw=g or None, config=cfg, return_deltas=True)
        np.testing.assert_array_equal(positions[:, r, width - len(tokens) :], alone[:, 0])
        assert deltas[r, 0] == delta[0, 0]
        # the next decoded token: the row's text position plus its delta, as alone
        step = fp.mrope_decode_positions(jnp.array([[len(tokens)]]), jnp.array([[deltas[r, 0]]]))
        assert int(step[0, 0, 0]) == int(alone.max()) + 1
