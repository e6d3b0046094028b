"""The grid-similarity figures (Dosovitskiy et al., Figure 7) and examples/vit_grid.py render."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from grid_checkpoints import build

from flax_posenc.conversion import load_grid_table
from flax_posenc.report import plots

PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[1]


def _reference_similarity(patches):
    """float64 cosine similarity of every pair of patches, written out pair by pair."""
    gh, gw, _ = patches.shape
    out = np.empty((gh, gw, gh, gw))
    for i in range(gh):
        for j in range(gw):
            for k in range(gh):
                for m in range(gw):
                    a, b = patches[i, j], patches[k, m]
                    out[i, j, k, m] = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    return out


def test_grid_cosine_similarity_against_pairwise_formula():
    patches = np.random.default_rng(0).standard_normal((3, 4, 5))
    np.testing.assert_allclose(plots.grid_cosine_similarity(patches), _reference_similarity(patches), atol=1e-14)


def test_grid_figures_render_and_say_random(tmp_path, figures):
    path = tmp_path / "vit"
    build("vit", path)
    (path / plots.RANDOM_INIT_MARKER).write_text("random\n")
    grid = load_grid_table(path)
    a = plots.plot_grid_similarity(grid, tmp_path / "sim.png")
    b = plots.plot_grid_resize(grid, 48, tmp_path / "resize.png")
    assert a.read_bytes()[:8] == PNG and b.read_bytes()[:8] == PNG
    sim, resize = figures
    for fig in figures:
        assert fig.get_suptitle().startswith("RANDOMLY INITIALISED weights")
        assert "a 4 x 4 grid of patches + 1 class token (17 positions; 32 px / 8)" in fig.get_suptitle().replace(
            "\n", " "
        )
    # the mosaic: the small map at row i, column j is patch (i, j)'s similarity to every patch
    image = sim.axes[0].get_images()[0].get_array()
    expected = _reference_similarity(grid.patches.astype(np.float64))
    assert image.shape == (4 * 5 - 1, 4 * 5 - 1)
    np.testing.assert_allclose(np.asarray(image[5:9, 10:14]), expected[1, 2], atol=1e-12)
    panels = [ax for ax in resize.axes if ax.get_images()]
    assert [ax.get_title() for ax in panels] == ["trained: 4 x 4 patches", "resized to 6 x 6 (torch_bicubic)"]
    assert panels[1].get_images()[0].get_array().shape == (6 * 7 - 1, 6 * 7 - 1)


def test_large_grid_is_sampled_and_says_so(tmp_path, figures):
    patches = np.random.default_rng(1).standard_normal((40, 40, 4))
    with pytest.warns(plots.DownsampledWarning, match="every 2th patch of 40 x 40"):
        plots.plot_grid_similarity(patches, tmp_path / "big.png")
    assert "[downsampled: every 2th patch of 40 x 40]" in figures[0].get_suptitle()


def test_bad_grid_is_one_line(tmp_path):
    with pytest.raises(
        ValueError, match=r"^grid: expected a GridTable or a \(gh, gw, dim\) array, found shape \(3, 4\)$"
    ):
        plots.plot_grid_similarity(np.zeros((3, 4)), tmp_path / "x.png")


def test_example_writes_its_three_figures(tmp_path):
    spec = importlib.util.spec_from_file_location("example_vit_grid", ROOT / "examples" / "vit_grid.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    paths = module.main(["--out", str(tmp_path)])
    assert [p.name for p in paths] == ["vit_grid_similarity.png", "vit_grid_resize.png", "vit_grid_mae_sincos.png"]
    assert all(p.parent == tmp_path and p.read_bytes()[:8] == PNG for p in paths)


def test_cli_plot_draws_the_grid_and_the_text_table(tmp_path):
    from flax_posenc.report.cli import main

    path = tmp_path / "clip"
    build("clip", path)
    assert main(["plot", str(path), "--out", str(tmp_path / "figs")]) == 0
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert "2_grid_grid_similarity.png" in names and "1_learned_heatmap.png" in names
