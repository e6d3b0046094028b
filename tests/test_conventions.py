"""Each peer's sinusoidal convention, reproduced by options of fp.sinusoidal_table / _encoding.

Every peer's formula is re-implemented here in float64 numpy, line for line as its source
writes it (the source named above each one), and compared with our float32 result; where
transformers ships the function itself (DistilBERT, Marian, M2M100 = fairseq) it is compared
too. docs/conventions.md names the options per peer; this file backs each row.

Tolerances. ``sinusoidal_table`` rounds the float64 value once: at most half a float32 ulp of
the value (``ULP32 * max(|ref|, 2**-126)`` below is one ulp of a value in [1, 2)). The device
``sinusoidal_encoding`` is within 2e-6 absolute (documented bound). transformers' own functions
compute the angle in float32 (or in float64 and then round), so they sit a few ulps of the
*angle* away: at positions < 64 that is < 64 * 2**-24 ~ 4e-6.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import flax_sinusoidal_init, t2t_timing_signal

import flax_posenc as fp

ULP32 = 2.0**-23  # float32 ulp of values in [1, 2)


def within_half_ulp(ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    assert ours.shape == ref.shape
    spacing = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(ours - ref) <= 0.5 * spacing), np.abs(ours - ref).max()


# --------------------------------------------------------------------------- peers, float64 numpy
# (tensor2tensor's get_timing_signal_1d and flax's sinusoidal_init live in tests/helpers.py)


def fairseq_get_embedding(num_embeddings, embedding_dim, padding_idx=None):
    """fairseq SinusoidalPositionalEmbedding.get_embedding (also transformers' M2M100/FSMT)."""
    half_dim = embedding_dim // 2
    emb = np.log(10000) / (half_dim - 1)
    emb = np.exp(np.arange(half_dim, dtype=np.float64) * -emb)
    emb = np.arange(num_embeddings, dtype=np.float64)[:, None] * emb[None, :]
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=1).reshape(num_embeddings, -1)
    if embedding_dim % 2 == 1:
        emb = np.concatenate([emb, np.zeros((num_embeddings, 1))], axis=1)
    if padding_idx is not None:
        emb[padding_idx, :] = 0
    return emb


def fairseq_make_positions(tokens, padding_idx):
    """fairseq.utils.make_positions: non-padding tokens count from padding_idx + 1."""
    mask = tokens != padding_idx
    return np.cumsum(mask, axis=1) * mask + padding_idx


def keras_hub_sine(seq_length, hidden_size, max_wavelength=10000, start_index=0):
    """keras-hub layers.SinePositionEncoding.call."""
    positions = np.arange(seq_length, dtype=np.float64) + start_index
    min_freq = 1 / max_wavelength
    timescales = np.power(min_freq, 2 * (np.arange(hidden_size) // 2) / hidden_size)
    angles = positions[:, None] * timescales[None, :]
    cos_mask = np.arange(hidden_size) % 2
    return np.sin(angles) * (1 - cos_mask) + np.cos(angles) * cos_mask


def xlm_position_enc(n_pos, dim):
    """DistilBERT/XLM _create_sinusoidal_embeddings and Marian's angle table."""
    return np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])


def distilbert(n_pos, dim):
    out = np.empty((n_pos, dim))
    enc = xlm_position_enc(n_pos, dim)
    out[:, 0::2] = np.sin(enc[:, 0::2])
    out[:, 1::2] = np.cos(enc[:, 1::2])
    return out


def marian(n_pos, dim):
    out = np.empty((n_pos, dim))
    enc = xlm_position_enc(n_pos, dim)
    sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
    out[:, 0:sentinel] = np.sin(enc[:, 0::2])
    out[:, sentinel:] = np.cos(enc[:, 1::2])
    return out


def maxtext(positions, embedding_dims, max_wavelength=10000):
    """MaxText layers/embeddings.py PositionalEmbedding (even widths; its odd-width pad is commented out)."""
    num_timescales = embedding_dims // 2
    inc = np.log(float(max_wavelength)) / max(num_timescales - 1, 1)
    inv_timescales = np.exp(np.arange(num_timescales) * -inc)
    scaled = np.asarray(positions, np.float64)[..., None] * inv_timescales
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=-1)


# --------------------------------------------------------------------------- the options per peer

T2T = dict(layout="concatenated", endpoint=True, odd_dim="zero")
FLAX = T2T
FAIRSEQ = T2T
MAXTEXT = dict(layout="concatenated", endpoint=True)
KERAS_HUB = dict(layout="interleaved", odd_dim="sin")
DISTILBERT = KERAS_HUB
MARIAN = dict(layout="concatenated", odd_dim="sin")


@pytest.mark.parametrize("dim", [8, 9, 64, 65])
def test_tensor2tensor(dim):
    for lo, hi, start in [(1.0, 1.0e4, 0), (0.5, 300.0, 7), (2.0, 1.0e5, 1000)]:
        ref = t2t_timing_signal(np.arange(40) + start, dim, lo, hi)
        ours = fp.sinusoidal_table(40, dim, base=hi, min_timescale=lo, start=start, **T2T)
        within_half_ulp(ours, ref)


@pytest.mark.parametrize("dim", [8, 9, 64, 65])
def test_flax_sinusoidal_init(dim):
    for lo, hi in [(1.0, 1.0e4), (0.5 / np.pi, 1024.0)]:
        within_half_ulp(
            fp.sinusoidal_table(50, dim, base=hi, min_timescale=lo, **FLAX), flax_sinusoidal_init(50, dim, lo, hi)
        )


@pytest.mark.parametrize("dim", [8, 9, 64, 65])
def test_keras_hub(dim):
    for wavelength, start in [(10000, 0), (500, 37)]:
        ref = keras_hub_sine(30, dim, wavelength, start)
        within_half_ulp(fp.sinusoidal_table(30, dim, base=wavelength, start=start, **KERAS_HUB), ref)


@pytest.mark.parametrize("dim", [8, 9, 64, 65])
def test_distilbert_and_marian_against_transformers(dim):
    from transformers.models.distilbert.modeling_distilbert import _create_sinusoidal_embeddings
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    n = 48
    within_half_ulp(fp.sinusoidal_table(n, dim, **DISTILBERT), distilbert(n, dim))
    within_half_ulp(fp.sinusoidal_table(n, dim, **MARIAN), marian(n, dim))
    hf = torch.empty(n, dim)
    _create_sinusoidal_embeddings(n, dim, hf)  # float64 angles, rounded to float32 once
    assert np.array_equal(np.asarray(fp.sinusoidal_table(n, dim, **DISTILBERT)), hf.numpy())
    marian_hf = MarianSinusoidalPositionalEmbedding(n, dim).create_weight()
    assert np.array_equal(np.asarray(fp.sinusoidal_table(n, dim, **MARIAN)), marian_hf.numpy())


@pytest.mark.parametrize("dim", [16, 17])
def test_fairseq_recipe(dim):
    """fairseq: positions from padding_idx + 1, padding rows zero (docs/conventions.md recipe)."""
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    padding_idx = 1
    tokens = np.array([[5, 6, 7, 8, 1, 1], [1, 1, 9, 4, 3, 2]])  # right- and left-padded
    positions = fairseq_make_positions(tokens, padding_idx)
    ref = fairseq_get_embedding(padding_idx + 1 + tokens.shape[1], dim, padding_idx)[positions]

    @jax.jit
    def recipe(tokens):  # the recipe in docs/conventions.md, on device
        mask = tokens != padding_idx
        pos = jnp.cumsum(mask, axis=1) * mask + padding_idx
        return fp.sinusoidal_encoding(pos, dim, **FAIRSEQ) * mask[..., None]

    ours = np.asarray(recipe(jnp.asarray(tokens)))
    assert np.abs(ours - ref).max() <= 2e-6
    # the table form: rows padding_idx + 1 ..., row padding_idx zeroed
    table = np.asarray(fp.sinusoidal_table(padding_idx + 1 + 6, dim, **FAIRSEQ)).copy()
    table[padding_idx] = 0
    within_half_ulp(table[positions], ref)
    # transformers' own fairseq port (M2M100), float32 angles: a few ulps of the angle
    hf = M2M100SinusoidalPositionalEmbedding.get_embedding(padding_idx + 1 + 6, dim, padding_idx)
    assert np.abs(table - hf.numpy()).max() <= 64 * 2.0**-24
    hf_pos = M2M100SinusoidalPositionalEmbedding.create_position_ids_from_input_ids(
        torch.from_numpy(tokens), padding_idx
    )
    assert np.array_equal(hf_pos.numpy(), positions)


def test_maxtext_under_vmap_and_scan():
    dim = 32
    positions = np.array([[0, 1, 2, 3], [10, 11, 12, 13]])
    ref = maxtext(positions, dim)
    enc = jax.jit(jax.vmap(lambda p: fp.sinusoidal_encoding(p, dim, **MAXTEXT)))(jnp.asarray(positions))
    assert np.abs(np.asarray(enc) - ref).max() <= 2e-6

    def step(carry, p):
        return carry, fp.sinusoidal_encoding(p, dim, **MAXTEXT)

    _, scanned = jax.lax.scan(step, 0, jnp.asarray(positions.T))
    assert np.abs(np.asarray(scanned).transpose(1, 0, 2) - ref).max() <= 2e-6


@pytest.mark.parametrize("opts", [T2T, KERAS_HUB, MARIAN], ids=["zero", "sin-interleaved", "sin-concatenated"])
def test_device_encoding_matches_table_for_odd_dims(opts):
    p = np.arange(0, 3000, 7)
    table = np.asarray(fp.sinusoidal_table(3000, 33, min_timescale=1.0, **opts))[p]
    enc = jax.jit(lambda q: fp.sinusoidal_encoding(q, 33, **opts))(jnp.asarray(p))
    assert enc.shape == (p.size, 33)
    assert np.abs(np.asarray(enc) - table).max() <= 2e-6


def test_bad_convention_options_one_line():
    with pytest.raises(
        ValueError, match=r"^dim: expected a positive even integer .*got 7; for an odd width pass odd_dim='zero'"
    ):
        fp.sinusoidal_table(4, 7)
    with pytest.raises(ValueError, match=r"^odd_dim: expected one of \('zero', 'sin'\) or None, got 'pad'$"):
        fp.sinusoidal_table(4, 7, odd_dim="pad")
    with pytest.raises(ValueError, match=r"^min_timescale: expected a finite number > 0, got 0.0$"):
        fp.sinusoidal_encoding(jnp.arange(3), 8, min_timescale=0.0)
    with pytest.raises(ValueError, match=r"^base: expected a finite number > 10 \(min_timescale\)"):
        fp.sinusoidal_table(4, 8, min_timescale=10.0, base=5.0)
