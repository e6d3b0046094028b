"""Every family: tables and input blocks loaded from save_pretrained checkpoints equal the torch weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import TINY_CONFIGS, TINY_FAMILIES

from flax_posenc.conversion import FAMILIES, CheckpointError, detect_family, load_input_block, load_position_table
from flax_posenc.conversion.families import is_buffer, resolve_relative

# family -> (offset, positions_from, has token types, LayerNorm module path or None)
EXPECTED = {
    "gpt2": (0, "index", False, None),
    "gpt_neo": (0, "index", False, None),
    "bert": (0, "index", True, "embeddings.LayerNorm"),
    "roberta": (2, "non_padding_ids", True, "embeddings.LayerNorm"),
    "xlm-roberta": (2, "non_padding_ids", True, "embeddings.LayerNorm"),
    "mpnet": (2, "non_padding_ids", False, "embeddings.LayerNorm"),
    "distilbert": (0, "index", False, "embeddings.LayerNorm"),
    "electra": (0, "index", True, "embeddings.LayerNorm"),
    "opt": (2, "attention_mask", False, None),
    "bart": (2, "index", False, "encoder.layernorm_embedding"),
}
WORD = {
    "gpt2": "wte",
    "gpt_neo": "wte",
    "opt": "decoder.embed_tokens",
    "bart": "shared",
}
TOKEN_TYPE = "embeddings.token_type_embeddings"


def _np(t):
    return t.detach().float().numpy()


def test_every_family_row_is_covered():
    """A family row in the registry needs a tiny-config row in tests/conftest.py (and a line here)."""
    assert list(TINY_FAMILIES) == list(FAMILIES)
    assert set(TINY_CONFIGS) == set(FAMILIES) == set(EXPECTED)


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("head", [False, True], ids=["base", "head"])
def test_table_equals_torch_weights(tiny_checkpoint, family, head):
    ck = tiny_checkpoint(family, head=head)
    t = load_position_table(ck.path)
    offset = EXPECTED[family][0]
    assert t.family == family
    assert t.offset == offset
    np.testing.assert_array_equal(t.weights, ck.position_weight())
    assert t.dtype == np.float32
    # the config's limit is the usable context
    assert t.num_positions == 32  # every tiny config allows 32 positions
    assert t.rows == t.num_positions + offset
    if head:  # task-head classes store the block under a prefix
        assert t.key.startswith(("transformer.", "bert.", "roberta.", "mpnet.", "distilbert.", "electra.", "model."))


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_input_block_equals_torch_weights(tiny_checkpoint, family):
    ck = tiny_checkpoint(family)
    block = load_input_block(ck.path)
    offset, positions_from, has_tt, ln = EXPECTED[family]
    cfg = ck.model.config
    assert block.family == family
    assert block.positions_from == positions_from
    assert block.position.offset == offset
    np.testing.assert_array_equal(block.position.weights, ck.position_weight())
    word_attr = WORD.get(family, "embeddings.word_embeddings")
    np.testing.assert_array_equal(block.word_embeddings, _np(ck.module(word_attr).weight))
    if has_tt:
        np.testing.assert_array_equal(block.token_type_embeddings, _np(ck.module(TOKEN_TYPE).weight))
    else:
        assert block.token_type_embeddings is None
    if ln is None:
        assert block.layer_norm_scale is None and block.layer_norm_bias is None
    else:
        mod = ck.module(ln)
        np.testing.assert_array_equal(block.layer_norm_scale, _np(mod.weight))
        np.testing.assert_array_equal(block.layer_norm_bias, _np(mod.bias))
        assert block.layer_norm_eps == pytest.approx(mod.eps)
    if family == "bart":
        assert block.embed_scale == pytest.approx(math.sqrt(cfg.d_model))
        assert block.embed_scale == pytest.approx(ck.module("encoder.embed_tokens").embed_scale)
    else:
        assert block.embed_scale == 1.0
    if positions_from == "non_padding_ids":
        padding_idx = ck.module("embeddings").padding_idx
        assert block.pad_token_id == padding_idx
        assert block.position.offset == padding_idx + 1
    if family == "opt":
        assert block.pad_token_id == cfg.pad_token_id


def test_electra_block_is_before_embeddings_project(tiny_checkpoint):
    ck = tiny_checkpoint("electra")
    block = load_input_block(ck.path)
    assert block.position.dim == ck.model.config.embedding_size == 8
    assert block.word_embeddings.shape == (100, 8)


def test_roberta_real_size_limit_is_512(tiny_checkpoint):
    ck = tiny_checkpoint("roberta", max_position_embeddings=514)
    t = load_position_table(ck.path)
    assert (t.rows, t.offset, t.num_positions) == (514, 2, 512)
    np.testing.assert_array_equal(t.weights, ck.position_weight())


def test_roberta_offset_follows_pad_token_id(tiny_checkpoint):
    ck = tiny_checkpoint("roberta", pad_token_id=0, max_position_embeddings=33)
    block = load_input_block(ck.path)
    assert block.pad_token_id == 0 == ck.module("embeddings").padding_idx
    assert block.position.offset == 1 and block.position.num_positions == 32


def test_mpnet_padding_idx_is_fixed_at_1(tiny_checkpoint):
    ck = tiny_checkpoint("mpnet", pad_token_id=0)
    block = load_input_block(ck.path)
    assert block.pad_token_id == 1 == ck.module("embeddings").padding_idx
    assert block.position.offset == 2


def test_opt_offset_and_limit(tiny_checkpoint):
    ck = tiny_checkpoint("opt", head=True)
    t = load_position_table(ck.path)
    assert t.key == "model.decoder.embed_positions.weight"
    assert (t.rows, t.offset, t.num_positions) == (34, 2, ck.model.config.max_position_embeddings)


def test_opt_with_project_in_is_refused(tiny_checkpoint):
    ck = tiny_checkpoint("opt", word_embed_proj_dim=8)
    load_position_table(ck.path)  # the table itself is fine
    with pytest.raises(CheckpointError) as e:
        load_input_block(ck.path)
    assert str(e.value) == (
        f"{ck.path / 'config.json'}: expected a opt input block without a projection (word_embed_proj_dim == "
        "hidden_size), found decoder.project_in.weight, word_embed_proj_dim=8 != hidden_size=16 (project_in is not supported)"
    )


def test_bart_decoder_table_by_key(tiny_checkpoint):
    ck = tiny_checkpoint("bart", head=True)
    enc = load_position_table(ck.path)
    dec = load_position_table(ck.path, key="model.decoder.embed_positions.weight")
    assert enc.key == "model.encoder.embed_positions.weight"
    np.testing.assert_array_equal(dec.weights, _np(ck.module("decoder.embed_positions").weight))
    assert dec.offset == 2 and dec.num_positions == 32


def test_bart_without_scale_embedding(tiny_checkpoint):
    ck = tiny_checkpoint("bart", scale_embedding=False)
    assert load_input_block(ck.path).embed_scale == 1.0


def test_single_file_without_config_infers_family_from_keys(tiny_checkpoint, tmp_path):
    import shutil

    for family, head in [
        ("gpt2", False),
        ("gpt2", True),
        ("gpt_neo", False),
        ("roberta", True),
        ("opt", True),
        ("bart", False),
        ("distilbert", False),
        ("mpnet", False),
        ("electra", False),
        ("bert", True),
    ]:
        ck = tiny_checkpoint(family, head=head)
        f = tmp_path / f"{family}-{head}.safetensors"
        shutil.copy(ck.path / "model.safetensors", f)
        t = load_position_table(f)
        assert t.family == family, (family, head)
        assert t.offset == EXPECTED[family][0]
        np.testing.assert_array_equal(t.weights, ck.position_weight())


def test_unprefixed_bert_or_roberta_without_config_is_ambiguous(tiny_checkpoint, tmp_path):
    import shutil

    f = tmp_path / "model.safetensors"
    shutil.copy(tiny_checkpoint("bert").path / "model.safetensors", f)
    with pytest.raises(CheckpointError, match="bert, roberta") as e:
        load_position_table(f)
    assert "family=" in str(e.value)
    assert load_position_table(f, family="bert").num_positions == 32


def test_detect_family_rules():
    d = detect_family(
        [
            "bert.embeddings.position_embeddings.weight",
            "bert.embeddings.word_embeddings.weight",
            "bert.embeddings.token_type_embeddings.weight",
            "bert.embeddings.LayerNorm.gamma",
            "bert.embeddings.LayerNorm.beta",
            "bert.embeddings.position_ids",
        ]
    )
    assert d.family.name == "bert" and d.prefix == "bert."
    d = detect_family(["model.wpe.weight", "model.wte.weight"], {"model_type": "gpt2"})
    assert d.prefix == "model."  # generic prefix search
    with pytest.raises(CheckpointError, match="gpt2, gpt_neo, bert"):
        detect_family(["x"], {"model_type": "llama"})


def test_helpers():
    assert resolve_relative("model.encoder.", "../shared.weight") == "model.shared.weight"
    assert resolve_relative("encoder.", "../shared.weight") == "shared.weight"
    assert is_buffer("embeddings.position_ids") and is_buffer("h.0.attn.bias") and is_buffer("h.0.attn.masked_bias")
    assert not is_buffer("h.0.attn.c_attn.bias") and not is_buffer("embeddings.LayerNorm.bias")


def test_minilm_real_checkpoint(minilm_dir):
    import transformers

    t = load_position_table(minilm_dir)
    assert (t.family, t.key, t.rows, t.dim, t.offset, t.num_positions) == (
        "bert",
        "embeddings.position_embeddings.weight",
        512,
        384,
        0,
        512,
    )
    model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    np.testing.assert_array_equal(t.weights, _np(model.embeddings.position_embeddings.weight))
    block = load_input_block(minilm_dir)
    np.testing.assert_array_equal(block.word_embeddings, _np(model.embeddings.word_embeddings.weight))
    np.testing.assert_array_equal(block.token_type_embeddings, _np(model.embeddings.token_type_embeddings.weight))
    np.testing.assert_array_equal(block.layer_norm_scale, _np(model.embeddings.LayerNorm.weight))
    np.testing.assert_array_equal(block.layer_norm_bias, _np(model.embeddings.LayerNorm.bias))
    assert block.layer_norm_eps == model.config.layer_norm_eps == 1e-12
    assert block.pad_token_id == 0


def test_old_style_bart_with_decoder_embed_tokens_is_not_opt(tiny_checkpoint, tmp_path):
    """Older BART checkpoints also store model.decoder.embed_tokens.weight (tied to shared)."""
    from safetensors.numpy import load_file, save_file

    ck = tiny_checkpoint("bart", head=True)
    tensors = load_file(ck.path / "model.safetensors")
    tensors["model.decoder.embed_tokens.weight"] = tensors["model.shared.weight"]
    tensors["model.encoder.embed_tokens.weight"] = tensors["model.shared.weight"]
    f = tmp_path / "bart.safetensors"
    save_file(tensors, f, metadata={"format": "pt"})
    t = load_position_table(f)
    assert (t.family, t.key) == ("bart", "model.encoder.embed_positions.weight")
