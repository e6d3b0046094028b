"""Hostile and faulty checkpoints (issue 12): containment, bounded parsing, typed configs, no crash.

Every case asserts the promise of docs/security.md: the API raises only CheckpointError /
PositionLimitError / ValueError (one line naming the file), the CLI exits 2 with one line and no
traceback, and every file outside the checkpoint and the output is byte-identical afterwards
(nothing outside is written, truncated or created). Checkpoints are tiny GPT-2/RoBERTa layouts
written with ``safetensors.numpy`` (no torch needed except for the ``.bin`` cases).
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from flax_posenc.conversion import (
    CheckpointError,
    export_position_table,
    load_input_block,
    load_position_table,
)
from flax_posenc.errors import PositionLimitError
from flax_posenc.report import cli

DOCUMENTED = (CheckpointError, PositionLimitError, ValueError)
ROWS, DIM, VOCAB = 8, 4, 10


# --------------------------------------------------------------------------- helpers


def gpt2_tensors(rows: int = ROWS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "wpe.weight": rng.standard_normal((rows, DIM)).astype(np.float32),
        "wte.weight": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
        "ln_f.weight": np.ones(DIM, np.float32),
        "ln_f.bias": np.zeros(DIM, np.float32),
    }


def gpt2_config(**extra) -> dict:
    return {"model_type": "gpt2", "n_positions": ROWS, "n_embd": DIM, "vocab_size": VOCAB, **extra}


def write_ckpt(folder: Path, config: dict | None = None, tensors: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(gpt2_config() if config is None else config))
    save_file(gpt2_tensors() if tensors is None else tensors, str(folder / "model.safetensors"))
    return folder


def raw_safetensors(path: Path, header: bytes | str, data: bytes = b"") -> Path:
    blob = header.encode() if isinstance(header, str) else header
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (links not followed) -> its bytes."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink() and os.stat(p).st_size < 1 << 20:
                out[str(p)] = p.read_bytes()
    return out


@pytest.fixture
def world(tmp_path):
    """``tmp_path/outside`` (files a hostile checkpoint aims at) and ``tmp_path/src`` (the checkpoint)."""
    outside = tmp_path / "outside"
    write_ckpt(outside)
    save_file(gpt2_tensors(), str(outside / "x.safetensors"))
    (outside / "x.bin").write_bytes(b"not really torch")
    (outside / "secret.txt").write_text("secret")
    src = write_ckpt(tmp_path / "src")
    return tmp_path, outside, src


def one_line_error(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return code, out, err


# --------------------------------------------------------------------------- 1. index targets

INDEX = "model.safetensors.index.json"


def _target(tmp_path: Path, src: Path, name: str) -> str:
    """Lay out what a hostile shard name points at, and return the name."""
    outside = tmp_path / "outside"
    if name == "link.safetensors":
        (src / name).symlink_to(outside / "x.safetensors")
    elif name == "zero.safetensors":
        (src / name).symlink_to("/dev/zero")
    elif name == "fifo.safetensors":
        os.mkfifo(src / name)
    elif name == "dir.safetensors":
        (src / name).mkdir()
    elif name == "dangling.safetensors":
        (src / name).symlink_to(src / "nowhere.safetensors")
    elif name == "up/x.safetensors":
        (src / "up").symlink_to(outside)
    elif name == "other.safetensors.index.json":
        (src / name).write_text(json.dumps({"weight_map": {"wpe.weight": INDEX}}))
    return name.format(outside=outside, outside_rel=str(outside).lstrip("/"))


HOSTILE_SHARDS = [
    "../outside/x.safetensors",
    "a/../../outside/x.safetensors",
    "{outside}/x.safetensors",
    "{outside}/x.bin",
    "../outside/x.bin",
    "../" * 40 + "{outside_rel}/x.safetensors",
    "..\\outside\\x.safetensors",
    "./../outside/x.safetensors",
    "../src/../outside/x.safetensors",
    "../out/model.safetensors",
    "/dev/zero",
    "/etc/passwd",
    INDEX,
    "other.safetensors.index.json",
    "config.json",
    "",
    "a\x00.safetensors",
    "link.safetensors",
    "zero.safetensors",
    "fifo.safetensors",
    "dir.safetensors",
    "missing.safetensors",
    "dangling.safetensors",
    "up/x.safetensors",
]


def _sharded(tmp_path: Path, src: Path, shard: str) -> None:
    name = _target(tmp_path, src, shard)
    (src / "model.safetensors").unlink()
    (src / INDEX).write_text(
        json.dumps({"metadata": {"total_size": 1}, "weight_map": {k: name for k in gpt2_tensors()}})
    )


@pytest.mark.parametrize("shard", HOSTILE_SHARDS)
@pytest.mark.parametrize("action", ["load", "block", "export"])
def test_index_targets_never_leave_the_checkpoint(world, shard, action):
    tmp_path, outside, src = world
    _sharded(tmp_path, src, shard)
    before = snapshot(tmp_path)
    with pytest.raises(CheckpointError) as info:
        if action == "load":
            load_position_table(src)
        elif action == "block":
            load_input_block(src)
        else:
            export_position_table(src, np.zeros((ROWS + 2, DIM), np.float32), tmp_path / "out")
    one_line_error(info.value)
    assert snapshot(tmp_path) == before  # nothing outside read-then-written, truncated or created
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "src"]


@pytest.mark.parametrize("shard", HOSTILE_SHARDS[::2])
@pytest.mark.parametrize("command", ["check", "extend"])
def test_index_targets_cli_exit_2(world, capsys, shard, command):
    tmp_path, outside, src = world
    _sharded(tmp_path, src, shard)
    before = snapshot(tmp_path)
    argv = [command, str(src), "--length", "12"] + (["--out", str(tmp_path / "out")] if command == "extend" else [])
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- 2. symlinks in the source


def _plant(tmp_path: Path, src: Path, kind: str) -> None:
    outside = tmp_path / "outside"
    if kind == "file link out":
        (src / "leak.txt").symlink_to(outside / "secret.txt")
    elif kind == "dir link out":
        (src / "leakdir").symlink_to(outside)
    elif kind == "dev zero":
        (src / "zeros.dat").symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(src / "pipe")
    elif kind == "loop":
        (src / "loop").symlink_to(src)
    elif kind == "dangling":
        (src / "gone.txt").symlink_to(src / "never-there")
    elif kind == "nested link out":
        (src / "sub").mkdir()
        (src / "sub" / "leak").symlink_to(outside / "secret.txt")
    elif kind == "relative link out":
        (src / "rel.txt").symlink_to("../outside/secret.txt")


SOURCE_LINKS = [
    "file link out",
    "dir link out",
    "dev zero",
    "fifo",
    "loop",
    "dangling",
    "nested link out",
    "relative link out",
]


@pytest.mark.parametrize("kind", SOURCE_LINKS)
@pytest.mark.parametrize("via", ["api", "cli"])
def test_export_refuses_links_out_of_the_source_and_special_files(world, capsys, kind, via):
    tmp_path, outside, src = world
    _plant(tmp_path, src, kind)
    before = snapshot(tmp_path)
    if via == "api":
        with pytest.raises(CheckpointError) as info:
            export_position_table(src, np.zeros((ROWS + 2, DIM), np.float32), tmp_path / "out")
        one_line_error(info.value)
    else:
        code, _, err = run_cli(capsys, "extend", str(src), "--length", "10", "--out", str(tmp_path / "out"))
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "src"]  # no out, no temporary


def test_links_inside_the_source_are_copied_as_regular_files(world):
    tmp_path, _, src = world
    (src / "notes.txt").write_text("notes")
    (src / "alias.txt").symlink_to("notes.txt")
    out = export_position_table(src, np.zeros((ROWS + 2, DIM), np.float32), tmp_path / "out")
    assert not (out / "alias.txt").is_symlink() and (out / "alias.txt").read_text() == "notes"


def test_overwrite_refuses_a_parent_of_the_source(tmp_path):
    src = write_ckpt(tmp_path / "parent" / "src")
    before = snapshot(tmp_path)
    for target in (tmp_path / "parent", tmp_path):
        with pytest.raises(CheckpointError, match="found a path that contains the source"):
            export_position_table(src, np.zeros((ROWS + 2, DIM), np.float32), target, overwrite=True)
    assert snapshot(tmp_path) == before


def test_export_onto_the_source_weights_file_is_refused(world):
    tmp_path, _, src = world
    before = snapshot(tmp_path)
    with pytest.raises(CheckpointError, match="found a path that is inside the source"):
        export_position_table(src, np.zeros((ROWS + 2, DIM), np.float32), src / "model.safetensors", overwrite=True)
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- 3. what SOURCE is


@pytest.mark.parametrize(
    "kind, found",
    [
        ("fifo", "FIFO"),
        ("devzero", "character device"),
        ("dangling", "dangling"),
        ("configdir", "a directory"),
        ("weightsdir", "a directory"),
        ("weightsfifo", "FIFO"),
    ],
)
def test_special_sources_are_named_for_what_they_are(tmp_path, capsys, kind, found):
    src = tmp_path / "src"
    if kind == "fifo":
        os.mkfifo(src)
    elif kind == "devzero":
        src.symlink_to("/dev/zero")
    elif kind == "dangling":
        src.symlink_to(tmp_path / "nothing")
    else:
        write_ckpt(src)
        name = "config.json" if kind == "configdir" else "model.safetensors"
        (src / name).unlink()
        if kind == "weightsfifo":
            os.mkfifo(src / name)
        else:
            (src / name).mkdir()
    with pytest.raises(CheckpointError) as info:
        load_position_table(src)
    assert found in one_line_error(info.value) and "no such file" not in str(info.value)
    code, _, err = run_cli(capsys, "inspect", str(src))
    assert code == 2 and found in err


@pytest.mark.parametrize("target", ["/proc/version", "/proc/self/status"])
def test_a_virtual_file_named_safetensors_is_named_for_what_it_is(tmp_path, capsys, target):
    src = tmp_path / "model.safetensors"
    src.symlink_to(target)  # stat says 0 bytes, reading gives more
    message = (
        f"{src}: expected a safetensors file whose size is known (a regular file on disk), "
        "found a file that reports 0 bytes but holds more (a virtual file, such as under /proc?)"
    )
    with pytest.raises(CheckpointError) as info:
        load_position_table(src)
    assert one_line_error(info.value) == message
    code, _, err = run_cli(capsys, "inspect", str(src))
    assert code == 2 and "-8 bytes" not in err and "a virtual file" in err


# --------------------------------------------------------------------------- 4. bounded JSON

DEEP_OBJ = '{"a":' * 5000 + "1" + "}" * 5000
JUST_TOO_DEEP = "[" * 70 + "]" * 70
HOSTILE_JSON = {
    "deep object": DEEP_OBJ,
    "deep list": "[" * 100000 + "]" * 100000,
    "just too deep": JUST_TOO_DEEP,
    "5000-digit int": '{"n_positions": 1' + "0" * 5000 + "}",
    "40-digit int": '{"n_positions": 1' + "0" * 40 + "}",
    "negative huge int": '{"x": -' + "9" * 4400 + "}",
    "NaN": '{"n_positions": NaN}',
    "Infinity": '{"n_positions": Infinity}',
    "truncated": '{"model_type": "gpt2", "n_posit',
    "top-level list": "[1, 2, 3]",
    "not utf-8": b'{"model_type": "\xff\xfe"}',
    "empty": "",
}


def _place_json(src: Path, where: str, payload: str | bytes) -> None:
    raw = payload.encode() if isinstance(payload, str) else payload
    if where == "config":
        (src / "config.json").write_bytes(raw)
    elif where == "index":
        (src / "model.safetensors").unlink()
        (src / INDEX).write_bytes(raw)
    else:
        raw_safetensors(src / "model.safetensors", raw)


@pytest.mark.parametrize("name", list(HOSTILE_JSON))
@pytest.mark.parametrize("where", ["config", "index", "header"])
def test_hostile_json_is_one_line(tmp_path, where, name):
    src = write_ckpt(tmp_path / "src")
    _place_json(src, where, HOSTILE_JSON[name])
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        load_position_table(src)
    one_line_error(info.value)
    assert time.perf_counter() - t0 < 2.0


def test_oversized_json_is_refused_before_reading(tmp_path):
    src = write_ckpt(tmp_path / "src")
    with open(src / "config.json", "r+b") as f:
        f.truncate(200 << 20)  # sparse: 200 MB of zeros, never read
    with pytest.raises(CheckpointError, match="at most"):
        load_position_table(src)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    where=st.sampled_from(["config", "index", "header"]),
    value=json_values,
    garbage=st.binary(max_size=40),
    mode=st.sampled_from(["json", "bytes", "merge"]),
)
def test_fuzzed_json_raises_only_checkpoint_error(tmp_path_factory, where, value, garbage, mode):
    src = write_ckpt(tmp_path_factory.mktemp("fz"))
    if mode == "json":
        payload: bytes = json.dumps(value).encode()
    elif mode == "bytes":
        payload = garbage
    else:  # a plausible document with a fuzzed field
        doc = gpt2_config() if where == "config" else {"weight_map": {"wpe.weight": value}}
        doc["n_positions" if where == "config" else "metadata"] = value
        payload = json.dumps(doc).encode()
    _place_json(src, where, payload)
    try:
        load_position_table(src)
    except CheckpointError as e:
        one_line_error(e)


# --------------------------------------------------------------------------- 5. sizes before allocation

BAD_SINUSOIDAL = [
    "sinusoidal:²:4",
    "sinusoidal:4:²",
    "sinusoidal:١٢:4",
    "sinusoidal:100000000000:768",
    "sinusoidal:1000000:1000000",
    "sinusoidal:4:99999999999",
    "sinusoidal:0:4",
    "sinusoidal:-4:4",
    "sinusoidal:1e3:4",
    "sinusoidal:4",
    "sinusoidal:4:4:4",
    "sinusoidal: 4:4",
    "sinusoidal:" + "9" * 5000 + ":4",
]


@pytest.mark.parametrize("source", BAD_SINUSOIDAL)
def test_bad_sinusoidal_sources(capsys, source):
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        load_position_table(source)
    one_line_error(info.value)
    code, _, err = run_cli(capsys, "inspect", source)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert time.perf_counter() - t0 < 2.0


def test_huge_sinusoidal_names_the_memory():
    with pytest.raises(CheckpointError, match=r"100000000000 x 768 = .*GiB"):
        load_position_table("sinusoidal:100000000000:768")


@pytest.mark.parametrize("length", [10**11, 10**9, 2**40])
def test_extend_to_a_huge_length_is_refused_before_allocation(world, capsys, length):
    tmp_path, _, src = world
    code, _, err = run_cli(capsys, "extend", str(src), "--length", str(length), "--out", str(tmp_path / "out"))
    assert code == 2 and "GiB" in err and str(length) in err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- 6. typed config fields

SMALL_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 128}
BAD_RELATIVE = [
    {"num_attention_heads": "8"},
    {"num_attention_heads": True},
    {"num_attention_heads": 4.0},
    {"num_attention_heads": [4]},
    {"num_attention_heads": -4},
    {"hidden_size": "64"},
    {"hidden_size": 2},
    {"head_dim": "16"},
    {"head_dim": [16]},
    {"max_position_embeddings": "128"},
    {"max_position_embeddings": 1.5},
    {"max_position_embeddings": -1},
    {"rope_theta": "10000"},
    {"rope_theta": [10000.0]},
    {"rope_theta": 1e308},
    {"rope_scaling": {"rope_type": "linear", "factor": 1e308}},
    {"rope_scaling": {"rope_type": "linear", "factor": "2"}},
    {"rope_scaling": {"rope_type": "linear", "factor": [2.0]}},
    {"rope_scaling": {"rope_type": 3, "factor": 2.0}},
    {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": "32"}},
    {
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": [1],
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        }
    },
    {"rope_scaling": "linear"},
    {"partial_rotary_factor": "0.5"},
    {"model_type": "gptj", "n_head": 4, "n_embd": 2, "rotary_dim": 8},
    {"model_type": "gptj", "n_head": 4, "n_embd": 64, "rotary_dim": "8"},
    {"model_type": "gptj", "n_head": 4, "n_embd": 64, "rotary_dim": 64},
    {"model_type": "mpt", "n_heads": 4, "d_model": 64, "attn_config": {"alibi_bias_max": [8]}},
    {"model_type": "mpt", "n_heads": 4, "d_model": 64, "attn_config": {"alibi_bias_max": 1e308}},
    {"model_type": "bloom", "n_head": "4", "hidden_size": 64},
    {"model_type": "mpt", "n_heads": 4, "d_model": 64, "max_seq_len": "2048"},
]


@pytest.mark.parametrize("patch", BAD_RELATIVE, ids=lambda p: json.dumps(p)[:60])
def test_mistyped_relative_config_fields(tmp_path, capsys, patch):
    src = tmp_path / "m"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({**SMALL_LLAMA, **patch}))
    code, _, err = run_cli(capsys, "check", str(src), "--length", "16")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "config.json" in err, err


BAD_LEARNED = [
    {"pad_token_id": -5},
    {"pad_token_id": "1"},
    {"pad_token_id": [1]},
    {"pad_token_id": 1.0},
    {"max_position_embeddings": "12"},
    {"max_position_embeddings": 12.0},
    {"layer_norm_eps": [1e-5]},
    {"layer_norm_eps": "1e-5"},
    {"layer_norm_eps": 1e308},
]


def _roberta(tmp_path: Path, **extra) -> Path:
    rng = np.random.default_rng(1)
    tensors = {
        "embeddings.position_embeddings.weight": rng.standard_normal((12, DIM)).astype(np.float32),
        "embeddings.word_embeddings.weight": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
        "embeddings.token_type_embeddings.weight": np.zeros((1, DIM), np.float32),
        "embeddings.LayerNorm.weight": np.ones(DIM, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(DIM, np.float32),
    }
    config = {"model_type": "roberta", "max_position_embeddings": 12, "pad_token_id": 1, "hidden_size": DIM, **extra}
    return write_ckpt(tmp_path / "roberta", config, tensors)


@pytest.mark.parametrize("patch", BAD_LEARNED, ids=lambda p: json.dumps(p))
def test_mistyped_learned_config_fields(tmp_path, capsys, patch):
    src = _roberta(tmp_path, **patch)
    with pytest.raises(CheckpointError) as info:
        load_input_block(src)
    assert "config.json" in one_line_error(info.value)
    code, out, err = run_cli(capsys, "check", str(src), "--length", "11")
    if "layer_norm_eps" not in patch:  # the table alone does not need the eps
        assert code == 2, (out, err)


def test_negative_pad_never_overstates_the_limit(tmp_path, capsys):
    src = _roberta(tmp_path, pad_token_id=-5)
    code, out, err = run_cli(capsys, "check", str(src), "--length", "12")
    assert code == 2 and "pad_token_id" in err and "ok" not in out
    assert load_position_table(_roberta(tmp_path / "ok")).num_positions == 10  # the honest limit: 12 - 2


# --------------------------------------------------------------------------- 7. corrupted weights


def test_float8_elsewhere_refuses_only_that_tensor(tmp_path):
    src = write_ckpt(tmp_path / "src")
    tensors = gpt2_tensors()
    header, data, pos = {}, b"", 0
    for name, arr in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [pos, pos + len(raw)]}
        data, pos = data + raw, pos + len(raw)
    header["h.0.attn.scale"] = {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [pos, pos + 4]}
    blob = json.dumps(header).encode()
    raw_safetensors(src / "model.safetensors", blob + b" " * (-len(blob) % 8), data + b"\x01" * 4)
    t = load_position_table(src)
    np.testing.assert_array_equal(t.weights, tensors["wpe.weight"])
    from flax_posenc.conversion.readers import SafetensorsReader, read_float

    with pytest.raises(CheckpointError, match="F8_E4M3"):
        read_float(SafetensorsReader(src / "model.safetensors"), "h.0.attn.scale", ndim=1, what="scale")


def _bin_ckpt(tmp_path: Path, state: dict) -> Path:
    import torch

    src = tmp_path / "bin"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(gpt2_config()))
    torch.save(state, src / "pytorch_model.bin")
    return src


def _torch_state():
    import torch

    return {k: torch.from_numpy(v) for k, v in gpt2_tensors().items()}


def test_bin_with_a_short_storage_record_is_refused(tmp_path):
    import zipfile

    src = _bin_ckpt(tmp_path, _torch_state())
    path = src / "pytorch_model.bin"
    with zipfile.ZipFile(path) as z:
        items = [(i, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for info, data in items:
            if info.filename.endswith("/data/0"):
                data = data[: len(data) // 2]  # half of the first storage
            z.writestr(info, data)
    with pytest.raises(CheckpointError, match="storage record") as info:
        load_position_table(src)
    one_line_error(info.value)


def test_bin_sparse_tensor_is_refused_by_name(tmp_path):
    state = _torch_state()
    state["wte.weight"] = state["wte.weight"].to_sparse()
    src = _bin_ckpt(tmp_path, state)
    assert load_position_table(src).num_positions == ROWS  # the table itself is dense: fine
    with pytest.raises(CheckpointError, match="wte.weight.*sparse"):
        load_input_block(src)


def test_weights_only_refusal_names_the_blocked_global(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    state = _torch_state()
    state["x"] = Evil()
    src = _bin_ckpt(tmp_path, state)
    with pytest.raises(CheckpointError) as info:
        load_position_table(src)
    text = one_line_error(info.value).split(": ", 1)[1]  # after the file name
    assert "system" in text and "blocked" in text and "weights_only" not in text and "False" not in text


def _converted(tmp_path: Path, mutate) -> Path:
    from flax import serialization

    from flax_posenc.pretrained import save_converted

    src = _roberta(tmp_path)
    out = save_converted(src, tmp_path / "c.msgpack")
    blob = serialization.msgpack_restore(out.read_bytes())
    mutate(blob)
    out.write_bytes(serialization.msgpack_serialize(blob))
    return out


@pytest.mark.parametrize("case", ["nan", "inf", "missing", "extra", "wrong width", "config lies", "not float"])
def test_converted_msgpack_is_checked(tmp_path, case):
    from flax_posenc.pretrained import load_pretrained

    def mutate(blob):
        p = blob["params"]
        for k in ("position_embeddings", "word_embeddings"):
            p[k] = np.array(p[k])  # writable copies
        if case == "nan":
            p["position_embeddings"][3, 1] = np.nan
        elif case == "inf":
            p["word_embeddings"][0, 0] = np.inf
        elif case == "missing":
            del p["word_embeddings"]
        elif case == "extra":
            p["evil"] = np.zeros((2, DIM), np.float32)
        elif case == "wrong width":
            p["position_embeddings"] = np.zeros((12, DIM + 1), np.float32)
        elif case == "config lies":
            blob["spec"]["position"]["num_positions"] = 10**6
        else:
            p["word_embeddings"] = p["word_embeddings"].astype(np.int32)

    path = _converted(tmp_path, mutate)
    with pytest.raises(CheckpointError) as info:
        load_pretrained(path)
    assert str(path) in one_line_error(info.value)


# --------------------------------------------------------------------------- 8. CLI exit codes and --json


def test_exit_codes_0_1_2(world, capsys):
    _, _, src = world
    assert run_cli(capsys, "check", str(src), "--length", str(ROWS))[0] == 0
    assert run_cli(capsys, "check", str(src), "--length", str(ROWS + 1))[0] == 1
    assert run_cli(capsys, "check", str(src / "nope"), "--length", "3")[0] == 2
    assert run_cli(capsys, "check", str(src), "--length", "²")[0] == 2


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyError("k"), TypeError("t"), RecursionError(), MemoryError()])
def test_internal_errors_exit_3_in_one_line(monkeypatch, capsys, exc):
    def explode(source):
        raise exc

    monkeypatch.setattr(cli, "load_source", explode)
    code, out, err = run_cli(capsys, "check", "sinusoidal:8:4", "--length", "3")
    assert code == 3 and len(err.strip().splitlines()) == 1 and "please report" in err and out == ""
    code = cli.main(["check", "sinusoidal:8:4", "--length", "3", "--debug"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" in err
    code = cli.main(["check", "sinusoidal:8:4", "--length", "3", "--json"])
    out, err = capsys.readouterr()
    assert code == 3 and json.loads(out)["kind"] == "internal" and json.loads(out)["exit_code"] == 3


@pytest.mark.parametrize(
    "argv, code",
    [
        (["check", "/nonexistent/x", "--length", "3", "--json"], 2),
        (["inspect", "sinusoidal:²:4", "--json"], 2),
        (["check", "sinusoidal:8:4", "--length", "0", "--json"], 2),
        (["inspect", "--json"], 2),
    ],
)
def test_json_errors_are_json_on_stdout(capsys, argv, code):
    got, out, err = run_cli(capsys, *argv)
    assert got == code and err == ""
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["exit_code"] == code and doc["error"]


def test_json_output_is_strict(capsys):
    assert cli.dumps_json({"a": float("inf"), "b": [float("nan"), 1.0]}) == '{"a": null, "b": [null, 1.0]}'
    for source in ("sinusoidal:64:16", "sinusoidal:1:4"):  # one row: no pair, distances were Infinity
        code, out, _ = run_cli(capsys, "inspect", source, "--json")
        assert code == 0
        json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


# --------------------------------------------------------------------------- 9. the Hub


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path


def test_hub_unreachable_is_fast_and_names_hf_hub_offline(empty_hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    t0 = time.perf_counter()
    code, _, err = run_cli(capsys, "check", "someone/model", "--length", "3")
    assert time.perf_counter() - t0 < 5.0
    assert code == 2 and "unreachable" in err and "HF_HUB_OFFLINE" in err and "not cached" in err


def test_hub_not_cached_while_offline(empty_hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_cli(capsys, "check", "someone/model", "--length", "3")
    assert code == 2 and "HF_HUB_OFFLINE=1" in err and "no cached" in err and "unreachable" not in err


def test_hub_file_not_in_the_repository(empty_hub, monkeypatch, capsys):
    from flax_posenc.conversion import hub_download, sources

    def missing(repo_id, filename, storage, **kw):  # the repository answered: no such file
        return None

    monkeypatch.setattr(hub_download, "download", missing)
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout=3.0: None)
    code, _, err = run_cli(capsys, "check", "someone/model", "--length", "3")
    assert code == 2 and "not in the repository" in err and "unreachable" not in err


def test_hub_cache_entry_pointing_out_of_the_repo_is_refused(empty_hub, monkeypatch, world):
    tmp_path, outside, _ = world
    sha = "0" * 40
    repo = tmp_path / "home" / "hub" / "models--evil--m"
    (repo / "snapshots" / sha).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    (repo / "snapshots" / sha / "config.json").write_text(json.dumps(gpt2_config()))
    (repo / "snapshots" / sha / "model.safetensors").symlink_to(outside / "x.safetensors")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="outside"):
        load_position_table("evil/m")


# --------------------------------------------------------------------------- 10. API: documented types only

CONFIG_FIELDS = [
    "model_type",
    "n_positions",
    "max_position_embeddings",
    "pad_token_id",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "scale_embedding",
    "d_model",
    "hidden_size",
    "word_embed_proj_dim",
    "type_vocab_size",
    "num_attention_heads",
    "rope_scaling",
    "rope_theta",
    "n_head",
    "n_embd",
]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    base=st.sampled_from(["gpt2", "roberta", "bart", "llama", "mpt"]),
    fields=st.dictionaries(st.sampled_from(CONFIG_FIELDS), json_values, min_size=1, max_size=3),
)
def test_fuzzed_configs_raise_only_documented_types(tmp_path_factory, base, fields):
    """Any field of any type in config.json: the API raises only the documented types, and
    the CLI never reaches exit 3 (an internal error) or prints a traceback."""
    folder = tmp_path_factory.mktemp("cfg")
    src = _roberta(folder) if base == "roberta" else write_ckpt(folder / "g")
    config = json.loads((src / "config.json").read_text())
    if base in ("bart", "llama", "mpt"):
        config = {**SMALL_LLAMA, "model_type": base} if base != "bart" else {**config, "model_type": "bart"}
    config.update(fields)
    (src / "config.json").write_text(json.dumps(config))
    for call in (load_position_table, load_input_block):
        try:
            call(src)
        except DOCUMENTED as e:
            one_line_error(e)
    code = cli.main(["check", str(src), "--length", "4"])
    assert code in (0, 1, 2)


# --------------------------------------------------------------------------- 11. the checkpoint's own files


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_weights_or_config_linking_out_of_the_checkpoint_are_refused(world, name):
    tmp_path, outside, src = world
    (src / name).unlink()
    (src / name).symlink_to(outside / name)
    before = snapshot(tmp_path)
    calls = {
        "dir": lambda: load_position_table(src),
        "file": lambda: load_position_table(src / "model.safetensors"),
        "export": lambda: export_position_table(src, np.zeros((ROWS + 2, DIM), np.float32), tmp_path / "out"),
    }
    for how, call in calls.items():
        if how == "file" and name == "model.safetensors":
            assert load_position_table(src / "model.safetensors").num_positions == ROWS  # the file the user named
            continue
        with pytest.raises(CheckpointError) as info:
            call()
        assert "outside" in one_line_error(info.value)
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_hub_cache_snapshot_directory_with_links_into_blobs_loads_and_exports(tmp_path):
    """A sharded snapshot as huggingface_hub lays it out: every file a link into ../../blobs."""
    repo = tmp_path / "hub" / "models--org--m"
    snap, blobs = repo / "snapshots" / ("a" * 40), repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    tensors = gpt2_tensors()
    files = {
        "config.json": json.dumps(gpt2_config()).encode(),
        INDEX: json.dumps(
            {
                "weight_map": {
                    "wpe.weight": "s1.safetensors",
                    "wte.weight": "s2.safetensors",
                    "ln_f.weight": "s2.safetensors",
                    "ln_f.bias": "s2.safetensors",
                }
            }
        ).encode(),
    }
    save_file({"wpe.weight": tensors["wpe.weight"]}, str(blobs / "b1"))
    save_file({k: v for k, v in tensors.items() if k != "wpe.weight"}, str(blobs / "b2"))
    for i, (name, data) in enumerate(files.items()):
        (blobs / f"j{i}").write_bytes(data)
        (snap / name).symlink_to(f"../../blobs/j{i}")
    (snap / "s1.safetensors").symlink_to("../../blobs/b1")
    (snap / "s2.safetensors").symlink_to("../../blobs/b2")
    np.testing.assert_array_equal(load_position_table(snap).weights, tensors["wpe.weight"])
    out = export_position_table(snap, np.zeros((ROWS + 2, DIM), np.float32), tmp_path / "out")
    assert load_position_table(out).num_positions == ROWS + 2
    assert not any(p.is_symlink() for p in out.iterdir())


def test_hub_id_whose_cache_entries_are_links_into_blobs(tmp_path, monkeypatch):
    """The real cache layout (links into blobs/, hashed names): resolved by id, offline."""
    repo = tmp_path / "home" / "hub" / "models--org--linked"
    sha = "b" * 40
    snap, blobs = repo / "snapshots" / sha, repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    (blobs / "c0ffee").write_text(json.dumps(gpt2_config()))
    save_file(gpt2_tensors(), str(blobs / "deadbeef"))
    (snap / "config.json").symlink_to("../../blobs/c0ffee")
    (snap / "model.safetensors").symlink_to("../../blobs/deadbeef")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert load_position_table("org/linked").num_positions == ROWS
    out = export_position_table("org/linked", np.zeros((ROWS + 2, DIM), np.float32), tmp_path / "out")
    assert load_position_table(out).num_positions == ROWS + 2


def test_hub_probe_is_bounded_when_dns_hangs(monkeypatch):
    import socket

    from flax_posenc.conversion import sources

    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: time.sleep(30))
    t0 = time.perf_counter()
    why = sources.hub_reachable(timeout=0.3)
    assert time.perf_counter() - t0 < 10.0 and "no DNS answer" in why  # a 30 s hang, bounded (slack for load)


@pytest.mark.parametrize("source", [123, None, 1.5, b"bytes/path", ["a"], "bad\x00path", Path("nul\x00")])
def test_non_path_sources_are_bad_arguments(tmp_path, source):
    for call in (
        lambda: load_position_table(source),
        lambda: load_input_block(source),
        lambda: export_position_table(source, np.zeros((4, 4), np.float32), tmp_path / "o"),
        lambda: export_position_table(write_ckpt(tmp_path / "s"), np.zeros((9, DIM), np.float32), source),
    ):
        with pytest.raises(CheckpointError) as info:
            call()
        one_line_error(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["s"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(
        st.sampled_from(["..", ".", "outside", "src", "x.safetensors", "x.bin", "", "/", "\\", "a"]),
        min_size=1,
        max_size=8,
    )
)
def test_fuzzed_shard_names_never_leave_the_checkpoint(tmp_path_factory, parts):
    base = tmp_path_factory.mktemp("sh")
    outside = write_ckpt(base / "outside")
    save_file(gpt2_tensors(), str(outside / "x.safetensors"))
    src = write_ckpt(base / "src")
    name = "/".join(parts)
    (src / "model.safetensors").unlink()
    (src / INDEX).write_text(json.dumps({"weight_map": {k: name for k in gpt2_tensors()}}))
    before = snapshot(base)
    with pytest.raises(CheckpointError) as info:
        export_position_table(src, np.zeros((ROWS + 2, DIM), np.float32), base / "out")
    one_line_error(info.value)
    assert snapshot(base) == before and sorted(p.name for p in base.iterdir()) == ["outside", "src"]


# --------------------------------------------------------------------------- accepted values that poison the output
# A value that would give NaN, all zeros, a truncated rotation or a one-row table is refused where
# it is given (Python arguments) or read (a converted .msgpack's stored spec), in one line.

POISON_ARGUMENTS = [
    ({"layer_norm_eps": float("nan")}, "layer_norm_eps: expected a finite non-negative number, got nan"),
    ({"layer_norm_eps": -1e-5}, "layer_norm_eps: expected a finite non-negative number, got -1e-05"),
    ({"layer_norm_eps": float("inf")}, "layer_norm_eps: expected a finite non-negative number, got inf"),
    ({"layer_norm_eps": "1e-5"}, "layer_norm_eps: expected a number, got '1e-5'"),
    ({"layer_norm_eps": True}, "layer_norm_eps: expected a number, got True"),
    ({"embed_scale": float("nan")}, "embed_scale: expected a finite number, got nan"),
    ({"dtype": "int32"}, r"dtype: expected a floating dtype \(float32, bfloat16, ...\) or None, got int32"),
    ({"dtype": bool}, r"dtype: expected a floating dtype \(float32, bfloat16, ...\) or None, got bool"),
    ({"dtype": "complex64"}, r"dtype: expected a floating dtype \(float32, bfloat16, ...\) or None, got complex64"),
    ({"dtype": object}, r"dtype: expected a floating dtype \(float32, bfloat16, ...\) or None, got object"),
    ({"dtype": "nonsense"}, r"dtype: expected a floating dtype \(float32, bfloat16, ...\) or None, got 'nonsense'"),
    ({"num_positions": True}, "num_positions: a learned table needs a positive integer, got True"),
    ({"type_vocab_size": True}, "type_vocab_size: expected a non-negative integer, got True"),
    ({"position_offset": True}, "offset: expected a non-negative integer, got True"),
    ({"pad_token_id": "1"}, "pad_token_id: expected an integer or None, got '1'"),
    ({"pad_token_id": True}, "pad_token_id: expected an integer or None, got True"),
    ({"layer_norm": "yes"}, "layer_norm: expected True or False, got 'yes'"),
]


@pytest.mark.parametrize("patch, message", POISON_ARGUMENTS, ids=lambda p: str(p)[:40])
@pytest.mark.parametrize("via", ["spec", "nnx", "linen"])
def test_poisoning_arguments_are_refused_when_given(patch, message, via):
    import flax_posenc as fp
    from flax_posenc.block import InputSpec

    arguments = {"num_positions": ROWS, **patch}
    with pytest.raises(ValueError, match=f"^{message}$"):
        if via == "spec":
            InputSpec.from_arguments(VOCAB, DIM, **arguments)
        elif via == "nnx":
            from flax import nnx

            fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, rngs=nnx.Rngs(0), **arguments)
        else:
            fp.linen.TransformerInput.from_arguments(VOCAB, DIM, **arguments)


STORED_POISON = [
    (("layer_norm_eps",), float("nan"), "layer_norm_eps: expected a finite non-negative number, got nan"),
    (("layer_norm_eps",), -1.0, "layer_norm_eps: expected a finite non-negative number, got -1.0"),
    (("layer_norm_eps",), float("inf"), "layer_norm_eps: expected a finite non-negative number, got inf"),
    (("layer_norm_eps",), "1e-5", "layer_norm_eps: expected a finite non-negative number, got '1e-5'"),
    (("dtype",), "int32", "dtype: expected a floating dtype (float32, bfloat16, ...) or None, got int32"),
    (("dtype",), "bool", "dtype: expected a floating dtype (float32, bfloat16, ...) or None, got bool"),
    (("dtype",), "complex64", "dtype: expected a floating dtype (float32, bfloat16, ...) or None, got complex64"),
    (("dtype",), "object", "dtype: expected a floating dtype (float32, bfloat16, ...) or None, got object"),
    (("position", "num_positions"), True, "num_positions: a learned table needs a positive integer, got True"),
    (("pad_token_id",), "1", "pad_token_id: expected an integer or None, got '1'"),
]


@pytest.mark.parametrize("keys, value, message", STORED_POISON, ids=lambda p: str(p)[:30])
def test_poisoning_values_stored_in_a_msgpack_are_refused_when_read(tmp_path, keys, value, message):
    from flax_posenc.pretrained import load_pretrained

    def mutate(blob):
        where = blob["spec"]
        for key in keys[:-1]:
            where = where[key]
        where[keys[-1]] = value

    path = _converted(tmp_path, mutate)
    with pytest.raises(CheckpointError) as info:
        load_pretrained(path)
    assert one_line_error(info.value) == f"{path}: expected a valid 'spec' (version 2), found {message}"


@pytest.mark.parametrize(
    "call", ["apply_rope", "apply_rope_qk q", "apply_rope_qk k", "apply_rotary", "module", "rotate_qk"]
)
def test_rope_refuses_integer_queries_and_keys(call):
    import jax.numpy as jnp
    from flax import nnx

    import flax_posenc as fp

    good, bad = jnp.ones((1, 4, 2, 8)), jnp.ones((1, 4, 2, 8), jnp.int32)
    cos, sin = fp.rotary_cos_sin(jnp.arange(4), 8)
    name = {"apply_rope_qk q": "q", "apply_rope_qk k": "k", "rotate_qk": "q"}.get(call, "x")
    with pytest.raises(TypeError, match=f"^{name}: expected a floating array \\(queries or keys\\), got dtype int32$"):
        if call == "apply_rope":
            fp.apply_rope(bad, 8)
        elif call == "apply_rope_qk q":
            fp.apply_rope_qk(bad, good, 8)
        elif call == "apply_rope_qk k":
            fp.apply_rope_qk(good, bad, 8)
        elif call == "apply_rotary":
            fp.apply_rotary(bad, cos[:, None], sin[:, None])
        elif call == "module":
            fp.nnx.RotaryEmbedding(8)(bad)
        else:
            fp.nnx.RotaryEmbedding(8).rotate_qk(bad, good)
    del nnx


# --------------------------------------------------------------------------- sizes bounded before allocation
# Every size a config.json or a tensor header can carry is checked against its bound
# (flax_posenc/bounds.py) before anything is allocated: one line through the API
# (CheckpointError naming the file), exit 2 in the CLI for inspect, check and plot -- never
# MemoryError, never exit 3, never minutes of CPU.

HUGE = 10**12
T5_KEY = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
OVERSIZED = {
    "bloom heads": (
        {"model_type": "bloom", "n_head": HUGE, "hidden_size": HUGE * 64},
        None,
        "expected n_head at most 65536 heads, found 1000000000000",  # the config's own field (issue 34)
    ),
    "mpt heads": (
        {"model_type": "mpt", "n_heads": HUGE, "d_model": HUGE * 64},
        None,
        "expected n_heads at most 65536 heads, found 1000000000000",
    ),
    "falcon heads": (
        {"model_type": "falcon", "num_attention_heads": HUGE, "hidden_size": HUGE * 64, "alibi": True},
        None,
        "expected num_attention_heads at most 65536 heads, found 1000000000000",
    ),
    "rope head_dim": (
        {**SMALL_LLAMA, "hidden_size": 2**41, "num_attention_heads": 2},
        None,
        "head_dim: expected at most 65536 (checked before the frequencies are allocated), got 1099511627776",
    ),
    "rope declared limit": (
        {**SMALL_LLAMA, "max_position_embeddings": 2**62},
        None,
        "expected max_position_embeddings at most 1099511627776 positions, found 4611686018427387904",
    ),
    "rope scaled limit": (
        {**SMALL_LLAMA, "max_position_embeddings": 2**30, "rope_scaling": {"rope_type": "linear", "factor": 1e6}},
        None,
        "factor: expected a scaled limit (factor * max_position_embeddings 1073741824) of at most 1099511627776 positions",
    ),
    "llama3 original": (
        {
            **SMALL_LLAMA,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 2**62,
            },
        },
        None,
        "original_max_position_embeddings: expected at most 1099511627776 positions",
    ),
    "t5 max_distance": (
        {"model_type": "t5", "relative_attention_num_buckets": 32, "relative_attention_max_distance": HUGE},
        (32, 2),
        "expected relative_attention_max_distance at most 1048576, found 1000000000000",
    ),
    "t5 buckets": (
        {"model_type": "t5", "relative_attention_num_buckets": 2**20, "relative_attention_max_distance": 2**20},
        (2**20, 1),  # a 2 MB float16 table
        "num_buckets: expected at most 65536 (checked before the bucket edges are computed), got 1048576",
    ),
}


def _sized_source(tmp_path: Path, config: dict, table: tuple | None) -> Path:
    src = tmp_path / "m"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(config))
    if table is not None:
        save_file({T5_KEY: np.zeros(table, np.float16)}, str(src / "model.safetensors"))
    return src


@pytest.mark.parametrize("name", list(OVERSIZED))
def test_sizes_from_a_file_are_bounded_before_allocation(tmp_path, capsys, name):
    from flax_posenc.conversion import inspect_source

    config, table, message = OVERSIZED[name]
    src = _sized_source(tmp_path, config, table)
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        inspect_source(str(src))
    line = one_line_error(info.value)
    assert str(src) in line and message in line
    for argv in (
        ["inspect", str(src)],
        ["check", str(src), "--length", "16"],
        ["plot", str(src), "--out", str(tmp_path / "p")],
    ):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and message in err and "\n" not in err.strip(), (argv, code, err)
    assert not list((tmp_path / "p").iterdir())  # plot proves the folder writable first; it writes nothing
    assert time.perf_counter() - started < 60  # minutes of CPU (or an out-of-memory kill) before the bound


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda fp: fp.AlibiConfig(HUGE),
            r"num_heads: expected at most 65536 ALiBi heads \(one slope each\), got 1000000000000$",
        ),
        (
            lambda fp: fp.alibi_slopes(2**20),
            r"num_heads: expected at most 65536 ALiBi heads \(one slope each\), got 1048576$",
        ),
        (lambda fp: fp.AlibiConfig(4, max_positions=2**62), "max_positions: expected at most 1099511627776 positions"),
        (lambda fp: fp.RopeConfig(head_dim=2**40), "head_dim: expected at most 65536"),
        (lambda fp: fp.RopeConfig(8, max_position_embeddings=10**30), "max_position_embeddings: expected at most"),
        (
            lambda fp: fp.RopeConfig(8, rope_type="yarn", factor=1e300, original_max_position_embeddings=4096),
            r"factor: expected a scaled limit \(factor \* original_max_position_embeddings 4096\) of at most "
            r"1099511627776 positions, got 1e\+300 \* 4096 = 4.096e\+303",
        ),
        (lambda fp: fp.relative_position_bucket(0, num_buckets=2**20), "num_buckets: expected at most 65536"),
        (lambda fp: fp.relative_position_bucket(0, max_distance=HUGE), "max_distance: expected at most 1048576"),
    ],
)
def test_sizes_from_arguments_are_bounded_before_allocation(make, message):
    import flax_posenc as fp

    with pytest.raises(ValueError, match=message):
        make(fp)


def test_each_bound_is_exact():
    """One past each bound is refused, the bound itself is accepted (the comparison is not loose)."""
    import flax_posenc as fp
    from flax_posenc.bounds import MAX_BUCKETS, MAX_DISTANCE, MAX_HEAD_DIM, MAX_HEADS, MAX_POSITIONS, check_bound
    from flax_posenc.relative_bias_config import BucketConfig

    for bound in (MAX_BUCKETS, MAX_DISTANCE, MAX_HEAD_DIM, MAX_HEADS, MAX_POSITIONS):
        assert check_bound("x", bound, bound) == bound
        with pytest.raises(ValueError, match=f"^x: expected at most {bound}, got {bound + 1}$"):
            check_bound("x", bound + 1, bound)
    assert fp.AlibiConfig(MAX_HEADS).num_heads == MAX_HEADS
    with pytest.raises(ValueError, match="^num_heads: expected at most 65536"):
        fp.AlibiConfig(MAX_HEADS + 1)
    with pytest.raises(ValueError, match="^head_dim: expected at most 65536"):
        fp.RopeConfig(head_dim=MAX_HEAD_DIM + 2)
    assert (
        fp.RopeConfig(8, rope_type="linear", factor=2.0, max_position_embeddings=MAX_POSITIONS // 2).limit
        == MAX_POSITIONS
    )
    with pytest.raises(ValueError, match="^factor: expected a scaled limit"):
        fp.RopeConfig(8, rope_type="linear", factor=2.0, max_position_embeddings=MAX_POSITIONS // 2 + 1)
    with pytest.raises(ValueError, match="num_buckets: expected at most 65536"):
        BucketConfig(MAX_BUCKETS + 2, MAX_DISTANCE)
    with pytest.raises(ValueError, match="max_distance: expected at most 1048576"):
        BucketConfig(32, MAX_DISTANCE + 1)


def test_largest_allowed_sizes_are_fast(tmp_path):
    """At the bounds themselves, the reports and figures stay bounded: sampled curves, one pass for the edges."""
    import flax_posenc as fp
    from flax_posenc.relative_bias_config import BucketConfig
    from flax_posenc.report import plots

    started = time.perf_counter()
    buckets = BucketConfig(2**16, 2**20)
    assert buckets.describe() and len(buckets.log_edges()) == 2**15 - 2**14 - 1
    plots.plot_bucket_map(buckets, tmp_path / "b.png")
    plots.plot_alibi_bias(fp.AlibiConfig(2**16), tmp_path / "a.png")
    assert time.perf_counter() - started < 60
    with pytest.raises(ValueError, match="^length: expected at most 2048 positions per matrix, got 4096$"):
        plots.plot_alibi_bias(fp.AlibiConfig(8), tmp_path / "c.png", length=4096)


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}


@pytest.mark.parametrize(
    "field, value", [("beta_fast", -5), ("beta_slow", 0), ("beta_fast", "32"), ("beta_slow", -1.0)]
)
def test_yarn_betas_are_checked_when_read(tmp_path, capsys, field, value):
    """beta_fast=-5 once passed inspect and failed in plot with 'math domain error', naming nothing."""
    src = _sized_source(tmp_path, {**SMALL_LLAMA, "rope_scaling": {**YARN, field: value}}, None)
    for argv in (
        ["inspect", str(src)],
        ["check", str(src), "--length", "16"],
        ["plot", str(src), "--out", str(tmp_path / "p")],
    ):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and str(src) in err and field in err and "domain" not in err, (argv, err)


def test_yarn_beta_fast_below_beta_slow_warns_as_transformers_does():
    import flax_posenc as fp

    with pytest.warns(UserWarning, match=r"^beta_fast: expected at least beta_slow \(32\), got 1 "):
        fp.RopeConfig(8, rope_type="yarn", factor=4.0, beta_fast=1, beta_slow=32, original_max_position_embeddings=16)


# --------------------------------------------------------------------------- gaps: nesting, sibling folders, --json exits


def _nested(kind: str, depth: int) -> str:
    opening, closing = ('{"a":', "}") if kind == "object" else ("[", "]")
    return opening * depth + "1" + closing * depth


@pytest.mark.parametrize("kind", ["object", "list"])
@pytest.mark.parametrize("where", ["config", "index", "header"])
def test_json_nesting_is_refused_for_its_depth(tmp_path, kind, where):
    """65 levels are refused as too deep (naming the bound); 64 levels are not refused for depth."""
    from flax_posenc.conversion.safety import MAX_JSON_DEPTH, parse_json

    assert MAX_JSON_DEPTH == 64
    parse_json(_nested(kind, 64), where="x", what="a test document")  # parses: depth 64 is allowed
    src = write_ckpt(tmp_path / "src")
    _place_json(src, where, _nested(kind, 65))
    with pytest.raises(CheckpointError) as info:
        load_position_table(src)
    assert one_line_error(info.value).endswith("(JSON nested at most 64 deep), found deeper nesting")


@pytest.mark.parametrize("how", ["index", "weights link", "config link"])
@pytest.mark.parametrize("sibling", ["src2", "src-evil", "src.bak"])
def test_containment_refuses_a_sibling_whose_name_starts_with_the_checkpoints(tmp_path, capsys, how, sibling):
    """A prefix check on path strings would let /x/src2 pass as inside /x/src."""
    src = write_ckpt(tmp_path / "src")
    other = write_ckpt(tmp_path / sibling, tensors=gpt2_tensors(rows=ROWS + 4))
    if how == "index":
        (src / "model.safetensors").unlink()
        weight_map = {k: f"../{sibling}/model.safetensors" for k in gpt2_tensors()}
        (src / INDEX).write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    else:
        name = "model.safetensors" if how == "weights link" else "config.json"
        (src / name).unlink()
        (src / name).symlink_to(other / name)
    before = snapshot(tmp_path)
    with pytest.raises(CheckpointError) as info:
        load_position_table(src)
    line = one_line_error(info.value)
    assert str(src) in line and "inside" in line, line
    code, _, err = run_cli(capsys, "check", str(src), "--length", "4")
    assert code == 2 and "inside" in err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("length, code, fits", [(ROWS, 0, True), (ROWS + 1, 1, False)])
def test_check_json_exit_codes_match_the_verdict(world, capsys, length, code, fits):
    _, _, src = world
    got, out, err = run_cli(capsys, "check", str(src), "--length", str(length), "--json")
    verdict = json.loads(out)
    assert got == code and verdict["fits"] is fits and err == ""
    assert verdict["excess"] == max(0, length - ROWS)


def test_llama3_high_freq_factor_below_low_warns_as_transformers_does():
    import flax_posenc as fp

    with pytest.warns(UserWarning, match=r"^high_freq_factor: expected more than low_freq_factor \(4.0\), got 1.0 "):
        fp.RopeConfig(
            16,
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=4.0,
            high_freq_factor=1.0,
            original_max_position_embeddings=8192,
        )
