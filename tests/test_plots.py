"""flax_posenc.report.plots: files written, titles and labels, downsampling announced."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import sinusoid

from flax_posenc.conversion.table import PositionTable
from flax_posenc.report import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _titles(fig) -> str:
    sup = fig.get_suptitle() if hasattr(fig, "get_suptitle") else (fig._suptitle.get_text() if fig._suptitle else "")
    return " ".join([sup, *(ax.get_title() for ax in fig.axes)]).replace("\n", " ")


def test_plot_all_writes_four_labelled_pngs(tmp_path, figures):
    table = PositionTable(
        np.vstack([np.zeros((2, 16)), sinusoid(64, 16)]), family="roberta", key="pos", offset=2, source="toy-source"
    )
    paths = plots.plot_all(table, tmp_path / "new" / "dir", dims=[0, 3])
    assert [p.name for p in paths] == ["heatmap.png", "waves.png", "similarity_vs_offset.png", "similarity_matrix.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG_MAGIC
    for fig in figures:
        assert "toy-source" in _titles(fig) and "limit 64 positions" in _titles(fig)
        main_ax = fig.axes[-1] if len(fig.axes) > 1 and fig.axes[-1].get_xlabel() else fig.axes[0]
        assert main_ax.get_xlabel()
    heat = figures[0].axes[0]
    assert (heat.get_xlabel(), heat.get_ylabel()) == ("position", "dimension")
    # the heatmap shows the 64 usable positions, not the reserved rows
    assert heat.get_images()[0].get_array().shape == (16, 64)
    waves = figures[1]
    assert [ax.get_ylabel().splitlines()[0] for ax in waves.axes] == ["dim 0", "dim 3"]
    assert waves.axes[0].get_ylabel().splitlines()[1] == "λ≈6.283"
    assert waves.axes[0].get_ylim() == (-1.05, 1.05) == waves.axes[1].get_ylim()
    off = figures[2].axes[0]
    assert off.get_xlabel().startswith("offset k (positions); stops at 32 pairs") and "similarity" in off.get_ylabel()


def test_downsampling_is_announced(tmp_path, figures):
    big = np.random.default_rng(0).normal(size=(5000, 1500))
    with pytest.warns(plots.DownsampledWarning, match="1 in 3 of 5000 positions"):
        plots.plot_heatmap(big, tmp_path / "h.png")
    title = _titles(figures[-1])
    assert "downsampled" in title and "1 in 2 of 1500 dims" in title
    with pytest.warns(plots.DownsampledWarning, match="1 in 2 of 5000 positions, block-averaged over 8 x 8"):
        plots.plot_similarity_matrix(big[:, :8], tmp_path / "m.png")
    assert figures[-1].axes[0].get_images()[0].get_array().shape == (313, 313)


def test_no_warning_for_small_tables(tmp_path, recwarn):
    plots.plot_all(sinusoid(32, 8), tmp_path)
    assert not [w for w in recwarn if issubclass(w.category, plots.DownsampledWarning)]


def test_bad_dims(tmp_path):
    with pytest.raises(ValueError, match=r"0\.\.7"):
        plots.plot_waves(sinusoid(16, 8), tmp_path / "w.png", dims=[0, 8])


def test_default_dims():
    assert plots.default_dims(768) == [0, 1, 50, 100, 767]
    assert plots.default_dims(8) == [0, 1, 4, 7]
    assert plots.default_dims(1) == [0]


def test_matplotlib_is_lazy_and_pyplot_untouched(tmp_path):
    code = (
        "import sys, numpy as np\n"
        "from flax_posenc import plots\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported eagerly'\n"
        f"plots.plot_heatmap(np.ones((4, 4)), {str(tmp_path / 'x.png')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("metric", ["cosine", "dot"])
@pytest.mark.parametrize("rows", [7, 64, 1000])
def test_block_similarity_equals_the_mean_of_every_pair(metric, rows):
    """The block-averaged matrix (block sums, S S^T) equals the brute-force float64 mean of every
    pair's similarity over each block (the last block holding the remainder)."""
    from flax_posenc.report.plots import block_similarity

    x = np.random.default_rng(rows).standard_normal((rows, 24))
    x[3] = 0.0  # a zero row: cosine 0 with everything
    got, b = block_similarity(x, metric, blocks=5)
    y = x / np.where(np.linalg.norm(x, axis=1, keepdims=True) > 0, np.linalg.norm(x, axis=1, keepdims=True), 1)
    full = (y if metric == "cosine" else x) @ (y if metric == "cosine" else x).T
    edges = list(range(0, rows, b)) + [rows]
    pairs = list(zip(edges, edges[1:]))
    expected = np.array([[full[i:j, k:m].mean() for k, m in pairs] for i, j in pairs])
    assert b == -(-rows // 5) and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
