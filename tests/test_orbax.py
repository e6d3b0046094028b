"""Orbax checkpoints of the input block: fp.save_orbax / fp.load_orbax, the shells' from_pretrained,
``convert --format orbax``, ``inspect``/``check`` on the directory, restore onto 8 host devices, and
partial or hostile directories (one line each, CLI exit 2).

References: the tiny BERT's own torch weights and Hugging Face's embedding output (through
tests/test_pretrained_parity.py's helpers), and the saved block's output computed before saving.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import linen as nn
from flax import nnx
from helpers import fast_xla_env
from test_pretrained_parity import assert_close, hf_embedding_output

import flax_posenc as fp
from flax_posenc import CheckpointError
from flax_posenc.conversion.orbax_file import read_orbax_params
from flax_posenc.pretrained import load_pretrained
from flax_posenc.report.cli import main as cli_main

SCRIPT = Path(__file__).parent / "scripts" / "orbax_sharded_restore.py"
IDS = np.random.default_rng(0).integers(0, 100, (8, 16)).astype(np.int32)
TYPES = np.random.default_rng(1).integers(0, 3, (8, 16)).astype(np.int32)


@pytest.fixture(scope="module")
def bert(tiny_checkpoint):
    return tiny_checkpoint("bert")  # vocab 100, dim 16, 32 positions, 3 token types, LayerNorm


@pytest.fixture(scope="module")
def saved(bert, tmp_path_factory):
    """The tiny BERT's NNX block and Linen (module, variables), each saved as an orbax checkpoint."""
    root = tmp_path_factory.mktemp("orbax")
    block = fp.nnx.TransformerInput.from_pretrained(bert.path)
    module, variables = fp.linen.TransformerInput.from_pretrained(bert.path)
    assert fp.save_orbax(root / "nnx", block) == root / "nnx"
    fp.save_orbax(root / "linen", module, variables)
    return {"root": root, "block": block, "module": module, "variables": variables}


def nnx_forward(block):
    return np.asarray(nnx.jit(lambda b, i, t: b(i, token_type_ids=t))(block, IDS, TYPES))


def linen_forward(module, variables):
    return np.asarray(jax.jit(lambda v, i, t: module.apply(v, i, token_type_ids=t))(variables, IDS, TYPES))


# --------------------------------------------------------------------------- round trips


def test_nnx_save_restore_equal_outputs_under_jit(bert, saved):
    restored = fp.nnx.TransformerInput.from_pretrained(saved["root"] / "nnx")
    assert restored.spec == saved["block"].spec
    out = nnx_forward(restored)
    np.testing.assert_array_equal(out, nnx_forward(saved["block"]))
    assert_close(out, hf_embedding_output("bert", bert.model, IDS, TYPES))


def test_linen_save_restore_equal_outputs_under_jit(bert, saved):
    module, variables = fp.linen.TransformerInput.from_pretrained(saved["root"] / "linen")
    assert module.spec == saved["module"].spec
    out = linen_forward(module, variables)
    np.testing.assert_array_equal(out, linen_forward(saved["module"], saved["variables"]))
    assert_close(out, hf_embedding_output("bert", bert.model, IDS, TYPES))
    # boxed with the logical axes, as init boxes them
    assert nn.get_partition_spec(variables) == nn.get_partition_spec(saved["variables"])


def test_bfloat16_parameters_round_trip(bert, tmp_path):
    import jax.numpy as jnp

    block = fp.nnx.TransformerInput.from_pretrained(bert.path, param_dtype=jnp.bfloat16)
    fp.save_orbax(tmp_path / "bf16", block)
    spec, params = fp.load_orbax(tmp_path / "bf16")
    assert params["word_embeddings"].dtype == jnp.bfloat16
    restored = fp.nnx.TransformerInput.from_pretrained(tmp_path / "bf16", param_dtype=jnp.bfloat16)
    np.testing.assert_array_equal(nnx_forward(restored), nnx_forward(block))
    # the stored bfloat16 table is the torch float32 table rounded once
    np.testing.assert_array_equal(
        np.asarray(params["position_embeddings"]),
        bert.model.embeddings.position_embeddings.weight.detach().numpy().astype(jnp.bfloat16),
    )


def test_arrays_equal_the_torch_weights_and_plain_orbax_reads_the_directory(bert, saved):
    spec, params = fp.load_orbax(saved["root"] / "nnx")
    emb = bert.model.embeddings
    for ours, theirs in (
        (params["word_embeddings"], emb.word_embeddings.weight),
        (params["position_embeddings"], emb.position_embeddings.weight),
        (params["token_type_embeddings"], emb.token_type_embeddings.weight),
        (params["layer_norm"]["scale"], emb.LayerNorm.weight),
        (params["layer_norm"]["bias"], emb.LayerNorm.bias),
    ):
        np.testing.assert_array_equal(np.asarray(ours), theirs.detach().numpy())
    assert spec.position.num_positions == bert.model.config.max_position_embeddings
    # the ecosystem's reader, without flax-posenc: both items restore with orbax's own handlers
    plain = ocp.Checkpointer(ocp.CompositeCheckpointHandler("params", "flax_posenc"))
    raw = plain.restore(
        saved["root"] / "nnx",
        ocp.args.Composite(params=ocp.args.PyTreeRestore(), flax_posenc=ocp.args.JsonRestore()),
    )
    assert raw["flax_posenc"]["spec"] == spec.to_dict()
    np.testing.assert_array_equal(raw["params"]["word_embeddings"], emb.word_embeddings.weight.detach().numpy())


def test_numpy_restore_on_conversions_floor_equals_load_orbax(bert, saved, tmp_path):
    """``conversion.orbax_file.read_orbax_params`` in a fresh process: importing it (and asking
    ``is_orbax_checkpoint``) loads no jax; the arrays it restores are host numpy arrays equal to
    ``load_orbax``'s and to the torch weights; ``inspect_source`` of the directory reads the table."""
    d = saved["root"] / "nnx"
    code = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np
        from flax_posenc.conversion import inspect_source
        from flax_posenc.conversion.orbax_file import flat_params, is_orbax_checkpoint, read_orbax_params
        before = sorted(m for m in ("jax", "flax", "orbax", "torch") if m in sys.modules)
        assert is_orbax_checkpoint({str(d)!r})
        spec, params = read_orbax_params({str(d)!r})
        flat = flat_params(params)
        np.savez({str(tmp_path / "numpy.npz")!r}, **{{k.replace("/", "."): v for k, v in flat.items()}})
        record = inspect_source({str(d)!r}).to_dict()
        types = sorted({{type(v).__name__ for v in flat.values()}})
        print(json.dumps({{"before": before, "types": types, "spec": spec.to_dict(), "record": record}}))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["before"] == [] and r["types"] == ["ndarray"]
    spec, params = fp.load_orbax(d)
    assert r["spec"] == spec.to_dict()
    with np.load(tmp_path / "numpy.npz") as host:
        assert sorted(host) == [
            "layer_norm.bias",
            "layer_norm.scale",
            "position_embeddings",
            "token_type_embeddings",
            "word_embeddings",
        ]
        for name, value in host.items():
            ours = params
            for key in name.split("."):
                ours = ours[key]
            assert value.dtype == ours.dtype
            np.testing.assert_array_equal(value, np.asarray(ours))
        theirs = bert.model.embeddings.position_embeddings.weight.detach().numpy()
        np.testing.assert_array_equal(host["position_embeddings"], theirs)
    limit = bert.model.config.max_position_embeddings
    assert (r["record"]["family"], r["record"]["num_positions"]) == ("bert", limit)


def test_restore_sharded_onto_eight_host_devices(bert, saved, tmp_path):
    """Saved on one device (this process), restored sharded by the logical axes onto 8 devices."""
    assert len(jax.devices()) == 1
    expected = tmp_path / "expected.npz"
    np.savez(
        expected,
        ids=IDS,
        types=TYPES,
        nnx=nnx_forward(saved["block"]),
        linen=linen_forward(saved["module"], saved["variables"]),
    )
    dirs = (saved["root"] / "nnx", saved["root"] / "linen", expected, bert.path)
    cmd = [sys.executable, str(SCRIPT), *map(str, dirs)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=fast_xla_env())
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["devices"] == 8
    # ("vocab", None), ("embed", "model"): the width 16 over the 4 "model" devices, replicated over "data"
    assert r["load_orbax"]["word_embeddings"] == {"shard_shape": [100, 4], "devices": 8, "spec": "P(None, 'model')"}
    assert r["load_orbax"]["position_embeddings"] == {"shard_shape": [32, 4], "devices": 8, "spec": "P(None, 'model')"}
    for framework in ("nnx", "linen"):
        f = r[framework]
        assert f["word_embeddings"]["shard_shape"] == [100, 4] and f["word_embeddings"]["devices"] == 8
        assert f["out"] == {"shard_shape": [4, 16, 4], "devices": 8, "spec": "P('data', None, 'model')"}
        # LayerNorm's mean and variance are reduced across the width shards: a different summation order
        assert f["max_abs_diff"] <= 8 * np.spacing(np.float32(f["scale"]))
    assert r["linen"]["partition_spec"] == "P('vocab', 'embed')"
    hf = r["nnx_from_hf"]  # from_pretrained(mesh=) of a checkpoint that is not orbax: device_put
    assert hf["word_embeddings"] == {"shard_shape": [100, 4], "devices": 8, "spec": "P(None, 'model')"}
    assert hf["max_abs_diff"] <= 8 * np.spacing(np.float32(hf["scale"]))


# --------------------------------------------------------------------------- the command line


def test_cli_convert_orbax_then_inspect_and_check(bert, tmp_path, capsys):
    out = tmp_path / "bert-orbax"
    assert cli_main(["convert", str(bert.path), "--out", str(out), "--format", "orbax"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: an orbax checkpoint of the input block")
    spec, params = fp.load_orbax(out)
    np.testing.assert_array_equal(
        np.asarray(params["position_embeddings"]), bert.model.embeddings.position_embeddings.weight.detach().numpy()
    )
    limit = bert.model.config.max_position_embeddings
    assert cli_main(["inspect", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["family"], report["num_positions"]) == ("bert", limit)
    assert cli_main(["check", str(out), "--length", str(limit)]) == 0
    assert cli_main(["check", str(out), "--length", str(limit + 1)]) == 1
    assert "1 past the limit" in capsys.readouterr().err


def test_cli_convert_orbax_refuses_an_existing_output_and_leaves_it(bert, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert cli_main(["convert", str(bert.path), "--out", str(out), "--format", "orbax"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"flax-posenc convert: error: {out}: expected a new path, found an existing one (pass --overwrite)\n"
    )
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


# --------------------------------------------------------------------------- bad arguments


def test_save_refuses_what_is_not_a_block(saved, tmp_path):
    with pytest.raises(
        TypeError,
        match=r"^save_orbax: expected a TransformerInput \(NNX, or Linen with its variables\) or an InputSpec, got str$",
    ):
        fp.save_orbax(tmp_path / "out", "bert")
    with pytest.raises(TypeError, match=r"^save_orbax: a Linen TransformerInput needs its variables$"):
        fp.save_orbax(tmp_path / "out", saved["module"])
    with pytest.raises(TypeError, match=r"^save_orbax: expected a params dict with an InputSpec, got NoneType$"):
        fp.save_orbax(tmp_path / "out", saved["block"].spec)
    with pytest.raises(
        CheckpointError, match=r"/nowhere/out: expected an existing parent directory, found none at .*/nowhere$"
    ):
        fp.save_orbax(tmp_path / "nowhere" / "out", saved["block"])
    assert list(tmp_path.iterdir()) == []


def test_load_refuses_a_path_that_is_no_directory(tmp_path):
    with pytest.raises(CheckpointError, match=r"/missing: expected an orbax checkpoint directory, found no directory$"):
        fp.load_orbax(tmp_path / "missing")


def test_save_refuses_parameters_unlike_the_spec(saved, tmp_path):
    spec, params = fp.load_orbax(saved["root"] / "nnx")
    params = {**params, "word_embeddings": np.zeros((99, 16), np.float32)}
    with pytest.raises(
        CheckpointError,
        match=r"expected parameters of the spec's shapes .*'word_embeddings': \(100, 16\).*found .*'word_embeddings': \(99, 16\)",
    ):
        fp.save_orbax(tmp_path / "out", spec, params)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- containment


def test_a_failed_save_leaves_nothing_behind(saved, tmp_path, monkeypatch):
    from flax_posenc.conversion import atomic

    def broken(tmp, out, *, overwrite):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "publish_dir", broken)
    with pytest.raises(CheckpointError) as e:
        fp.save_orbax(tmp_path / "out", saved["block"])
    assert str(e.value) == (
        f"{tmp_path / 'out'}: expected a writable output directory, found OSError: No space left on device"
    )
    assert list(tmp_path.iterdir()) == []


def test_nan_parameters_are_refused_before_anything_is_written(saved, tmp_path):
    spec, params = fp.load_orbax(saved["root"] / "nnx")
    params = {**params, "position_embeddings": np.full((32, 16), np.nan, np.float32)}
    with pytest.raises(CheckpointError, match=r"expected finite values in position_embeddings, found NaN/Inf values$"):
        fp.save_orbax(tmp_path / "out", spec, params)
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_and_only_then(saved, tmp_path):
    out = tmp_path / "ckpt"
    fp.save_orbax(out, saved["block"])
    with pytest.raises(CheckpointError, match=r"expected a new path, found an existing file or directory"):
        fp.save_orbax(out, saved["module"], saved["variables"])
    fp.save_orbax(out, saved["module"], saved["variables"], overwrite=True)
    assert fp.load_orbax(out)[0] == saved["module"].spec
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


# --------------------------------------------------------------------------- hostile directories


def _metadata(d: Path) -> dict:
    return json.loads((d / "flax_posenc" / "metadata").read_text())


def _write_metadata(d: Path, blob) -> None:
    (d / "flax_posenc" / "metadata").write_text(json.dumps(blob))


def _lie_about_vocab(d: Path) -> None:
    blob = _metadata(d)
    blob["spec"]["vocab_size"] = 200
    _write_metadata(d, blob)


def _lie_consistently(d: Path) -> None:
    """Spec and declared shapes agree with each other (vocab 200), not with the stored arrays."""
    blob = _metadata(d)
    blob["spec"]["vocab_size"] = 200
    blob["params"]["word_embeddings"]["shape"] = [200, 16]
    _write_metadata(d, blob)


def _largest_data_file(d: Path) -> Path:
    return max((d / "params" / "ocdbt.process_0" / "d").iterdir(), key=lambda p: p.stat().st_size)


def _flip_bytes(d: Path) -> None:
    path = _largest_data_file(d)
    data = bytearray(path.read_bytes())
    data[200:400] = bytes(b ^ 0xFF for b in data[200:400])
    path.write_bytes(bytes(data))


def _claim_a_huge_table(d: Path) -> None:
    """Spec and declared shapes agree on a 2**40-row word table (16 TiB): refused before any read."""
    blob = _metadata(d)
    blob["spec"]["vocab_size"] = 2**40
    blob["params"]["word_embeddings"]["shape"] = [2**40, 16]
    _write_metadata(d, blob)


def _link_out(entry: str):
    """Replace ``d/entry`` by a link to the same entry of a whole valid copy outside ``d``."""

    def damage(d: Path) -> None:
        other = d.parent / "other"
        shutil.copytree(d, other)
        target = d / entry
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        target.symlink_to(other / entry)

    return damage


LINK_OUT = r"{d}/%s: expected files that resolve inside the orbax checkpoint {d}, found a symbolic link to .*/other/%s \(refused, not read\)"

HOSTILE = {
    **{
        f"{entry} links out": (_link_out(entry), LINK_OUT % (entry, entry))
        for entry in (
            "flax_posenc/metadata",
            "flax_posenc",
            "params",
            "params/ocdbt.process_0",
            "params/manifest.ocdbt",
            "_CHECKPOINT_METADATA",
        )
    },
    "missing metadata": (
        lambda d: shutil.rmtree(d / "flax_posenc"),
        r"{d}: expected an orbax checkpoint written by flax-posenc, with its metadata in flax_posenc/metadata, found none",
    ),
    "corrupted metadata JSON": (
        lambda d: (d / "flax_posenc" / "metadata").write_text('{"format": "flax-posenc/orbax-inp'),
        r"{d}/flax_posenc/metadata: expected flax-posenc orbax metadata \(JSON\).*, found .*",
    ),
    "metadata of another format": (
        lambda d: _write_metadata(d, {"format": "something-else", "version": 1}),
        r"{d}/flax_posenc/metadata: expected format 'flax-posenc/orbax-input-block', found 'something-else'",
    ),
    "metadata of a future version": (
        lambda d: _write_metadata(d, {**_metadata(d), "version": 7}),
        r"{d}/flax_posenc/metadata: expected version 1, found 7",
    ),
    "an invalid spec": (
        lambda d: _write_metadata(d, {**_metadata(d), "spec": {**_metadata(d)["spec"], "layer_norm_eps": -1.0}}),
        r"{d}/flax_posenc/metadata: expected a valid 'spec', found .*layer_norm_eps.*",
    ),
    "a spec that lies about shapes": (
        _lie_about_vocab,
        r"{d}/flax_posenc/metadata: expected parameters of the spec's shapes \{'word_embeddings': \[200, 16\], .*\}, "
        r"found \{.*'word_embeddings': \[100, 16\].*\}",
    ),
    "spec and metadata lie together": (
        _lie_consistently,
        r"{d}: expected stored arrays of the metadata's shapes and dtypes \{.*'word_embeddings': \(\(200, 16\), "
        r"'float32'\).*\}, found \{.*'word_embeddings': \(\(100, 16\), 'float32'\).*\}",
    ),
    "integer arrays declared": (
        lambda d: _write_metadata(
            d,
            {
                **_metadata(d),
                "params": {
                    **_metadata(d)["params"],
                    "word_embeddings": {**_metadata(d)["params"]["word_embeddings"], "dtype": "int32"},
                },
            },
        ),
        r"{d}/flax_posenc/metadata: expected word_embeddings of a float dtype \(float32, bfloat16, float16, float64\), "
        r"found 'int32'",
    ),
    "a huge declared table": (
        _claim_a_huge_table,
        r"{d}/flax_posenc/metadata: expected at most 17179869184 elements in word_embeddings, "
        r"found shape \(1099511627776, 16\)",
    ),
    "no params item": (
        lambda d: shutil.rmtree(d / "params"),
        r"{d}: expected the parameters in params/ \(an orbax item\), found no such directory",
    ),
    "missing array metadata": (
        lambda d: (d / "params" / "manifest.ocdbt").unlink(),
        r"{d}/params: expected orbax array metadata, found unreadable \(ValueError: NOT_FOUND: .*\)",
    ),
    "missing array files": (
        lambda d: [p.unlink() for p in (d / "params" / "ocdbt.process_0" / "d").iterdir()],
        r"{d}/params: expected readable orbax array files \((\w+)\), found ValueError: .*",
    ),
    "a truncated array file": (
        lambda d: os.truncate(_largest_data_file(d), 100),
        r"{d}/params: expected readable orbax array files \((\w+)\), found ValueError: .*",
    ),
    "corrupted array bytes": (
        _flip_bytes,
        r"{d}/params: expected (\w+) as saved \(its SHA-256 in flax_posenc/metadata\), found different contents",
    ),
}


# A failed read leaves a tensorstore callback aimed at orbax's closed event loop; in this process
# that surfaces later as an unraisable RuntimeError (pytest's warning). The console script's stderr
# stays one line: test_missing_array_files_one_line_from_the_console_script.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_directories_get_one_line(saved, tmp_path, capsys, case):
    damage, pattern = HOSTILE[case]
    d = tmp_path / "ckpt"
    shutil.copytree(saved["root"] / "nnx", d)
    damage(d)
    full = pattern.replace("{d}", str(d))
    with pytest.raises(CheckpointError) as e:
        fp.load_orbax(d)
    message = str(e.value)
    assert "\n" not in message
    assert __import__("re").fullmatch(full, message), message
    with pytest.raises(CheckpointError, match="^" + full.replace("^", "")):
        fp.nnx.TransformerInput.from_pretrained(d)
    with pytest.raises(CheckpointError, match="^" + full.replace("^", "")):  # the numpy restore, on its own
        read_orbax_params(d)
    assert cli_main(["inspect", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"flax-posenc inspect: error: {message[:40]}"), err
    assert cli_main(["check", str(d), "--length", "8", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2


def test_a_link_that_stays_inside_is_allowed(tmp_path):
    from flax_posenc.conversion.orbax_file import check_no_links_out

    (tmp_path / "d" / "params").mkdir(parents=True)
    (tmp_path / "d" / "params" / "a").write_text("x")
    (tmp_path / "d" / "params" / "b").symlink_to("a")
    (tmp_path / "d" / "here").symlink_to(".")
    check_no_links_out(tmp_path / "d")
    (tmp_path / "d" / "up").symlink_to("..")
    with pytest.raises(CheckpointError, match="/up: expected files that resolve inside the orbax checkpoint"):
        check_no_links_out(tmp_path / "d")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_parameters_with_a_matching_checksum_are_refused_when_read(
    saved, tmp_path, monkeypatch, capsys, bad
):
    """save_orbax and the converted-file reader refuse NaN/Inf; a directory written around that check (its
    SHA-256 matching the NaN bytes) is refused by every reader too, naming the parameter."""
    import flax_posenc.orbax_io as orbax_io

    spec, params = fp.load_orbax(saved["root"] / "nnx")
    params = {k: dict(v) if isinstance(v, dict) else np.array(v) for k, v in params.items()}
    params["position_embeddings"][3, 1] = bad
    monkeypatch.setattr(orbax_io, "_check_params", lambda *a: None)  # as a hostile writer would
    d = fp.save_orbax(tmp_path / "nan", spec, params)
    monkeypatch.undo()
    expected = f"{d}/params: expected finite values in position_embeddings, found NaN/Inf values"
    for read in (fp.load_orbax, read_orbax_params, fp.nnx.TransformerInput.from_pretrained, load_pretrained):
        with pytest.raises(CheckpointError) as e:
            read(d)
        assert str(e.value) == expected
    assert cli_main(["inspect", str(d)]) == 2
    assert capsys.readouterr().err == f"flax-posenc inspect: error: {expected}\n"


def test_missing_array_files_one_line_from_the_console_script(saved, tmp_path):
    """A real process: exit 2 and one line on stderr, nothing printed at interpreter exit."""
    d = tmp_path / "ckpt"
    shutil.copytree(saved["root"] / "nnx", d)
    for p in (d / "params" / "ocdbt.process_0" / "d").iterdir():
        p.unlink()
    script = Path(sys.executable).parent / "flax-posenc"
    run = subprocess.run([str(script), "check", str(d), "--length", "8"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"flax-posenc check: error: {d}/params: expected readable orbax array files (")


def test_float64_directory_loads_as_float32_without_x64(tmp_path):
    """A float64 directory (saved from host arrays) restores: its SHA-256 is checked on the host
    float64 arrays, then jax (x64 off) holds them as float32, each the float64 value rounded once."""
    assert not jax.config.jax_enable_x64
    spec = fp.InputSpec.from_arguments(7, 4, num_positions=5)
    rng = np.random.default_rng(0)
    params = {name: rng.standard_normal(shape) for name, shape in spec.param_shapes().items()}
    assert all(a.dtype == np.float64 for a in params.values())
    fp.save_orbax(tmp_path / "f64", spec, params)
    host_spec, host = read_orbax_params(tmp_path / "f64")  # the numpy floor keeps float64
    assert host_spec == spec and all(host[k].dtype == np.float64 for k in host)
    loaded_spec, loaded = fp.load_orbax(tmp_path / "f64")
    assert loaded_spec == spec
    for name, value in params.items():
        assert loaded[name].dtype == np.float32
        np.testing.assert_array_equal(np.asarray(loaded[name]), value.astype(np.float32))
