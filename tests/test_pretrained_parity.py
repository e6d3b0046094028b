"""TransformerInput.from_pretrained reproduces Hugging Face's own embedding output.

The reference is the PyTorch model itself (transformers + torch==2.13.0): GPT-2's
``hidden_states[0]``, BERT's and RoBERTa's ``embeddings(...)`` output, OPT's decoder and BART's
encoder ``hidden_states[0]``, all in eval mode.

Tolerance, in float32 ulps of the output's magnitude: ``max |ours - HF| <= ULPS * ulp(max |HF|)``
(``ulp(x) = np.spacing(np.float32(x))``). A LayerNorm of a sum of embeddings rounds several
times in either implementation, so a few ulps of the largest output value is the honest
bound; an absolute 1e-6 would be 1 ulp at values in [8, 16) and 8 ulps in [1, 2).
Measured (``python benchmarks/parity_report.py``): at most 4 ulps, on the real
all-MiniLM-L6-v2 over tokenised English text (values up to ~7, so 1.9e-6 absolute).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import TINY_FAMILIES
from flax import nnx

import flax_posenc as fp
from flax_posenc import PositionLimitError

ULPS = 8


def ulps_of_magnitude(got, expected) -> float:
    """``max |got - expected|`` in float32 ulps of ``max |expected|`` (the output's magnitude)."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape
    return float(np.abs(got - expected).max() / np.spacing(np.float32(np.abs(expected).max())))


def assert_close(got, expected):
    assert ulps_of_magnitude(got, expected) <= ULPS


def hf_embedding_output(family, model, ids, types=None, mask=None):
    """Hugging Face's embedding output for ``ids`` (numpy int), float32 numpy."""
    t = lambda x: None if x is None else torch.from_numpy(np.asarray(x, np.int64))  # noqa: E731
    with torch.no_grad():
        if family in ("bert", "roberta", "xlm-roberta", "mpnet", "electra", "distilbert"):
            kwargs = {"input_ids": t(ids)}
            if types is not None:
                kwargs["token_type_ids"] = t(types)
            out = model.embeddings(**kwargs)
        elif family == "bart":
            out = model.encoder(input_ids=t(ids), attention_mask=t(mask), output_hidden_states=True).hidden_states[0]
        else:  # gpt2, gpt_neo, opt: the decoder's first hidden state is the embedding sum
            out = model(input_ids=t(ids), attention_mask=t(mask), output_hidden_states=True).hidden_states[0]
    return out.float().numpy()


def inputs_for(family, vocab=100):
    rng = np.random.default_rng(0)
    ids = rng.integers(3, vocab, (3, 12))
    types = mask = None
    if family in ("roberta", "xlm-roberta", "mpnet"):
        ids[1, 9:] = 1  # right padding with the padding id
        ids[2, :4] = 1  # left padding
    if family in ("bert", "electra"):
        types = np.zeros_like(ids)
        types[:, 6:] = 1
        types[2, 9:] = 2 if family == "bert" else 1
    if family in ("opt", "gpt2"):
        mask = np.ones_like(ids)
        mask[1, :5] = 0  # left padding, as batched generation does
    return ids, types, mask


def ours(module_kind, path, ids, types, mask):
    kwargs = dict(
        token_type_ids=None if types is None else jnp.asarray(types),
        attention_mask=None if mask is None else jnp.asarray(mask),
    )
    if module_kind == "nnx":
        block = fp.nnx.TransformerInput.from_pretrained(path)
        graphdef, state = nnx.split(block)
        fn = jax.jit(lambda s, i, k: nnx.merge(graphdef, s)(i, **k))
        return np.asarray(fn(state, jnp.asarray(ids), kwargs))
    module, variables = fp.linen.TransformerInput.from_pretrained(path)
    return np.asarray(jax.jit(lambda v, i, k: module.apply(v, i, **k))(variables, jnp.asarray(ids), kwargs))


@pytest.mark.parametrize("module_kind", ["nnx", "linen"])
@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_tiny_checkpoint_parity(tiny_checkpoint, family, module_kind):
    ckpt = tiny_checkpoint(family)
    ids, types, mask = inputs_for(family)
    expected = hf_embedding_output(family, ckpt.model, ids, types, mask)
    got = ours(module_kind, ckpt.path, ids, types, mask)
    assert_close(got, expected)


@pytest.mark.parametrize("family", ["gpt2", "bert", "roberta", "opt"])
def test_head_model_checkpoints_parity(tiny_checkpoint, family):
    """Checkpoints of task-head classes carry prefixes (transformer., bert., model.decoder.)."""
    ckpt = tiny_checkpoint(family, head=True)
    ids, types, mask = inputs_for(family)
    base = ckpt.base if family != "opt" else ckpt.model.model
    expected = hf_embedding_output(family, base, ids, types, mask)
    assert_close(ours("nnx", ckpt.path, ids, types, mask), expected)


def test_bin_checkpoint_parity(tiny_bin_checkpoint):
    ids, types, mask = inputs_for("bert")
    expected = hf_embedding_output("bert", tiny_bin_checkpoint.model, ids, types)
    assert_close(ours("nnx", tiny_bin_checkpoint.path, ids, types, mask), expected)


def real_text_ids(minilm_dir, rows=2, length=512):
    """English text (this repository's README and design notes) through the checkpoint's own tokenizer."""
    from pathlib import Path

    from tokenizers import Tokenizer

    root = Path(__file__).resolve().parents[1]
    text = " ".join(
        (root / name).read_text(encoding="utf-8") for name in ("README.md", "docs/conversion.md", "docs/rope-alibi.md")
    )
    tokenizer = Tokenizer.from_file(str(Path(minilm_dir) / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert len(ids) >= rows * length
    return np.asarray(ids[: rows * length], np.int64).reshape(rows, length)


def test_real_minilm_parity_on_real_text(minilm_dir):
    """Tokenised English text: the distribution of ids and outputs a user sees (values up to ~7)."""
    from transformers import BertModel

    model = BertModel.from_pretrained(minilm_dir).eval()
    ids = real_text_ids(minilm_dir)
    types = np.zeros_like(ids)
    types[:, 256:] = 1
    expected = hf_embedding_output("bert", model, ids, types)
    got = ours("nnx", minilm_dir, ids, types, None)
    assert_close(got, expected)


def test_real_minilm_parity(minilm_dir):
    """The real pretrained BERT all-MiniLM-L6-v2: the whole input block on its real weights."""
    from transformers import BertModel

    model = BertModel.from_pretrained(minilm_dir).eval()
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 30000, (2, 512))
    types = np.zeros_like(ids)
    types[:, 300:] = 1
    expected = hf_embedding_output("bert", model, ids, types)
    block = fp.nnx.TransformerInput.from_pretrained(minilm_dir)
    assert block.spec.position.num_positions == 512 and block.spec.dim == 384
    got = np.asarray(block(jnp.asarray(ids), token_type_ids=jnp.asarray(types)))
    assert_close(got, expected)
    with pytest.raises(
        PositionLimitError,
        match=r"bert position table \(.*position_embeddings.weight\) holds 512 positions \(0\.\.511\); asked for position 512, 1 past the end",
    ):
        block(jnp.zeros((1, 513), jnp.int32))


def test_full_size_gpt2_limit_is_1024(gpt2_full_size):
    from transformers import GPT2Model

    block = fp.nnx.TransformerInput.from_pretrained(gpt2_full_size.path)
    assert block.spec.vocab_size == 50257 and block.spec.position.num_positions == 1024
    graphdef, state = nnx.split(block)
    embed = jax.jit(lambda s, i: nnx.merge(graphdef, s)(i))
    ids = np.random.default_rng(2).integers(0, 50257, (1, 1024))
    model = GPT2Model.from_pretrained(gpt2_full_size.path).eval()
    expected = hf_embedding_output("gpt2", model, ids)
    assert_close(np.asarray(embed(state, jnp.asarray(ids))), expected)
    with pytest.raises(
        PositionLimitError,
        match=r"gpt2 position table \(wpe.weight\) holds 1024 positions \(0\.\.1023\); asked for position 1024, 1 past the end",
    ):
        embed(state, jnp.zeros((1, 1025), jnp.int32))


def test_incremental_decoding_matches_hf_positions(tiny_checkpoint):
    """GPT-2 with a start offset equals HF's embedding of the same tokens at those positions."""
    ckpt = tiny_checkpoint("gpt2")
    block = fp.nnx.TransformerInput.from_pretrained(ckpt.path)
    ids = np.arange(3, 13)[None]
    with torch.no_grad():
        pos = torch.arange(20, 30)[None]
        expected = (ckpt.model.wte(torch.from_numpy(ids)) + ckpt.model.wpe(pos)).numpy()
    assert_close(np.asarray(block(jnp.asarray(ids), start=20)), expected)


def test_dim_mismatch_is_refused(tmp_path):
    """A table whose width differs from the word embeddings cannot make an input block."""
    from flax_posenc.conversion.table import InputBlockWeights, PositionTable
    from flax_posenc.pretrained import spec_from_weights

    weights = InputBlockWeights(
        position=PositionTable(np.zeros((8, 4), np.float32), "gpt2", "wpe.weight", source="x/model.safetensors"),
        word_embeddings=np.zeros((10, 6), np.float32),
    )
    with pytest.raises(
        ValueError,
        match=r"x/model.safetensors: position table wpe.weight has dim 4, but the word embeddings have dim 6",
    ):
        spec_from_weights(weights)
