"""NaFlex grids (SigLIP 2, LFM2-VL): fp.naflex_positions against float64 torch and transformers'
own float32 resize, the processor's image size, the reader's patch budget, the CLI, bad input."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
import torch

import flax_posenc as fp
from flax_posenc.conversion import inspect_source, load_naflex_grid
from flax_posenc.errors import CheckpointError, PositionLimitError
from flax_posenc.naflex_config import naflex_spatial_shape
from flax_posenc.report.cli import main

#: image patch grids of several aspect ratios under a budget of 64 (a 4 x 4 learned grid: up and down)
SHAPES = [(4, 4), (8, 8), (4, 16), (16, 4), (3, 7), (7, 3), (1, 1), (1, 64), (2, 5)]
BUDGET = 64
#: convention -> (torch mode, padding rows)
TORCH = {"siglip2": ("bilinear", "first"), "timm": ("bicubic", "zeros"), "timm_siglip": ("bilinear", "zeros")}


def _grid(seed=0, g=4, dim=6):
    return np.random.default_rng(seed).standard_normal((g * g, dim)).astype(np.float32)


def _torch_f64(table, shape, budget, convention):
    """The float64 reference: torch's F.interpolate(antialias=True) in float64, padded as the convention says."""
    mode, padding = TORCH[convention]
    g = int(np.sqrt(table.shape[0]))
    x = torch.from_numpy(table.astype(np.float64)).reshape(g, g, -1).permute(2, 0, 1)[None]
    r = torch.nn.functional.interpolate(x, size=shape, mode=mode, align_corners=False, antialias=True)
    r = r[0].permute(1, 2, 0).reshape(shape[0] * shape[1], -1).numpy()
    pad = budget - r.shape[0]
    fill = np.repeat(r[:1], pad, 0) if padding == "first" else np.zeros((pad, r.shape[1]))
    return np.concatenate([r, fill])


def _ulps(ours, ref, table):
    return float(np.abs(np.asarray(ours, np.float64) - ref).max() / np.spacing(np.float32(np.abs(table).max())))


@pytest.mark.parametrize("convention", list(TORCH))
def test_positions_within_a_few_ulps_of_float64_torch(convention):
    table = _grid()
    ours = jax.jit(lambda t: fp.naflex_positions(t, SHAPES, max_num_patches=BUDGET, convention=convention))(table)
    assert ours.shape == (len(SHAPES), BUDGET, table.shape[1]) and ours.dtype == np.float32
    for i, shape in enumerate(SHAPES):
        assert _ulps(ours[i], _torch_f64(table, shape, BUDGET, convention), table) <= 4, shape


def test_equals_transformers_siglip2_resize_in_float32():
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

    table = _grid(1)
    theirs = Siglip2VisionEmbeddings.resize_positional_embeddings(
        torch.from_numpy(table).reshape(4, 4, -1), torch.tensor(SHAPES), BUDGET
    ).numpy()
    ours = np.asarray(fp.naflex_positions(table, SHAPES, max_num_patches=BUDGET))  # default: siglip2
    assert _ulps(ours, theirs.astype(np.float64), table) <= 8
    # one shape alone: (budget, dim), the same rows; a (gh, gw, dim) grid reads alike
    one = fp.naflex_positions(table.reshape(4, 4, -1), (3, 7), max_num_patches=BUDGET, convention="lfm2_vl")
    np.testing.assert_array_equal(np.asarray(one), ours[SHAPES.index((3, 7))])
    # timm's bicubic is not transformers' bilinear: the rows drift (the reason both are named)
    timm = np.asarray(fp.naflex_positions(table, [(8, 8)], max_num_patches=BUDGET, convention="timm"))
    assert _ulps(timm[0, :64], theirs[SHAPES.index((8, 8)), :64].astype(np.float64), table) > 1000


@pytest.mark.parametrize(
    "size,budget", [((480, 640), 256), ((100, 3000), 256), ((1, 1), 256), ((4000, 4000), 1024), ((17, 33), 64)]
)
def test_processor_image_size_equals_transformers(size, budget):
    from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches

    assert fp.naflex_image_size(*size, 16, budget) == get_image_size_for_max_num_patches(*size, 16, budget)


@pytest.mark.parametrize(
    "call,error,line",
    [
        (
            lambda: fp.naflex_positions(_grid(), (4, 4), max_num_patches=0),
            ValueError,
            "max_num_patches: expected a patch budget (a positive integer up to 4194304), found 0",
        ),
        (
            lambda: fp.naflex_positions(_grid(), (8, 9), max_num_patches=BUDGET),
            PositionLimitError,
            "the patch budget (max_num_patches) holds 64 patches per image; asked for 8 x 9 = 72 patches",
        ),
        (
            lambda: fp.naflex_positions(_grid(), (0, 4), max_num_patches=BUDGET),
            ValueError,
            "spatial_shape: expected (height, width) in patches, each 1..65536, found (0, 4)",
        ),
        (
            lambda: fp.naflex_positions(np.zeros((15, 2), np.float32), (2, 2), max_num_patches=BUDGET),
            ValueError,
            "grid: expected a (g * g, dim) table of a square grid, found 15 rows",
        ),
        (
            lambda: naflex_spatial_shape((64, 70), 16, 256),
            CheckpointError,
            "image_size: expected image_size divisible by patch_size 16, found 64 x 70 px",
        ),
        (
            lambda: naflex_spatial_shape((512, 512), 16, 256),
            PositionLimitError,
            "the patch budget (max_num_patches) holds 256 patches per image; a 512 x 512 px image gives 32 x 32 = 1024 patches",
        ),
        (
            lambda: jax.jit(lambda s: fp.naflex_positions(_grid(), s, max_num_patches=BUDGET))(np.array([2, 2])),
            ValueError,
            "spatial_shapes: expected static (height, width) patch counts, found a traced array",
        ),
    ],
)
def test_bad_input_is_one_line(call, error, line):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == line


@pytest.fixture(scope="module")
def siglip2(tmp_path_factory):
    """A tiny SigLIP 2 vision tower built by transformers: a 4 x 4 grid of 4 px patches."""
    from transformers import Siglip2VisionConfig, Siglip2VisionModel

    config = Siglip2VisionConfig(
        hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, num_patches=16, patch_size=4
    )
    torch.manual_seed(0)
    model = Siglip2VisionModel(config).eval()
    path = tmp_path_factory.mktemp("siglip2")
    model.save_pretrained(path)
    return model, path


def test_reader_and_budget_sources(siglip2, tmp_path):
    model, path = siglip2
    table = load_naflex_grid(path)
    np.testing.assert_array_equal(table.weights, model.get_parameter(table.key).detach())
    assert table.grid == (4, 4) and table.patch_size == (4, 4) and table.max_num_patches == 256
    assert table.budget_source == "the Siglip2ImageProcessor default"
    copy = tmp_path / "c"
    shutil.copytree(path, copy)
    (copy / "preprocessor_config.json").write_text(json.dumps({"max_num_patches": 576}))
    assert load_naflex_grid(copy).max_num_patches == 576
    # LFM2-VL's processor: max(max_image_tokens * downsample_factor**2, (tile_size // encoder_patch_size)**2)
    lfm = {"max_image_tokens": 64, "downsample_factor": 2, "tile_size": 512, "encoder_patch_size": 16}
    (copy / "preprocessor_config.json").write_text(json.dumps({**lfm, "do_image_splitting": False}))
    assert load_naflex_grid(copy).max_num_patches == 256
    (copy / "preprocessor_config.json").write_text(json.dumps(lfm))
    assert load_naflex_grid(copy).max_num_patches == 1024
    (copy / "preprocessor_config.json").write_text(json.dumps({"max_num_patches": 0}))
    with pytest.raises(CheckpointError) as info:
        load_naflex_grid(copy)
    assert str(info.value).endswith(
        "preprocessor_config.json:max_num_patches: expected max_num_patches as a positive integer up to 4194304, found 0"
    )
    rec = inspect_source(path)
    (mech,) = rec.mechanisms
    assert (
        mech.kind == "naflex_grid"
        and mech.tower == "vision"
        and rec.to_dict()["mechanisms"][0]["max_num_patches"] == 256
    )


def test_bad_num_patches_is_one_line(siglip2, tmp_path):
    _, path = siglip2
    copy = tmp_path / "c"
    shutil.copytree(path, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "num_patches": 15}))
    with pytest.raises(CheckpointError) as info:
        inspect_source(copy)
    assert str(info.value).endswith(
        "num_patches: expected num_patches a square number of patches up to 4194304, found 15"
    )


@pytest.mark.parametrize(
    "args,code,line",
    [
        (
            ["--image-size", "32x64"],
            0,
            "a 32 x 64 px image fits: 8 x 16 = 128 patches, the 4 x 4 grid resized to 8 x 16",
        ),
        (["--image-size", "64x128"], 1, "a 64 x 128 px image gives 16 x 32 = 512 patches: the model refuses it; "),
        (
            ["--image-size", "64x128", "--max-num-patches", "512"],
            0,
            "holds 512 patches per image; a 64 x 128 px image fits",
        ),
        (
            ["--image-size", "30"],
            2,
            "--image-size: expected image_size divisible by patch_size 4, found 30 x 30 px",
        ),
        (
            ["--image-size", "32", "--max-num-patches", "0"],
            2,
            "argument --max-num-patches: expected a patch budget (a positive integer up to 4194304), got '0'",
        ),
        (["--length", "5"], 2, "it limits the image size; ask with --image-size PX"),
    ],
)
def test_check_image_size_against_the_budget(siglip2, capsys, args, code, line):
    _, path = siglip2
    assert main(["check", str(path), *args]) == code
    out = capsys.readouterr()
    text = (out.out if code == 0 else out.err).strip()
    assert "\n" not in text and line in text
    if code == 1:  # the size the processor would give it: transformers' own function
        from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches

        h, w = get_image_size_for_max_num_patches(64, 128, 4, 256)
        assert text.endswith(f"resizes it to {h} x {w} px ({h // 4} x {w // 4} patches) first")


def test_figure_is_written(tmp_path):
    table = _grid(dim=4).reshape(4, 4, 4)
    resized = [
        np.asarray(fp.naflex_positions(table, s, max_num_patches=32))[: s[0] * s[1]].reshape(*s, 4)
        for s in ((2, 8), (6, 3))
    ]
    path = fp.plots.plot_naflex_grid(table, resized, tmp_path / "naflex.png", random_init=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
