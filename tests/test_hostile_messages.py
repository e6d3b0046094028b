"""What the CLI and the API say (issue 34): file content never echoed raw, messages that name the
field the user wrote, a closed stdout. Grouped by surface."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from flax_posenc.errors import LINE_CHARACTERS, CheckpointError, one_line, shown
from flax_posenc.report.cli import main

ROOT = Path(__file__).resolve().parent.parent
ESC = "\x1b[31m"
HOSTILE = [
    "gpt2" + ESC + "red\x1b[0m",
    "k\nok: 1000000 positions fit",
    "a\rb",
    "bidi\u202eevil",
    "line\u2028sep",
    "nul\x00byte",
    "c1\x85\x9bcsi",
    "x" * 100_000,
]


def _printable(line: str) -> bool:
    return all(unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") for c in line)


# --------------------------------------------------------------------------- the sanitiser itself


@pytest.mark.parametrize("code", [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0x202E, 0x200B, 0xFEFF])
def test_every_control_and_format_character_is_escaped(code):
    text = f"a{chr(code)}b"
    out = shown(text)
    assert _printable(out) and out.startswith("a") and out.endswith("b") and len(out) > 3, repr(out)
    assert "\n" not in one_line(text) and _printable(one_line(text))


@pytest.mark.parametrize("text", ["llama", "café", "模型", "Ünïcödé-ß", "a b"])
def test_printable_text_is_kept(text):
    assert shown(text) == text == one_line(text)


def test_length_is_capped_and_the_cut_said():
    huge = "y" * 16_777_216
    out = shown(huge)
    assert out.startswith("y" * 200) and out.endswith("... (16777216 characters)") and len(out) < 240
    assert len(one_line("z\n" * 10_000_000)) <= LINE_CHARACTERS + 40


# --------------------------------------------------------------------------- strings from a converted file


@pytest.fixture(scope="module")
def converted(tiny_checkpoint, tmp_path_factory):
    from flax_posenc.pretrained import save_converted

    return save_converted(tiny_checkpoint("gpt2").path, tmp_path_factory.mktemp("conv") / "c.safetensors")


def _with_origin(src: Path, out: Path, **origin) -> Path:
    with safe_open(str(src), "np") as f:
        metadata = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    stored = json.loads(metadata["origin"])
    metadata["origin"] = json.dumps({**stored, **origin})
    save_file(tensors, str(out), metadata=metadata)
    return out


@pytest.mark.parametrize("field", ["family", "key"])
@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("command", [["check", "--length", "4"], ["check", "--length", "100000"], ["inspect"]])
def test_origin_strings_are_never_echoed_raw(converted, tmp_path, capsys, field, text, command):
    path = _with_origin(converted, tmp_path / "o.safetensors", **{field: text})
    code = main([command[0], str(path), *command[1:]])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    lines = (out + err).splitlines()
    assert all(_printable(line) for line in lines), lines
    assert all(len(line) < 4000 for line in lines)
    if command[0] == "check":
        assert len((out + err).strip().splitlines()) == 1, out + err  # the verdict: one line, never a forged second


def test_a_file_spec_name_is_sanitised_too(converted, tmp_path):
    from flax_posenc.conversion.converted_file import file_spec
    from flax_posenc.pretrained import load_pretrained

    spec, _ = load_pretrained(converted)
    import dataclasses

    forged = dataclasses.replace(spec, position=dataclasses.replace(spec.position, name="t\nok: fits" + ESC))
    clean = file_spec(forged)
    assert clean.position.name == "t\\nok: fits\\x1b[31m"


# --------------------------------------------------------------------------- strings from a config or a GGUF


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_model_type_from_a_config_is_never_echoed_raw(tmp_path, capsys, text):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": text, "hidden_size": 8}))
    code = main(["inspect", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1 and _printable(err.strip()) and len(err) < 4000, err[:300]


@pytest.mark.parametrize("arch", ["a" * (16 << 20) + "\n" + ESC, "llama\n" + ESC + "ok", "\u202ellama"])
def test_gguf_architecture_string_is_capped_and_escaped(tmp_path, capsys, arch):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(16)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CheckpointError) as info:
        from flax_posenc.conversion import inspect_source

        inspect_source(path)
    message = str(info.value)
    assert "\n" not in message and _printable(message) and len(message) < 2 * LINE_CHARACTERS, message[:300]
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and len(err) < 2 * LINE_CHARACTERS


# --------------------------------------------------------------------------- a closed stdout


@pytest.mark.parametrize("read_first", [False, True])
@pytest.mark.parametrize("command", [["families"], ["families", "--json"]])
def test_stdout_closed_by_its_reader_is_quiet(command, read_first):
    """``flax-posenc families | head``: the reader goes away; no "Broken pipe" line. Closed before
    anything is written (the process is still importing): the write fails, exit 141; after one
    line, the output may already sit whole in the pipe's buffer (exit 0) or not (141)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = f"import sys; from flax_posenc.report.cli import main; sys.exit(main({command!r}))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if read_first:
        proc.stdout.readline()  # as head: read a little, then stop reading
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in ((0, 141) if read_first else (141,))
    assert err == "", err


# --------------------------------------------------------------------------- messages name the config's own field

OWN_FIELD = [
    ({"model_type": "mpt", "n_heads": 10**12, "d_model": 64}, "n_heads"),
    ({"model_type": "bloom", "n_head": 10**12, "hidden_size": 64}, "n_head"),
    ({"model_type": "bloom", "num_attention_heads": 70_000, "hidden_size": 64}, "num_attention_heads"),
    ({"model_type": "llama", "num_attention_heads": 10**12, "hidden_size": 64}, "num_attention_heads"),
    ({"model_type": "gptj", "n_head": 10**6, "n_embd": 10**7, "rotary_dim": 8}, "n_head"),
    (
        {"model_type": "llama", "num_attention_heads": 4, "hidden_size": 64, "max_position_embeddings": 2**41},
        "max_position_embeddings",
    ),
    ({"model_type": "gptj", "n_head": 4, "n_embd": 64, "rotary_dim": 8, "n_positions": 10**15}, "n_positions"),
    ({"model_type": "mpt", "n_heads": 4, "d_model": 64, "max_seq_len": 10**15}, "max_seq_len"),
]


@pytest.mark.parametrize("config,field", OWN_FIELD, ids=[f for _, f in OWN_FIELD])
def test_bound_errors_name_the_configs_own_field(tmp_path, capsys, config, field):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"expected {field} at most" in err, err
    internal = {"num_heads", "max_positions"} - {field}
    assert not any(f" {name}:" in err or f" {name} " in err for name in internal), err


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    import torch
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(vocab_size=32, d_model=8, d_kv=4, d_ff=16, num_heads=2, num_layers=1)
    path = tmp_path_factory.mktemp("t5")
    T5EncoderModel(config).save_pretrained(path)
    return path


@pytest.mark.parametrize("distance", [10**12, 2**20 + 1])
def test_relative_bias_max_distance_bound_names_the_field(t5_dir, tmp_path, capsys, distance):
    import shutil

    path = tmp_path / "t5"
    shutil.copytree(t5_dir, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "relative_attention_max_distance": distance}))
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "expected relative_attention_max_distance at most 1048576" in err and str(distance) in err, err
    (path / "config.json").write_text(json.dumps({**config, "relative_attention_max_distance": 2**20}))
    assert main(["inspect", str(path)]) == 0  # the bound itself is allowed


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    import torch
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(0)
    from helpers import TINY_WHISPER

    tiny = dict(TINY_WHISPER, max_source_positions=30, max_target_positions=16)
    path = tmp_path_factory.mktemp("whisper")
    WhisperModel(WhisperConfig(**tiny)).save_pretrained(path)
    return path


@pytest.mark.parametrize("value", ["30", 30.0, True, -30, 0, [30]])
def test_whisper_max_source_positions_is_type_checked(whisper_dir, tmp_path, capsys, value):
    import shutil

    path = tmp_path / "w"
    shutil.copytree(whisper_dir, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "max_source_positions": value}))
    assert main(["check", str(path), "--seconds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "max_source_positions as a positive integer" in err and len(err.splitlines()) == 1, err


def test_rope_parameters_of_an_unused_layer_type_are_ignored_as_transformers_does(tmp_path):
    """transformers itself saves parameters for a layer type no layer uses (a one-layer ModernBERT):
    they are not read, and the layers' RoPE is transformers' own."""
    import torch
    from transformers import ModernBertConfig, ModernBertModel

    from flax_posenc.conversion import inspect_source
    from flax_posenc.rope_config import rope_inverse_frequencies

    config = ModernBertConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )
    assert set(config.layer_types) == {"full_attention"} and "sliding_attention" in config.rope_parameters
    torch.manual_seed(0)
    model = ModernBertModel(config)
    model.save_pretrained(tmp_path)
    rope = [m for m in inspect_source(tmp_path).mechanisms if m.kind == "rope"]
    assert [m.record.layer_type for m in rope] == ["full_attention"]
    rotary = model.rotary_emb
    theirs = getattr(rotary, "full_attention_inv_freq", None)
    if theirs is None:
        theirs = rotary.inv_freq
    np.testing.assert_allclose(rope_inverse_frequencies(rope[0].rope)[0], theirs.double().numpy(), rtol=1e-6)


# --------------------------------------------------------------------------- GGUF refusals name the GGUF key


def _gguf(path, **kv):
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    values = {
        "llama.context_length": 256,
        "llama.embedding_length": 64,
        "llama.block_count": 2,
        "llama.attention.head_count": 4,
        "llama.rope.freq_base": 10000.0,
        **kv,
    }
    for key, value in values.items():
        if isinstance(value, float):
            w.add_float32(key, value)
        elif value < 0:
            w.add_int64(key, value)
        else:
            w.add_uint64(key, value)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


GGUF_KEYS = [
    ({"llama.context_length": 10**15}, "llama.context_length"),
    ({"llama.context_length": 0}, "llama.context_length"),
    ({"llama.rope.freq_base": -1.0}, "llama.rope.freq_base"),
    ({"llama.rope.freq_base": 0.0}, "llama.rope.freq_base"),
    ({"llama.rope.freq_base": float("inf")}, "llama.rope.freq_base"),
    ({"llama.attention.head_count": 10**6, "llama.embedding_length": 2 * 10**6}, "llama.attention.head_count"),
    ({"llama.attention.key_length": 7}, "llama.attention.key_length"),
    ({"llama.attention.key_length": 10**7}, "llama.attention.key_length"),
    ({"llama.block_count": 0}, "llama.block_count"),
]


@pytest.mark.parametrize("kv,key", GGUF_KEYS, ids=[str(k) for k, _ in GGUF_KEYS])
def test_gguf_refusals_name_the_gguf_key(tmp_path, capsys, kv, key):
    path = _gguf(tmp_path / "m.gguf", **kv)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err, err
    translated = {"max_position_embeddings", "rope_theta", "num_attention_heads", "head_dim", "num_hidden_layers"}
    assert not any(name in err.split(str(path))[-1].replace(key, "") for name in translated), err


def test_gguf_key_names_leave_the_path_alone(tmp_path, capsys):
    folder = tmp_path / "head_dim_rope_theta"
    folder.mkdir()
    path = _gguf(folder / "m.gguf", **{"llama.context_length": 0})
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "llama.context_length" in err


# --------------------------------------------------------------------------- an orbax directory named like a file


@pytest.mark.parametrize("name", ["x.msgpack", "x.safetensors", "X.SafeTensors", "x.bin", "x.gguf", "x.json"])
def test_convert_orbax_refuses_a_file_suffix(tiny_checkpoint, tmp_path, capsys, name):
    pytest.importorskip("orbax.checkpoint")
    out = tmp_path / name
    source = tiny_checkpoint("gpt2").path
    capsys.readouterr()
    code = main(["convert", str(source), "--out", str(out), "--format", "orbax"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "a directory name for an orbax checkpoint" in err and len(err.splitlines()) == 1, err
    assert not os.path.lexists(out) and list(tmp_path.iterdir()) == []
