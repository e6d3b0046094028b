"""examples/models/bert.py on the real all-MiniLM-L6-v2 against transformers' BertModel, with
real text tokenized by transformers' tokenizer from the checkpoint's own tokenizer.json."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_checkpoints import load_example, minilm_texts

import flax_posenc as fp

bert = load_example("bert")


@pytest.fixture(scope="module")
def batch(minilm_dir):
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    enc = tokenizer(minilm_texts(minilm_dir), padding=True, truncation=True, max_length=512, return_tensors="np")
    assert enc["input_ids"].shape == (3, 512) and enc["attention_mask"][1].sum() < 20
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.fixture(scope="module")
def expected(minilm_dir, batch):
    import torch
    import transformers

    model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        return model(**{k: torch.tensor(v) for k, v in batch.items()}).last_hidden_state.numpy()


@pytest.fixture(scope="module")
def model(minilm_dir):
    return bert.from_pretrained(minilm_dir)


def test_last_hidden_state_and_sentence_embeddings_equal_hugging_face(model, batch, expected):
    graphdef, state = nnx.split(model)
    run = jax.jit(lambda s, ids, mask, types: nnx.merge(graphdef, s)(ids, mask, types))
    hidden = np.asarray(run(state, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]))
    real = batch["attention_mask"] == 1
    assert np.abs(hidden - expected)[real].max() < 1e-5  # every real token
    # padding rows (pooling ignores them) are rounding-sensitive: transformers' own "eager" and
    # "sdpa" attentions differ by 1.7e-4 there (benchmarks/models_parity.py)
    assert np.abs(hidden - expected)[~real].max() < 2e-4
    mask = batch["attention_mask"]
    reference = (expected * mask[..., None]).sum(1) / mask.sum(1)[:, None]
    assert np.abs(np.asarray(bert.mean_pool(jnp.asarray(hidden), mask)) - reference).max() < 1e-6


def test_513_tokens_raise_and_an_extended_table_runs_1000(model):
    model = nnx.clone(model)  # extend a copy, not the shared fixture
    with pytest.raises(fp.PositionLimitError, match=r"holds 512 positions \(0\.\.511\); asked for position 512"):
        model(np.full((1, 513), 1000, np.int32))
    model.extend_positions(1024)
    graphdef, state = nnx.split(model)
    hidden = jax.jit(lambda s, ids: nnx.merge(graphdef, s)(ids))(state, np.full((1, 1000), 1000, np.int32))
    assert hidden.shape == (1, 1000, 384) and bool(jnp.isfinite(hidden).all())
