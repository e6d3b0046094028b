"""Greedy decoding that serves real prompts, for every decoder of examples/models (GPT-2, Llama,
BLOOM in NNX and GPT-2 in Linen; one implementation in common.py): left-padded ragged batches,
stopping at eos, one compilation per length bucket, bfloat16, text in and out, bad input.
The reference is transformers' own ``generate(do_sample=False)`` on tiny random checkpoints."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_checkpoints import build, load_example

import flax_posenc as fp

common = load_example("common")
KINDS = ("gpt2", "llama", "bloom", "gpt2_linen")
HF_KIND = {"gpt2": "gpt2", "llama": "llama", "bloom": "bloom", "gpt2_linen": "gpt2"}
RNG = np.random.default_rng(1)
# a ragged batch of 3 prompts (5, 3 and 7 tokens) left-padded to 7 with token 1
LENGTHS = (5, 3, 7)
PAD = 1


def ragged_batch(lengths=LENGTHS, width=None, seed=1):
    rng = np.random.default_rng(seed)
    width = width or max(lengths)
    ids = np.full((len(lengths), width), PAD, np.int64)
    mask = np.zeros((len(lengths), width), np.int64)
    for row, n in enumerate(lengths):
        ids[row, width - n :] = rng.integers(2, 998, n)
        mask[row, width - n :] = 1
    return ids, mask


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    built = {}
    for kind in ("gpt2", "llama", "bloom"):
        path = tmp_path_factory.mktemp(kind)
        built[kind] = (path, build(kind, path))
    return built


class Ours:
    """One example model behind one calling convention: ``generate(ids, n, **kwargs)``."""

    def __init__(self, kind, path, dtype=jnp.float32, **kwargs):
        self.example = load_example(kind)
        self.loaded = self.example.from_pretrained(path, dtype=dtype, **kwargs)

    def generate(self, ids, max_new_tokens, **kwargs):
        if isinstance(self.loaded, tuple):  # Linen: (module, variables)
            return np.asarray(self.example.generate(*self.loaded, ids, max_new_tokens, **kwargs))
        return np.asarray(self.example.generate(self.loaded, ids, max_new_tokens, **kwargs))

    def cache(self, batch, length):
        model = self.loaded[0] if isinstance(self.loaded, tuple) else self.loaded
        return model.init_cache(batch, length)


@pytest.fixture(scope="module")
def models(checkpoints):
    return {kind: Ours(kind, checkpoints[HF_KIND[kind]][0]) for kind in KINDS}


def hf_generate(torch_model, ids, mask, max_new_tokens, **kwargs):
    import torch

    with torch.no_grad():
        out = torch_model.generate(
            torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            **kwargs,
        )
    return out.numpy()


@pytest.mark.parametrize("kind", KINDS)
def test_ragged_batch_stopping_at_eos_equals_hugging_face(kind, checkpoints, models):
    torch_model = checkpoints[HF_KIND[kind]][1]
    ids, mask = ragged_batch()
    # no stop: transformers' ids on the same left-padded batch (min_new_tokens keeps its config eos away)
    free = hf_generate(torch_model, ids, mask, 12, min_new_tokens=12)
    ours_free = models[kind].generate(ids, 12, attention_mask=mask)
    np.testing.assert_array_equal(ours_free, free)
    # eos = the token transformers generates at step 3 for row 0: row 0 stops early, padded after
    eos, pad = int(free[0, ids.shape[1] + 3]), 0
    expected = hf_generate(torch_model, ids, mask, 12, eos_token_id=eos, pad_token_id=pad)
    ours = models[kind].generate(ids, 12, attention_mask=mask, eos_token_id=eos, pad_token_id=pad)
    np.testing.assert_array_equal(ours, expected)
    row0 = list(ours[0, ids.shape[1] :])
    stop = row0.index(eos)
    assert stop <= 3 and all(t == pad for t in row0[stop + 1 :])


@pytest.mark.parametrize("kind", KINDS)
def test_unrolled_layers_equal_hugging_face(kind, checkpoints):
    """``from_pretrained(..., scan_layers=False)``: separate per-layer parameters and caches, a
    Python loop; the same ids as transformers on the ragged batch."""
    ours = Ours(kind, checkpoints[HF_KIND[kind]][0], scan_layers=False)
    if isinstance(ours.loaded, tuple):  # Linen: parameters h_0, h_1 instead of one stacked h
        assert {"h_0", "h_1"} <= set(ours.loaded[1]["params"]) and "h" not in ours.loaded[1]["params"]
    else:
        assert isinstance(getattr(ours.loaded, "h", None) or ours.loaded.layers, nnx.List)
    assert isinstance(ours.cache(1, 8), list) and len(ours.cache(1, 8)) == 2  # one {"k", "v"} per layer
    ids, mask = ragged_batch()
    expected = hf_generate(checkpoints[HF_KIND[kind]][1], ids, mask, 12, min_new_tokens=12)
    np.testing.assert_array_equal(ours.generate(ids, 12, attention_mask=mask), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_one_compilation_serves_a_bucket(kind, models):
    """Prompt lengths 5..8 and max_new_tokens 9..16 share one compiled program; 9 tokens do not.

    Batches of 3 rows, as the ragged batch above (7 tokens, 12 new: the same bucket), so that this
    test and that one compile the bucket's program once between them: the first call here
    compiles it, or finds it compiled."""
    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        counts = []
        for lengths, width, new in (((5, 4, 2), 5, 9), ((7, 2, 6), 7, 14), ((3, 8, 8), 8, 16), ((9, 9, 1), 9, 9)):
            ids, mask = ragged_batch(lengths, width, seed=width)
            out = models[kind].generate(ids, new, attention_mask=mask)
            assert out.shape == (3, width + new)
            counts.append(len(compiles))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    first = counts[0]  # 1, or 0 when the ragged-batch test compiled the bucket's program before
    assert first <= 1 and counts[:3] == [first] * 3, counts  # one program for the bucket (8 prompt, 16 new slots)
    assert counts[3] == first + 1, counts  # a 9-token prompt: the next bucket, one more program


def test_bucket_sizes():
    assert [common.bucket(n) for n in (1, 5, 8, 9, 16, 17, 1000)] == [8, 8, 8, 16, 16, 32, 1024]


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_parameters_and_cache(kind, checkpoints, models):
    ours = Ours(kind, checkpoints[HF_KIND[kind]][0], dtype=jnp.bfloat16)
    params = ours.loaded[1] if isinstance(ours.loaded, tuple) else nnx.state(ours.loaded, nnx.Param)
    assert {jnp.dtype(a.dtype) for a in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}
    assert {a.dtype for a in jax.tree.leaves(ours.cache(2, 8))} == {jnp.dtype(jnp.bfloat16)}
    ids, mask = ragged_batch()
    out = ours.generate(ids, 6, attention_mask=mask)
    assert out.shape == (3, 13) and out.min() >= 0 and out.max() < 1000
    np.testing.assert_array_equal(out[:, :7], ids)


def test_bad_input_is_one_line_naming_the_argument(models):
    ours = models["gpt2"]
    ids, mask = ragged_batch()
    cases = [
        (
            lambda: ours.generate([[5, 6, 7], [8, 9]], 4),
            "attention_mask: a ragged batch (prompt_ids rows of 2 to 3 tokens) needs left padding to one length "
            "and an attention_mask (1 for real tokens, 0 for padding)",
        ),
        (
            lambda: ours.generate(ids, 4, attention_mask=mask[:, ::-1]),
            "attention_mask: expected left padding (0s, then 1s) in every row; row 0 is 1111100 (a 0 after a 1)",
        ),
        (
            lambda: ours.generate(ids, 4, attention_mask=mask, eos_token_id=1000),
            "eos_token_id: expected a token id in 0..999 (the vocabulary), got 1000",
        ),
        (
            lambda: ours.generate(ids, 4, attention_mask=mask, eos_token_id=-1),
            "eos_token_id: expected a token id in 0..999 (the vocabulary), got -1",
        ),
        (
            lambda: ours.generate(ids, 4, attention_mask=mask[:, 1:]),
            "attention_mask: expected shape (3, 7) like prompt_ids, got (3, 6)",
        ),
        (
            lambda: ours.generate(ids, 4, attention_mask=np.zeros_like(mask)),
            "attention_mask: row 0 has no real token (all 0)",
        ),
        (
            lambda: ours.generate(ids, 0, attention_mask=mask),
            "max_new_tokens: expected a positive Python integer, got 0",
        ),
    ]
    for call, line in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == line


@pytest.mark.parametrize("kind", ("gpt2", "llama", "gpt2_linen"))
def test_limit_counts_real_tokens_before_compiling(kind, models):
    ours = models[kind]
    ids, mask = ragged_batch((59, 40), width=62)  # 62 columns, the longest prompt holds 59 real tokens
    assert ours.generate(ids, 5, attention_mask=mask).shape == (2, 67)  # positions 0..63: fits exactly
    with pytest.raises(fp.PositionLimitError, match=r"holds 64 positions \(0\.\.63\); a prompt of 59 tokens plus "):
        ours.generate(ids, 6, attention_mask=mask)


# ----------------------------------------------------------------------------- command line: text in, text out

CHAT = "{% for m in messages %}w3 {{ m['content'] }} w4 {% endfor %}{% if add_generation_prompt %}w5{% endif %}"


def word_tokenizer(path):
    """A word-level tokenizer for the tiny vocabulary (``w0`` .. ``w999``) with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({f"w{i}": i for i in range(1000)}, unk_token="w0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="w0", eos_token="w999", pad_token="w999")
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(path)
    return tokenizer


@pytest.fixture(scope="module")
def chat_checkpoint(checkpoints, tmp_path_factory):
    import shutil

    path = tmp_path_factory.mktemp("gpt2-chat")
    for file in checkpoints["gpt2"][0].iterdir():
        shutil.copy(file, path / file.name)
    return path, word_tokenizer(path)


def run_cli(kind, argv, capsys):
    example = load_example(kind)
    if kind == "gpt2_linen":
        example.main(argv)
    else:
        example.common.cli(example.__doc__, example.from_pretrained, argv)
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("kind", ("gpt2", "gpt2_linen"))
def test_command_line_text_in_text_out(kind, checkpoints, chat_checkpoint, capsys):
    path, tokenizer = chat_checkpoint
    lines = run_cli(kind, [str(path), "--prompt", "w12 w40 w7", "--prompt", "w8", "--max-new-tokens", "6"], capsys)
    # the chat template by hand: w3 <text> w4 w5; left-padded with the pad id 999; config eos 999
    ids = np.array([[3, 12, 40, 7, 4, 5], [999, 999, 3, 8, 4, 5]])
    mask = np.array([[1] * 6, [0, 0, 1, 1, 1, 1]])
    expected = hf_generate(checkpoints["gpt2"][1], ids, mask, 6, eos_token_id=999, pad_token_id=999)
    assert lines == [tokenizer.decode(row[6:], skip_special_tokens=True) for row in expected]
    assert all(line.startswith("w") for line in lines)


def test_command_line_token_ids_old_and_new_flag(checkpoints, capsys):
    path = str(checkpoints["gpt2"][0])
    expected = hf_generate(checkpoints["gpt2"][1], [[5, 6, 7]], [[1, 1, 1]], 4, eos_token_id=999, pad_token_id=999)
    old = run_cli("gpt2", [path, "--prompt", "5,6,7", "--max-new-tokens", "4"], capsys)  # the old --prompt IDS
    new = run_cli("gpt2", [path, "--prompt-ids", "5,6,7", "--max-new-tokens", "4"], capsys)
    assert old == new == [",".join(map(str, expected[0]))]
    ragged = run_cli("gpt2", [path, "--prompt-ids", "5,6,7", "--prompt-ids", "8", "--max-new-tokens", "4"], capsys)
    batch = hf_generate(
        checkpoints["gpt2"][1],
        [[5, 6, 7], [999, 999, 8]],
        [[1, 1, 1], [0, 0, 1]],
        4,
        eos_token_id=999,
        pad_token_id=999,
    )
    assert ragged == [",".join(map(str, batch[0])), ",".join(map(str, batch[1][2:]))]


def test_command_line_text_without_tokenizer_is_one_line(checkpoints):
    path = checkpoints["gpt2"][0]
    with pytest.raises(SystemExit) as info:
        common.cli("gpt2", load_example("gpt2").from_pretrained, [str(path), "--prompt", "hello"])
    assert str(info.value) == (
        f"error: --prompt: {path} has no tokenizer (tokenizer.json, tokenizer_config.json, vocab.json, "
        "tokenizer.model, spiece.model); pass --prompt-ids"
    )
