"""`flax-posenc extend` and `convert`: ``main`` of the console script in this process
(helpers.cli_in_process: the same exit codes and messages, without an interpreter start-up per
call), and the real console script in a subprocess for one extension end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import cli_in_process

import flax_posenc as fp
from flax_posenc import CheckpointError
from flax_posenc.conversion import load_position_table

SCRIPT = Path(sys.executable).parent / "flax-posenc"


def run_script(*args):
    """The installed console script in a subprocess."""
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300)


run = cli_in_process


def hf_forward_at(path, length, cls="AutoModel"):
    import transformers

    model, info = getattr(transformers, cls).from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    with torch.no_grad():
        hidden = model.eval()(input_ids=torch.randint(3, 90, (1, length))).last_hidden_state
    assert hidden.shape[1] == length and torch.isfinite(hidden).all()
    return model


@pytest.mark.parametrize("method", ["tile", "linear", "cubic"])
def test_extend_real_minilm_to_1024(minilm_dir, tmp_path, method):
    out = tmp_path / "minilm-1024"
    # the tile case through the real console script (its exit code and output as a shell sees them)
    r = (run_script if method == "tile" else run)(
        "extend", minilm_dir, "--length", 1024, "--method", method, "--out", out
    )
    assert r.returncode == 0, r.stderr
    assert "extended from 512 to 1024 positions" in r.stdout
    old, new = load_position_table(minilm_dir), load_position_table(out)
    assert (new.rows, new.num_positions) == (1024, 1024)
    if method == "tile":
        np.testing.assert_array_equal(new.weights[:512], old.weights)
        np.testing.assert_array_equal(new.weights[512:], old.weights)
    model = hf_forward_at(out, 1024)
    np.testing.assert_array_equal(model.embeddings.position_embeddings.weight.detach().numpy(), new.weights)
    assert run("check", out, "--length", 1024).returncode == 0
    assert run("check", out, "--length", 1025).returncode == 1


def test_extend_roberta_keeps_reserved_rows(tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint("roberta")  # 34 rows: 2 reserved + 32 positions
    out = tmp_path / "roberta-64"
    r = run("extend", ckpt.path, "--length", 64, "--out", out)
    assert r.returncode == 0, r.stderr
    new = load_position_table(out)
    assert (new.rows, new.offset, new.num_positions) == (66, 2, 64)  # like Longformer's 4098 for 4096
    np.testing.assert_array_equal(new.weights[:2], ckpt.position_weight()[:2])
    hf_forward_at(out, 64)


def test_extend_gpt2(tiny_checkpoint, tmp_path):
    out = tmp_path / "gpt2-80"
    assert (
        run("extend", tiny_checkpoint("gpt2").path, "--length", 80, "--method", "linear", "--out", out).returncode == 0
    )
    model = hf_forward_at(out, 80)
    assert model.config.n_positions == 80
    block = fp.nnx.TransformerInput.from_pretrained(out)
    assert block(jnp.zeros((1, 80), jnp.int32)).shape == (1, 80, 16)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--length", 32], "--length: expected an integer larger than the current 32 positions, got 32"),
        (["--length", 64, "--method", "nearest"], "invalid choice: 'nearest'"),
        (["--length", 0], "expected a positive integer"),
    ],
)
def test_extend_bad_input_writes_nothing(tiny_checkpoint, tmp_path, args, message):
    out = tmp_path / "never"
    r = run("extend", tiny_checkpoint("gpt2").path, *args, "--out", out)
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_extend_refuses_existing_output(tiny_checkpoint, tmp_path):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run("extend", tiny_checkpoint("gpt2").path, "--length", 64, "--out", out)
    assert r.returncode == 2 and "exists" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_extend_sinusoidal_is_refused(tmp_path):
    r = run("extend", "sinusoidal:16:8", "--length", 64, "--out", tmp_path / "x")
    assert r.returncode == 2 and "a sinusoidal SOURCE has no table to extend" in r.stderr


def test_convert_round_trip(tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint("bert")
    out = tmp_path / "bert.msgpack"
    r = run("convert", ckpt.path, "--out", out)
    assert r.returncode == 0, r.stderr
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 100, (2, 10)))
    direct = fp.nnx.TransformerInput.from_pretrained(ckpt.path)(ids)
    np.testing.assert_array_equal(fp.nnx.TransformerInput.from_pretrained(out)(ids), direct)
    module, variables = fp.linen.TransformerInput.from_pretrained(out)
    np.testing.assert_array_equal(module.apply(variables, ids), direct)
    assert run("convert", ckpt.path, "--out", out).returncode == 2  # exists: refused
    assert run("convert", ckpt.path, "--out", out, "--overwrite").returncode == 0


def test_convert_bad_output_names(tiny_checkpoint, tmp_path):
    r = run("convert", tiny_checkpoint("gpt2").path, "--out", tmp_path / "params.bin")
    assert r.returncode == 2 and "expected an output file name ending in .safetensors or .msgpack" in r.stderr
    r = run("convert", tiny_checkpoint("gpt2").path, "--out", tmp_path / "missing" / "p.msgpack")
    assert r.returncode == 2 and "expected an existing parent directory" in r.stderr
    assert not (tmp_path / "params.bin").exists()


def test_converted_garbage_is_a_checkpoint_error(tmp_path):
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(CheckpointError, match="bad.msgpack: expected a flax-posenc msgpack with 'params' and a 'spec'"):
        fp.nnx.TransformerInput.from_pretrained(bad)


def test_inspect_and_check_read_what_convert_writes(minilm_dir, tmp_path):
    out = tmp_path / "minilm.msgpack"
    assert run("convert", str(minilm_dir), "--out", str(out)).returncode == 0
    report = json.loads(run("inspect", str(out), "--json").stdout)
    assert (report["family"], report["key"], report["rows"], report["dim"]) == (
        "bert",
        "embeddings.position_embeddings.weight",
        512,
        384,
    )
    assert run("check", str(out), "--length", "512").returncode == 0
    past = run("check", str(out), "--length", "513")
    assert past.returncode == 1
    assert past.stderr.strip().endswith(
        "holds 512 positions (0..511); asked for 513 positions (0..512): 1 past the limit"
    )


def test_messages_name_the_command_line_options(minilm_dir, tmp_path):
    shorter = run("extend", str(minilm_dir), "--length", "100", "--out", str(tmp_path / "a"))
    assert shorter.returncode == 2
    assert shorter.stderr.strip() == (
        "flax-posenc extend: error: --length: expected an integer larger than the current 512 positions, got 100"
    )
    (tmp_path / "taken").mkdir()
    taken = run("extend", str(minilm_dir), "--length", "600", "--out", str(tmp_path / "taken"))
    assert taken.returncode == 2
    assert "(or --overwrite)" in taken.stderr and "overwrite=True" not in taken.stderr
