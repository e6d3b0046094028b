"""Every figure kind rendered and checked: PNG size, non-blank pixels, titles inside the canvas.

Plus what each figure promises (issue 15): model names in titles, "randomly initialised" on the
figure, a block-averaged similarity matrix with a continuous diagonal, exact wavelengths and a
fixed y-range in the waves, pair counts in similarity-vs-offset, one ALiBi colour scale and a
legend, no distance 0 on the RoPE log axis, and one file naming scheme.
"""

from __future__ import annotations

import json
import struct
import warnings

import numpy as np
import pytest

from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.conversion import load_position_table
from flax_posenc.conversion.table import PositionTable
from flax_posenc.report import plots
from flax_posenc.rope_config import RopeConfig


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def check_rendered(fig, path):
    """The PNG is the figure's size, not blank, and every title lies inside the canvas."""
    w, h = png_size(path)
    assert (w, h) == (round(fig.get_figwidth() * 100), round(fig.get_figheight() * 100))
    from matplotlib.image import imread

    pixels = imread(str(path))[..., :3]
    assert (pixels.std(axis=(0, 1)) > 0.02).all() and (pixels < 0.9).mean() > 0.02  # ink on the page
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    texts = [fig._suptitle] + [ax.title for ax in fig.axes]
    for text in texts:
        if text is None or not text.get_text():
            continue
        box = text.get_window_extent(renderer)
        assert box.x0 >= canvas.x0 - 1 and box.x1 <= canvas.x1 + 1, (text.get_text(), box, canvas)
        assert box.y0 >= canvas.y0 - 1 and box.y1 <= canvas.y1 + 1, (text.get_text(), box, canvas)
    # the figure title does not overlap any axes (the colourbar included)
    if fig._suptitle is not None:
        title_box = fig._suptitle.get_window_extent(renderer)
        for ax in fig.axes:
            assert not title_box.overlaps(ax.get_window_extent(renderer)), fig._suptitle.get_text()


def checkpoint_dir(tmp_path, name, config, *, random_init=False, rows=200, dim=16):
    d = tmp_path / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    if random_init:
        (d / plots.RANDOM_INIT_MARKER).write_text("random init")
    from safetensors.numpy import save_file

    weights = np.random.default_rng(0).normal(size=(rows, dim)).astype(np.float32)
    save_file(
        {"transformer.wpe.weight": weights, "transformer.wte.weight": np.zeros((4, dim), np.float32)},
        str(d / "model.safetensors"),
    )
    return d


def test_every_figure_kind_renders(tmp_path, figures):
    long_path = tmp_path / ("a-rather-long-directory-name-" * 3) / "model"
    ckpt = checkpoint_dir(
        long_path.parent,
        "model",
        {"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_positions": 200},
        random_init=True,
    )
    table = load_position_table(str(ckpt))
    paths = plots.plot_all(table, tmp_path / "out")
    paths += [
        plots.plot_rope_decay(
            RopeConfig(head_dim=64, max_position_embeddings=4096), plots.figure_path(tmp_path / "out", "rope_decay")
        ),
        plots.plot_rope_offset_invariance(
            RopeConfig(head_dim=16), plots.figure_path(tmp_path / "out", "rope_offset_invariance"), length=64
        ),
        plots.plot_alibi_bias(AlibiConfig(12), plots.figure_path(tmp_path / "out", "alibi_bias"), length=32),
    ]
    assert [p.name for p in paths] == [f"{k}.png" for k in (*plots.TABLE_FIGURES, *plots.RELATIVE_FIGURES)]
    assert len(figures) == len(paths)
    for fig, path in zip(figures, paths):
        check_rendered(fig, path)
    check_offset_stops_where_pairs_are_few(figures[2], rows=200)
    check_rope_decay_has_no_distance_zero(figures[4])
    check_alibi_one_colour_scale_and_legend(figures[6], heads=12)
    for fig in figures[:4]:  # a random-init checkpoint says so, and is named, not pathed
        title = fig._suptitle.get_text()
        assert title.startswith("RANDOMLY INITIALISED") and "NOT pretrained" in title
        assert (
            "a-rather-long-directory-name-a-rather-long-directory-name-a-rather-long-directory-name- (gpt2, 1 layer x 16)"
            in title.replace("\n", " ")
            or "(gpt2, 1 layer x 16)" in title
        )
        assert str(tmp_path) not in title and "..." not in title


def test_model_names(tmp_path):
    hub = tmp_path / "hub" / "models--org--tiny-bert" / "snapshots" / ("a" * 40)
    hub.mkdir(parents=True)
    (hub / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 32}))
    assert plots.model_name(str(hub)) == ("org/tiny-bert (bert, 2 layers x 32)", False)
    named = tmp_path / "x" / "model"
    named.mkdir(parents=True)
    (named / "config.json").write_text(
        json.dumps({"_name_or_path": "nreimers/MiniLM-L6-H384-uncased", "model_type": "bert"})
    )
    (named / "model.safetensors").write_bytes(b"")
    assert plots.model_name(str(named / "model.safetensors")) == ("nreimers/MiniLM-L6-H384-uncased (bert)", False)
    local = tmp_path / "my-run" / "checkpoint"
    local.mkdir(parents=True)
    (local / "config.json").write_text(
        json.dumps({"_name_or_path": "/tmp/elsewhere", "model_type": "gpt2", "n_layer": 12, "n_embd": 768})
    )
    (local / plots.RANDOM_INIT_MARKER).write_text("x")
    assert plots.model_name(str(local)) == ("my-run (gpt2, 12 layers x 768)", True)
    assert plots.model_name("sinusoidal:64:8") == ("sinusoidal:64:8", False)


def test_similarity_matrix_is_block_averaged_with_a_continuous_diagonal(tmp_path, figures):
    x = np.random.default_rng(1).normal(size=(960, 128))
    with pytest.warns(plots.DownsampledWarning, match="block-averaged over 3 x 3 positions"):
        plots.plot_similarity_matrix(x, tmp_path / "m.png")
    shown = figures[-1].axes[0].get_images()[0].get_array()
    b = 3  # 960 rows > MATRIX_BLOCKS = 320: 3 x 3 positions a cell
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    ref = (u @ u.T).reshape(320, b, 320, b).mean(axis=(1, 3))  # float64 reference block mean
    assert shown.shape == (320, 320) and np.abs(np.asarray(shown) - ref).max() < 1e-12
    diagonal = np.diagonal(np.asarray(shown))
    off = np.asarray(shown)[~np.eye(320, dtype=bool)]
    assert diagonal.min() > 0.2 > np.abs(off).max()  # each diagonal cell: 1/b from its b self-similarities
    assert "block-averaged over 3 x 3" in figures[-1]._suptitle.get_text()


def test_waves_exact_wavelength_fixed_range_and_no_aliasing(tmp_path, figures):
    plots.plot_waves(load_position_table("sinusoidal:1024:64"), tmp_path / "w.png", dims=[0, 63])
    fast, slow = figures[-1].axes
    w63 = 2 * np.pi * 10000 ** (62 / 64)
    assert (
        fast.get_ylabel().splitlines()[1] == f"λ={2 * np.pi:.6g}"
        and slow.get_ylabel().splitlines()[1] == f"λ={w63:.6g}"
    )
    assert "λ>" not in fast.get_ylabel() + slow.get_ylabel()
    assert fast.get_ylim() == slow.get_ylim() == (-1.05, 1.05)
    assert not fast.get_lines() and fast.collections  # the 6.3-position wave is an envelope, not a line
    assert slow.get_lines()


def check_offset_stops_where_pairs_are_few(fig, rows):
    mean_line = fig.axes[0].get_lines()[0]
    assert mean_line.get_xdata().max() == rows - plots.MIN_PAIRS
    counts = fig.axes[1].get_lines()[0]  # the pair counts, on the right axis
    assert np.array_equal(counts.get_ydata(), rows - counts.get_xdata())


def check_alibi_one_colour_scale_and_legend(fig, heads):
    clims = {im.get_clim() for ax in fig.axes for im in ax.get_images()}
    assert len(clims) == 1
    assert sum(1 for ax in fig.axes if ax.get_label() == "<colorbar>") == 1
    lines_ax = [ax for ax in fig.axes if ax.get_legend() is not None][0]
    labels = [t.get_text() for t in lines_ax.get_legend().get_texts()]
    assert len(lines_ax.get_lines()) == heads and labels[0].startswith("head 0 (slope")


def check_rope_decay_has_no_distance_zero(fig):
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    xs = np.concatenate([line.get_xdata() for line in ax.get_lines() if len(line.get_xdata()) > 2])
    assert xs.min() == 1


def test_one_naming_scheme(tmp_path):
    assert plots.figure_path(tmp_path, "waves") == tmp_path / "waves.png"
    with pytest.raises(ValueError, match="kind: expected one of"):
        plots.figure_path(tmp_path, "wave")


def drawn_texts(fig):
    """The figure's title and every drawn label: axis labels, offset texts and the tick labels of
    ticks inside the view (legends left out: they sit inside their axes)."""
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text()]
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            slack = 1e-9 * (hi - lo)
            for tick in axis.get_major_ticks():
                if lo - slack <= tick.get_loc() <= hi + slack:
                    texts += [tick.label1, tick.label2]
    return [t for t in texts if t.get_visible() and t.get_text()]


def check_labels_apart(fig):
    """Every label inside the canvas, outside every axes (colourbars included), and no two labels overlapping."""
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    boxes = []
    for text in drawn_texts(fig):
        b = text.get_window_extent(renderer)
        assert b.x0 >= canvas.x0 - 1 and b.x1 <= canvas.x1 + 1, (text.get_text(), b, canvas)
        assert b.y0 >= canvas.y0 - 1 and b.y1 <= canvas.y1 + 1, (text.get_text(), b, canvas)
        inner = b.expanded(1, 1).padded(-0.5)  # half a pixel in: touching is not overlapping
        for ax in fig.axes:
            assert not inner.overlaps(ax.get_window_extent(renderer)), (text.get_text(), b, ax)
        boxes.append((text.get_text(), inner))
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1 :]:
            assert not box_a.overlaps(box_b), (a, b)


@pytest.mark.parametrize(
    "name, values, dims",
    [
        ("tiny", np.arange(32.0).reshape(8, 4) / 31, None),  # 8 positions: few ticks
        ("wide-ticks", np.random.default_rng(1).normal(scale=4e4, size=(300, 40)), None),  # "-100000"
        ("offset-text", np.random.default_rng(2).normal(scale=3e-7, size=(200, 12)), None),  # "1e-7" above
        ("many-dims", np.random.default_rng(3).normal(size=(2000, 300)), list(range(0, 300, 25))),  # 12 panels
    ],
)
def test_table_figures_keep_labels_apart(tmp_path, figures, name, values, dims):
    """The four table figures are laid out with fixed margins fitted to their labels (issue 38):
    nothing is clipped, covered or overlapping, whatever the tick labels' widths."""
    table = PositionTable(values, family="learned", key="wpe", source=name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.DownsampledWarning)
        paths = plots.plot_all(table, tmp_path, dims=dims)
    downsampled = [w for w in caught if issubclass(w.category, plots.DownsampledWarning)]
    assert bool(downsampled) == (len(values) > 1024), [str(w.message) for w in downsampled]  # 2000 rows: averaged
    assert len(figures) == 4
    for fig, path in zip(figures, paths):
        check_rendered(fig, path)
        check_labels_apart(fig)
