"""The example models (examples/models) under careless input (issue 34): the documented exception
types, one line each, never garbage output. Tiny random checkpoints from transformers."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from model_checkpoints import build, load_example

import flax_posenc as fp

common = load_example("common")
DECODERS = ("gpt2", "llama", "bloom", "gpt2_linen")
HF_KIND = {"gpt2": "gpt2", "llama": "llama", "bloom": "bloom", "gpt2_linen": "gpt2"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {kind: _built(tmp_path_factory, kind) for kind in ("gpt2", "llama", "bloom")}


def _built(factory, kind):
    path = factory.mktemp(kind)
    build(kind, path)
    return path


# --------------------------------------------------------------------------- dtype


@pytest.mark.parametrize("kind", DECODERS)
@pytest.mark.parametrize("dtype", [jnp.int32, np.int8, "uint8", jnp.bool_, "int4", "complex64", "not-a-dtype"])
def test_from_pretrained_refuses_a_non_floating_dtype(checkpoints, kind, dtype):
    example = load_example(kind)
    with pytest.raises(ValueError) as info:
        example.from_pretrained(checkpoints[HF_KIND[kind]], dtype=dtype)
    message = str(info.value)
    assert message.startswith("dtype: expected a floating dtype") and "\n" not in message, message


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, "float16", np.float32])
def test_floating_dtypes_are_still_taken(dtype):
    assert common.float_dtype(dtype) == jnp.dtype(dtype)


# --------------------------------------------------------------------------- max_new_tokens


@pytest.fixture(scope="module")
def models(checkpoints):
    return {kind: load_example(kind).from_pretrained(checkpoints[kind]) for kind in ("gpt2", "bloom")}


@pytest.mark.parametrize("kind", ["gpt2", "bloom"])
@pytest.mark.parametrize("n", [2**31, 2**31 - 1, 2**32 + 5, 10**20, np.int64(2**40)])
def test_huge_max_new_tokens_is_the_documented_value_error(models, kind, n):
    example = load_example(kind)
    with pytest.raises(ValueError) as info:  # PositionLimitError is a ValueError (GPT-2's limit)
        example.generate(models[kind], np.array([[5, 6]]), n)
    message = str(info.value)
    assert "max_new_tokens" in message and "\n" not in message, message
    assert not isinstance(info.value, OverflowError)
    if kind == "bloom":  # no position limit: int32 positions bound the sequence
        assert message.startswith("max_new_tokens: expected at most 2147483645"), message


def test_max_new_tokens_at_the_int32_bound_is_checked_exactly():
    common.check_generation_length(2, 2**31 - 3, None, "bloom")  # the last position is 2**31 - 2: fits
    with pytest.raises(ValueError, match="expected at most 2147483645"):
        common.check_generation_length(2, 2**31 - 2, None, "bloom")


# --------------------------------------------------------------------------- the command line


def _cli(kind, path, *extra, run=None):
    example = load_example(kind)
    with pytest.raises(SystemExit) as info:
        common.cli(kind, example.from_pretrained, [str(path), *extra], run=run)
    return str(info.value)


@pytest.mark.parametrize("content", [[1, 2], "text", 3, None])
def test_generation_config_that_is_not_an_object_is_one_line(checkpoints, tmp_path, content):
    import shutil

    path = tmp_path / "ckpt"
    shutil.copytree(checkpoints["gpt2"], path)
    (path / "generation_config.json").write_text(json.dumps(content))
    line = _cli("gpt2", path, "--prompt-ids", "1,2")
    assert line.startswith(f"error: {path / 'generation_config.json'}: expected a JSON object, found ")
    assert "\n" not in line


@pytest.mark.parametrize("name", ["model.gguf", "Model.GGUF"])
def test_a_gguf_is_refused_for_what_it_is(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"GGUF" + bytes(60))
    (tmp_path / "tokenizer.json").write_text("{}")  # a GGUF holds a tokenizer: never "has no tokenizer"
    for args in (["--prompt", "hello"], ["--prompt-ids", "1,2"]):
        line = _cli("llama", path, *args)
        assert "found a GGUF file, which the example models do not read" in line and "tokenizer" not in line, line
    with pytest.raises(fp.CheckpointError, match="found a GGUF file"):
        load_example("llama").from_pretrained(path)


@pytest.mark.parametrize(
    "error",
    [
        jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1836011208704 bytes.\nTraceback..."),
        MemoryError("Unable to allocate 1.67 TiB"),
    ],
    ids=["xla", "numpy"],
)
def test_device_errors_in_the_command_line_are_one_line(checkpoints, error):
    def run(*args, **kwargs):
        raise error

    line = _cli("bloom", checkpoints["bloom"], "--prompt-ids", "1,2", "--max-new-tokens", "5", run=run)
    assert line.startswith(f"error: {type(error).__name__}: ") and "\n" not in line, line
