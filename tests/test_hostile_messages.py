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
        assert len(out.strip().splitlines()) == 1, out  # the verdict: one line, never a forged second


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


@pytest.mark.parametrize("command", [["families"], ["families", "--json"]])
def test_stdout_closed_by_its_reader_is_quiet(command):
    """``flax-posenc families | head``: the reader goes away; no "Broken pipe" line, exit 141."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = f"import sys; from flax_posenc.report.cli import main; sys.exit(main({command!r}))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.readline()  # as head: read a little, then stop reading
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == "", err
