"""fp.nnx / fp.linen PatchPositionalEmbedding: equal to transformers' vision embeddings output.

The tokens before positions (class tokens + the patch projection of ``pixel_values``) come from
the checkpoint's own torch modules; our module adds the positions; the reference is the
embeddings module's own forward, with and without ``interpolate_pos_encoding=True``. Tolerance:
8 float32 ulps at the largest magnitude (the positions' rounding; the tokens are the same).
Also: jax.jit, vmap, Linen == NNX, and sharding by logical axes on 8 host devices.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from grid_checkpoints import build, embeddings_module
from helpers import fast_xla_env

import flax_posenc as fp
from flax_posenc import PositionLimitError

PARITY = ("vit", "deit", "clip_vision_model", "siglip_vision_model")


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid_modules")
    return {t: (build(t, root / t), root / t) for t in PARITY}


def _tokens(model_type, model, pixels):
    """Class tokens + patch projection, by the checkpoint's own torch modules (no positions)."""
    emb = embeddings_module(model)
    b = pixels.shape[0]
    with torch.no_grad():
        if model_type in ("vit", "deit"):
            patches = emb.patch_embeddings(pixels)
            prefix = [emb.cls_token.expand(b, -1, -1)]
            if model_type == "deit":
                prefix.append(emb.distillation_token.expand(b, -1, -1))
            return torch.cat([*prefix, patches], dim=1).numpy()
        patches = emb.patch_embedding(pixels).flatten(2).transpose(1, 2)
        if model_type == "clip_vision_model":
            patches = torch.cat([emb.class_embedding.expand(b, 1, -1), patches], dim=1)
        return patches.numpy()


def _reference(model, pixels, interpolate):
    with torch.no_grad():
        return embeddings_module(model)(pixels, interpolate_pos_encoding=interpolate).numpy()


def _close(ours, ref):
    scale = np.spacing(np.float32(np.abs(ref).max()))
    assert ours.shape == ref.shape
    assert np.abs(np.asarray(ours, np.float64) - ref).max() <= 8 * scale


@pytest.mark.parametrize("model_type", PARITY)
def test_nnx_and_linen_equal_the_embeddings_output(vision, model_type):
    model, path = vision[model_type]
    pos = fp.nnx.PatchPositionalEmbedding.from_pretrained(path)
    lin, variables = fp.linen.PatchPositionalEmbedding.from_pretrained(path)
    rng = torch.Generator().manual_seed(0)
    same = torch.randn(2, 3, 32, 32, generator=rng)
    # the trained size, no interpolation: transformers' own positions, bit for bit
    tokens = _tokens(model_type, model, same)
    np.testing.assert_array_equal(np.asarray(pos(tokens)), _reference(model, same, False))
    np.testing.assert_array_equal(np.asarray(lin.apply(variables, tokens)), np.asarray(pos(tokens)))
    for h, w in ((48, 48), (40, 24)):
        pixels = torch.randn(2, 3, h, w, generator=rng)
        tokens = _tokens(model_type, model, pixels)
        ref = _reference(model, pixels, True)
        ours = nnx.jit(lambda m, t, g=(h // 8, w // 8): m(t, grid=g, interpolate=True))(pos, tokens)
        _close(ours, ref)
        _close(np.asarray(lin.apply(variables, tokens, image_size=(h, w), interpolate=True)), ref)
        # without interpolation both refuse the other grid
        with pytest.raises(PositionLimitError, match=r"holds a 4 x 4 grid of patches"):
            pos(tokens, grid=(h // 8, w // 8))
        with pytest.raises((ValueError, RuntimeError)):
            _reference(model, pixels, False)


def test_interpolating_module_and_vmap(vision):
    model, path = vision["vit"]
    pos = fp.nnx.PatchPositionalEmbedding.from_pretrained(path, interpolate=True)
    pixels = torch.randn(3, 3, 48, 48, generator=torch.Generator().manual_seed(1))
    tokens = _tokens("vit", model, pixels)
    ref = _reference(model, pixels, True)
    _close(np.asarray(pos(tokens)), ref)  # 37 tokens: a square 6 x 6 grid, resized by the module's own flag
    one = jax.jit(jax.vmap(lambda t: pos(t)))(jnp.asarray(tokens))  # (37, dim) per example
    _close(np.asarray(one), ref)


def test_position_limit_error_names_the_trained_grid(vision):
    _, path = vision["deit"]
    pos = fp.nnx.PatchPositionalEmbedding.from_pretrained(path)
    with pytest.raises(PositionLimitError) as e:
        pos(jnp.zeros((1, 2 + 64, 16)))
    assert str(e.value) == (
        "deit position grid (embeddings.position_embeddings) holds a 4 x 4 grid of patches + class and distillation tokens "
        "(18 positions); asked for a 8 x 8 grid (66 positions): pass interpolate=True to resize it (fp.resize_grid)"
    )


@pytest.mark.parametrize(
    "kwargs,line",
    [
        (
            dict(x=jnp.zeros((1, 21, 16))),
            "x: expected 1 prefix tokens + a square grid of patches for the position grid (or pass grid=(gh, gw)), found 21 tokens",
        ),
        (
            dict(x=jnp.zeros((1, 21, 16)), grid=(3, 3)),
            "grid: expected 3 x 3 = 9 patches after 1 prefix tokens, found 20 (21 tokens)",
        ),
        (dict(x=jnp.zeros((1, 17, 8))), "x: expected width 16 (the position grid's), found shape (1, 17, 8)"),
        (
            dict(x=jnp.zeros((1, 17, 16)), image_size=30),
            "image_size: expected image_size divisible by patch_size 8, found 30 x 30 px",
        ),
    ],
)
def test_module_bad_input_is_one_line(kwargs, line):
    pos = fp.nnx.PatchPositionalEmbedding.from_arguments((4, 4), 16, patch_size=8, rngs=nnx.Rngs(0))
    x = kwargs.pop("x")
    with pytest.raises(ValueError) as e:
        pos(x, **kwargs)
    assert str(e.value) == line


def test_sharded_by_logical_axes_on_eight_devices():
    script = Path(__file__).parent / "scripts" / "sharded_grid.py"
    # helpers.FAST_XLA: the checks are within 1e-6 (the programs compile in a fraction of the time)
    env = fast_xla_env(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["devices"] == 8
    for framework in ("nnx", "linen"):
        assert r[framework]["param_spec"] == "P(None, 'model')", r
        assert r[framework]["out_spec"] == "P('data', None, 'model')", r
        assert r[framework]["max_abs_diff"] <= 1e-6, r
