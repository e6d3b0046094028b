"""Hostile and careless outputs (issue 34): the one overwrite rule, for every output kind.

``flax_posenc/conversion/outputs.py``: an output is never the source, inside it or a folder that
contains it (any suffix, with or without ``--overwrite``), and ``--overwrite`` replaces only an
output flax-posenc wrote, of the same kind. Every refusal is exit 2 with one line, and every file
and folder under the test's directory is as before (nothing deleted, replaced or created).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from flax_posenc.conversion import CheckpointError
from flax_posenc.conversion.outputs import EXPORT_MARKER, check_apart, own_output, protected_paths
from flax_posenc.report import cli

ROWS, DIM, VOCAB = 8, 4, 10

#: every output kind: (name, extra CLI arguments, suffix of the output name, "directory"/"file").
KINDS = {
    "extend": (["--length", "12"], ""),
    "orbax": (["--format", "orbax"], ""),
    "safetensors": (["--format", "safetensors"], ".safetensors"),
    "msgpack": (["--format", "msgpack"], ".msgpack"),
}


def write_ckpt(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    config = {"model_type": "gpt2", "n_positions": ROWS, "n_embd": DIM, "vocab_size": VOCAB}
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {
        "wpe.weight": rng.standard_normal((ROWS, DIM)).astype(np.float32),
        "wte.weight": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
        "ln_f.weight": np.ones(DIM, np.float32),
        "ln_f.bias": np.zeros(DIM, np.float32),
    }
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def state(root: Path) -> dict[str, object]:
    """Every path under ``root`` (links not followed) -> its bytes, its link target or ``"dir"``."""
    out: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_dir():
                out[str(p)] = "dir"
            elif p.is_file():
                out[str(p)] = p.read_bytes()
            else:
                out[str(p)] = "special"
    return out


def run(capsys, kind: str, source: Path | str, out: Path, *extra: str) -> tuple[int, str]:
    args, _ = KINDS[kind]
    command = "extend" if kind == "extend" else "convert"
    code = cli.main([command, str(source), "--out", str(out), *args, *extra])
    stdout, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in stdout
    return code, err


def refused(capsys, kind: str, source: Path | str, out: Path, root: Path, *extra: str) -> str:
    before = state(root)
    code, err = run(capsys, kind, source, out, "--overwrite", *extra)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert state(root) == before  # nothing deleted, replaced or created
    return err.strip()


def test_convert_orbax_onto_a_folder_that_holds_the_source_deletes_nothing(tmp_path, capsys):
    """The issue's case: ``convert PARENT/src --out PARENT --format orbax --overwrite``."""
    parent = tmp_path / "parent"
    src = write_ckpt(parent / "src")
    (parent / "notes.txt").write_text("unrelated")
    err = refused(capsys, "orbax", src, parent, tmp_path)
    assert err == (
        f"flax-posenc convert: error: {parent}: expected an output path apart from the source {src}, "
        "found a path that contains the source (refused: nothing was written or deleted)"
    )


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("relation", ["parent", "grandparent", "same", "inside", "source-file", "through-link"])
def test_no_output_kind_is_the_source_inside_it_or_around_it(tmp_path, capsys, kind, relation):
    """Every output kind x every way an output path can overlap the source, whatever its suffix."""
    _, suffix = KINDS[kind]
    top = tmp_path / f"top{suffix}"
    parent = top / f"box{suffix}"
    src = write_ckpt(parent / f"src{suffix}")
    (parent / "unrelated.txt").write_text("keep me")
    (tmp_path / f"link{suffix}").symlink_to(parent)
    source: Path = src
    out = {
        "parent": parent,
        "grandparent": top,
        "same": src,
        "inside": src / f"new{suffix}",
        "source-file": src / "model.safetensors",
        "through-link": tmp_path / f"link{suffix}",
    }[relation]
    if relation == "source-file":
        source = src / "model.safetensors"
        if kind == "extend":  # extend reads a directory: its weights file is inside it
            source = src
    err = refused(capsys, kind, source, out, tmp_path)
    if relation != "source-file" or kind in ("extend", "orbax"):
        assert "expected an output path apart from the source" in err, err


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("existing", ["foreign-dir", "foreign-file", "link-to-own", "fifo"])
def test_overwrite_replaces_only_what_flax_posenc_wrote(tmp_path, capsys, kind, existing):
    _, suffix = KINDS[kind]
    src = write_ckpt(tmp_path / "src")
    out = tmp_path / "work" / f"out{suffix}"
    out.parent.mkdir()
    own = tmp_path / "own" / f"own{suffix}"
    own.parent.mkdir()
    if kind in ("extend", "orbax"):
        assert run(capsys, "extend", src, own)[0] == 0  # flax-posenc's own output, elsewhere
    else:
        assert run(capsys, kind, src, own)[0] == 0
    if existing == "foreign-dir":
        write_ckpt(out)  # someone's checkpoint
    elif existing == "foreign-file":
        out.write_bytes(b"someone's file")
    elif existing == "link-to-own":
        out.symlink_to(own)
    else:
        os.mkfifo(out)
    err = refused(capsys, kind, src, out, tmp_path)
    if existing == "foreign-dir" and suffix:  # a file output never replaces a directory
        assert err.endswith("expected a file path for the converted parameters, found a directory"), err
    else:
        assert "to overwrite, found" in err and "(left untouched)" in err, err


@pytest.mark.parametrize("kind", ["extend", "safetensors", "msgpack"])
def test_overwrite_replaces_an_earlier_output(tmp_path, capsys, kind):
    """The positive half: an output flax-posenc wrote is replaced (orbax: tests/test_orbax.py)."""
    _, suffix = KINDS[kind]
    src = write_ckpt(tmp_path / "src")
    out = tmp_path / f"out{suffix}"
    assert run(capsys, kind, src, out)[0] == 0
    assert own_output(out) == ("an extended checkpoint" if kind == "extend" else "a converted file")
    code, err = run(capsys, kind, src, out, "--overwrite")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["src", out.name])  # nothing left aside


def test_an_extended_checkpoint_carries_its_marker_and_a_copy_of_the_source_does_not_fake_it(tmp_path, capsys):
    src = write_ckpt(tmp_path / "src")
    out = tmp_path / "out"
    assert run(capsys, "extend", src, out)[0] == 0
    marker = json.loads((out / EXPORT_MARKER).read_text())
    assert marker["rows"] == 12 and marker["table"] == "wpe.weight" and marker["source"] == str(src)
    (out / EXPORT_MARKER).write_text('{"format": "something else"}')
    assert own_output(out) is None
    (out / EXPORT_MARKER).unlink()
    (out / EXPORT_MARKER).symlink_to(tmp_path / "elsewhere.json")
    assert own_output(out) is None


def test_the_api_refuses_alike(tmp_path):
    """save_converted, write_converted, save_orbax and export_position_table share the rule."""
    from flax_posenc import save_orbax
    from flax_posenc.conversion import export_position_table, load_position_table
    from flax_posenc.conversion.converted_file import read_converted, write_converted
    from flax_posenc.pretrained import save_converted

    src = write_ckpt(tmp_path / "src")
    foreign = tmp_path / "foreign"
    write_ckpt(foreign)
    foreign_file = tmp_path / "x.safetensors"
    foreign_file.write_bytes(b"not ours")
    good = save_converted(src, tmp_path / "good.safetensors")
    spec, params = read_converted(good).spec, read_converted(good).params
    before = state(tmp_path)
    cases = [
        lambda: save_converted(src, tmp_path, format="orbax", overwrite=True),
        lambda: save_converted(src / "model.safetensors", src / "model.safetensors", overwrite=True),
        lambda: save_converted(src, foreign_file, overwrite=True),
        lambda: write_converted(foreign_file, spec, params, overwrite=True),
        lambda: save_orbax(foreign, spec, params, overwrite=True),
        lambda: save_orbax(tmp_path, spec, params, overwrite=True, source=src),
        lambda: export_position_table(src, load_position_table(src).weights, foreign, overwrite=True),
    ]
    for case in cases:
        with pytest.raises(CheckpointError) as e:
            case()
        assert "\n" not in str(e.value)
    assert state(tmp_path) == before


def test_plot_never_writes_into_the_source_nor_through_a_link(tmp_path, capsys):
    src = write_ckpt(tmp_path / "src")
    before = state(tmp_path)
    for out in (src, src / "figures"):
        code = cli.main(["plot", str(src), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and "expected an output path apart from the source" in err and len(err.splitlines()) == 1
    assert state(tmp_path) == before
    # a figure's name already a link to a file elsewhere: the link is replaced, the file untouched
    # (plots._save writes every figure: a temporary file renamed over the name)
    from flax_posenc.report import plots

    figs = tmp_path / "figs"
    figs.mkdir()
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"precious")
    (figs / "heatmap.png").symlink_to(victim)
    fig = plots._figure(2, 2)
    fig.add_subplot().plot([0, 1])
    assert plots._save(fig, figs / "heatmap.png") == figs / "heatmap.png"
    assert victim.read_bytes() == b"precious"
    assert not (figs / "heatmap.png").is_symlink() and (figs / "heatmap.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in figs.iterdir()) == ["heatmap.png"]  # no temporary left
    # a folder that merely contains the source is fine for plot (it deletes nothing)
    check_apart(tmp_path, protected_paths(src), containing_ok=True)
    with pytest.raises(CheckpointError, match="found a path that contains the source"):
        check_apart(tmp_path, protected_paths(src))


@pytest.mark.parametrize("kind", ["extend", "orbax"])
def test_overwrite_never_replaces_an_own_output_of_the_other_kind(tmp_path, capsys, kind):
    """A converted file (flax-posenc's own, but a file) is not replaced by a directory output."""
    src = write_ckpt(tmp_path / "src")
    out = tmp_path / "out.safetensors"  # a directory output may ask for this name too
    code, err = run(capsys, "safetensors", src, out)
    assert code == 0, err
    assert own_output(out) == "a converted file"
    err = refused(capsys, kind, src, out, tmp_path)
    assert "expected an extended checkpoint or an orbax input block written by flax-posenc" in err, err
    assert err.endswith("found a converted file (left untouched)"), err
