"""load_grid_table, inspect_source and the CLI on tiny vision checkpoints built by transformers; bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from grid_checkpoints import MODELS, build, embeddings_module, prefix_tokens, torch_position_grid

import flax_posenc as fp
from flax_posenc.conversion import CheckpointError, inspect_source, load_grid_table
from flax_posenc.report.cli import main


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid_reader")
    return {t: (build(t, root / t), root / t) for t in MODELS}


def _copy(path, tmp_path, **config_changes):
    """A copy of a checkpoint with config.json fields changed (``vision_config`` dicts merged)."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(path, out)
    config = json.loads((out / "config.json").read_text())
    for key, value in config_changes.items():
        if isinstance(value, dict):
            config[key].update(value)
        else:
            config[key] = value
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_load_grid_table_equals_the_model(checkpoints, model_type):
    model, path = checkpoints[model_type]
    table = load_grid_table(path)
    np.testing.assert_array_equal(table.weights, torch_position_grid(model).astype(np.float32))
    assert table.grid == (4, 4) and table.prefix_tokens == prefix_tokens(model_type)
    assert table.patch_size == (8, 8) and table.image_size == (32, 32) and table.model_type == model_type
    assert table.patches.shape == (4, 4, 16) and table.prefix.shape == (prefix_tokens(model_type), 16)
    # the model's own patch count: the sequence its patch projection yields (+ prefix) is the table's rows
    emb = embeddings_module(model)
    patches = emb.patch_embeddings.num_patches if hasattr(emb, "patch_embeddings") else emb.num_patches
    assert patches == table.grid[0] * table.grid[1]


@pytest.mark.parametrize(
    "model_type,kinds,text_rows",
    [
        ("vit", ["grid"], None),
        ("deit", ["grid"], None),
        ("clip", ["learned", "grid"], 77),
        ("siglip", ["learned", "grid"], 64),
    ],
)
def test_inspect_source_reports_a_grid_mechanism(checkpoints, model_type, kinds, text_rows):
    model, path = checkpoints[model_type]
    record = inspect_source(path)
    assert [m.kind for m in record.mechanisms] == kinds
    grid = record.mechanisms[-1]
    assert grid.limit is None and grid.record.table.grid == (4, 4)
    if text_rows is not None:  # the text tower: its own table, the record's limit
        text = record.mechanisms[0]
        np.testing.assert_array_equal(
            text.table.weights, model.text_model.embeddings.position_embedding.weight.detach().numpy()
        )
        assert record.limit == text_rows == text.limit


def test_inspect_text_and_json(checkpoints, capsys):
    _, path = checkpoints["deit"]
    assert main(["inspect", str(path)]) == 0
    assert (
        "a 4 x 4 grid of patches + class and distillation tokens (18 positions; 32 px / 8)" in capsys.readouterr().out
    )
    assert main(["inspect", str(path), "--json"]) == 0
    mech = json.loads(capsys.readouterr().out)["mechanisms"][0]
    assert mech["kind"] == "grid" and mech["grid"] == [4, 4] and mech["prefix_tokens"] == 2
    assert mech["patch_size"] == [8, 8] and mech["image_size"] == [32, 32]
    assert mech["sentence"] == "a 4 x 4 grid of patches + class and distillation tokens (18 positions; 32 px / 8)"


def test_check_image_size(checkpoints, capsys):
    _, path = checkpoints["vit"]
    assert main(["check", str(path), "--image-size", "32"]) == 0
    assert "a 32 px image fits (4 x 4 patches)" in capsys.readouterr().out
    assert main(["check", str(path), "--image-size", "64"]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("a 64 px image needs 8 x 8 patches: the grid must be resized (fp.resize_grid)")
    )
    assert main(["check", str(path), "--image-size", "32x64", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["grid"] == [4, 8] and out["trained_grid"] == [4, 4]


def test_check_clip_length_and_image(checkpoints, capsys):
    _, path = checkpoints["clip"]
    assert main(["check", str(path), "--length", "77", "--image-size", "32"]) == 0
    assert main(["check", str(path), "--length", "78"]) == 1
    capsys.readouterr()


@pytest.mark.parametrize(
    "args,line",
    [
        (["--image-size", "30"], "--image-size: expected image_size divisible by patch_size 8, found 30 x 30 px"),
        (["--image-size", "0"], "argument --image-size: expected a positive integer, got '0'"),
        (["--image-size", "100000"], "--image-size: expected image_size at most 65536, found 100000"),
        (["--length", "5"], "--length: vit position grid"),
        (
            [],
            "expected --length N (tokens), --seconds S (audio), --image-size PX (a vision grid), "
            "--bbox-max N (document boxes) or --steps N (time series)",
        ),
    ],
)
def test_check_bad_input_exits_2_with_one_line(checkpoints, capsys, args, line):
    _, path = checkpoints["vit"]
    assert main(["check", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and line in err


@pytest.mark.parametrize(
    "changes,line",
    [
        (
            {"image_size": 48},
            "expected 37 rows (1 prefix + 6 x 6 patches of image_size 48 / patch_size 8), found 17 rows",
        ),
        ({"patch_size": 7}, "image_size: expected image_size divisible by patch_size 7, found 32 x 32 px"),
        ({"image_size": 0}, "image_size: expected image_size as a positive integer, found 0"),
        ({"image_size": -32}, "image_size: expected image_size as a positive integer, found -32"),
        ({"image_size": 10**9}, "image_size: expected image_size at most 65536, found 1000000000"),
        ({"patch_size": "8"}, "patch_size: expected patch_size as a positive integer, found '8'"),
    ],
)
def test_bad_config_is_one_line_naming_the_field(checkpoints, tmp_path, changes, line):
    _, path = checkpoints["vit"]
    with pytest.raises(CheckpointError) as e:
        load_grid_table(_copy(path, tmp_path, **changes))
    assert "\n" not in str(e.value) and str(e.value).endswith(line)


def test_bad_composite_config_names_the_section(checkpoints, tmp_path):
    _, path = checkpoints["siglip"]
    with pytest.raises(
        CheckpointError, match=r"config.json:vision_config.patch_size: expected patch_size as a positive"
    ):
        load_grid_table(_copy(path, tmp_path, vision_config={"patch_size": 0}))


@pytest.mark.parametrize(
    "kwargs,line",
    [
        (dict(image_size=30), "image_size: expected image_size divisible by patch_size 8, found 30 x 30 px"),
        (dict(image_size=-8), "image_size: expected image_size as a positive integer, found -8"),
        (
            dict(image_size=(8, 8, 8)),
            "image_size: expected image_size as one integer or (height, width), found (8, 8, 8)",
        ),
        (dict(image_size=2**17), "image_size: expected image_size at most 65536, found 131072"),
        (dict(image_size=65536), "image_size: expected at most 4194304 patches, found 8192 x 8192 = 67108864 patches"),
        (dict(image_size=32, convention="bicubic"), "convention: expected one of "),
    ],
)
def test_resize_grid_bad_input(kwargs, line):
    table = np.zeros((17, 4), np.float32)
    with pytest.raises(ValueError) as e:
        fp.resize_grid(table, prefix_tokens=1, patch_size=8, **kwargs)
    assert "\n" not in str(e.value) and str(e.value).startswith(line)


def test_resize_grid_rows_not_prefix_plus_square():
    with pytest.raises(CheckpointError) as e:
        fp.resize_grid(np.zeros((18, 4), np.float32), 32, prefix_tokens=1, patch_size=8)
    assert str(e.value) == "grid: expected 1 prefix rows + a square grid of patches, found 18 rows"


def test_grid_table_rows_must_match_image_and_patch_size():
    from flax_posenc.conversion import GridTable

    with pytest.raises(CheckpointError) as e:
        GridTable(np.zeros((17, 4)), "vit", "pos", 1, (8, 8), (40, 40), "vit")
    assert (
        str(e.value)
        == "pos: expected 26 rows (1 prefix + 5 x 5 patches of image_size 40 / patch_size 8), found 17 rows"
    )
