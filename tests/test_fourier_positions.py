"""SAM's random Fourier positional encoding: ``fp.fourier_positions`` against float64 numpy and
against each model's own positional embedding class (SAM, SAM-HQ, SAM 2, SAM 2 video, EdgeTAM,
EdgeTAM video, SAM 3 tracker and tracker video): points in [0, 1], pixel points with
``input_shape``, and the image-wide cell centres of ``get_image_wide_positional_embeddings``."""

from __future__ import annotations

import importlib

import jax
import numpy as np
import pytest
import torch

import flax_posenc as fp
from flax_posenc.fourier_encoding import fourier_positions_float64, image_wide_coordinates

#: (modeling module, class, config class, config kwargs): every shared positional embedding of the SAM family.
CLASSES = [
    ("sam", "SamPositionalEmbedding", "SamVisionConfig", {"num_pos_feats": 16}),
    ("sam_hq", "SamHQPositionalEmbedding", "SamHQVisionConfig", {"num_pos_feats": 16}),
    ("sam2", "Sam2PositionalEmbedding", "Sam2PromptEncoderConfig", {"hidden_size": 32}),
    ("sam2_video", "Sam2VideoPositionalEmbedding", "Sam2VideoPromptEncoderConfig", {"hidden_size": 32}),
    ("edgetam", "EdgeTamPositionalEmbedding", "EdgeTamPromptEncoderConfig", {"hidden_size": 32}),
    ("edgetam_video", "EdgeTamVideoPositionalEmbedding", "EdgeTamVideoPromptEncoderConfig", {"hidden_size": 32}),
    ("sam3_tracker", "Sam3TrackerPositionalEmbedding", "Sam3TrackerPromptEncoderConfig", {"hidden_size": 32}),
    (
        "sam3_tracker_video",
        "Sam3TrackerVideoPositionalEmbedding",
        "Sam3TrackerVideoPromptEncoderConfig",
        {"hidden_size": 32},
    ),
]

#: float32 sin/cos: transformers' and ours, each within this many ulps of 1 times (1 + m), m the angle's
#: magnitude before cancellation (2 pi |2c - 1| @ |G|: SAM's scale is hidden_size / 2, so the two
#: products are large and their float32 roundings, not the angle's size, set the error).
ULPS = 8


def _tolerance(coords, gaussian, shape=None):
    c = np.asarray(coords, np.float64) / (np.array([shape[1], shape[0]]) if shape else 1)
    m = 2 * np.pi * (np.abs(2 * c - 1) @ np.abs(np.asarray(gaussian, np.float64)))
    return ULPS * 2.0**-23 * (1 + np.concatenate([m, m], -1))


@pytest.mark.parametrize(("package", "name", "config", "kwargs"), CLASSES, ids=[c[0] for c in CLASSES])
def test_equals_the_models_own_class(package, name, config, kwargs):
    modeling = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    configuration = importlib.import_module(f"transformers.models.{package}.configuration_{package}")
    torch.manual_seed(0)
    module = getattr(modeling, name)(getattr(configuration, config)(**kwargs))
    gaussian = module.positional_embedding.detach().numpy()
    rng = np.random.default_rng(0)
    points = rng.uniform(0, 1, (1, 3, 5, 2)).astype(np.float32)
    pixels = (points * np.array([640, 480], np.float32)).astype(np.float32)
    grid = image_wide_coordinates(8).astype(np.float32)
    for coords, shape in ((points, None), (pixels, (480, 640)), (grid[None, None], None)):
        with torch.no_grad():
            theirs = module(torch.from_numpy(coords), shape).double().numpy()
        ours = np.asarray(
            jax.jit(fp.fourier_positions, static_argnames="input_shape")(coords, gaussian, input_shape=shape)
        )
        ref = fourier_positions_float64(coords, gaussian, shape)
        tol = _tolerance(coords, gaussian, shape)
        assert ours.shape == theirs.shape == ref.shape
        assert (np.abs(theirs - ref) <= tol).all() and (np.abs(ours - ref) <= tol).all()


def test_image_wide_coordinates_are_sams():
    from transformers import SamConfig, SamModel

    config = SamConfig(
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_pos_feats": 16,
            "output_channels": 32,
            "image_size": 64,
            "patch_size": 16,
            "global_attn_indexes": [0],
        },
        prompt_encoder_config={"hidden_size": 32, "image_size": 64, "patch_size": 16},
        mask_decoder_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "mlp_dim": 32},
    )
    torch.manual_seed(0)
    model = SamModel(config).eval()
    with torch.no_grad():
        theirs = model.get_image_wide_positional_embeddings()[0].permute(1, 2, 0).double().numpy()
    gaussian = model.shared_image_embedding.positional_embedding.detach().numpy()
    ref = fourier_positions_float64(image_wide_coordinates(4), gaussian)
    assert theirs.shape == ref.shape == (4, 4, 32)
    assert (np.abs(theirs - ref) <= _tolerance(image_wide_coordinates(4), gaussian)).all()


def test_bad_input_one_line_each():
    with pytest.raises(ValueError) as e:
        fp.fourier_positions(np.zeros((4, 3)), np.zeros((2, 8)))
    assert str(e.value) == "coords: expected (..., 2) points (x, y), found shape (4, 3)"
    with pytest.raises(ValueError) as e:
        fp.fourier_positions(np.zeros((4, 2)), np.zeros((8, 2)))
    assert str(e.value) == "gaussian: expected a (2, F) matrix (positional_embedding), found shape (8, 2)"
    with pytest.raises(ValueError) as e:
        image_wide_coordinates(0)
    assert str(e.value) == "size: expected a side in 1..32768 cells, found 0"
