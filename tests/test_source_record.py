"""One source protocol for every kind of SOURCE, and one family lookup for every registry."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from flax_posenc.conversion import (
    LearnedTableSource,
    SourceRecord,
    inspect_source,
    which_family,
)
from flax_posenc.conversion.mechanisms import MECHANISMS
from flax_posenc.conversion.models import MODEL_MECHANISMS
from flax_posenc.conversion.relative_bias import RelativeBiasSource
from flax_posenc.conversion.relative_config import RelativeConfig
from flax_posenc.conversion.source_record import verdict


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """One SOURCE of each kind, written by hand (no torch): a sinusoid, a Llama config, a T5 encoder."""
    root = tmp_path_factory.mktemp("sources")
    llama = root / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 300})
    )
    t5 = root / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text(
        json.dumps(
            {
                "model_type": "t5",
                "num_heads": 2,
                "num_layers": 1,
                "relative_attention_num_buckets": 32,
                "relative_attention_max_distance": 128,
            }
        )
    )
    save_file(
        {
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": np.random.default_rng(0)
            .normal(size=(32, 2))
            .astype(np.float32)
        },
        str(t5 / "model.safetensors"),
    )
    return {"sinusoidal": "sinusoidal:40:8", "llama": str(llama), "t5": str(t5)}


@pytest.mark.parametrize(
    "kind, cls, limit",
    [("sinusoidal", LearnedTableSource, 40), ("llama", RelativeConfig, 300), ("t5", RelativeBiasSource, None)],
)
def test_every_kind_implements_the_protocol(sources, kind, cls, limit):
    rec = inspect_source(sources[kind])
    assert isinstance(rec.mechanisms[0].record, cls) and isinstance(rec, SourceRecord)
    assert rec.limit == limit and rec.source == sources[kind]
    phrase = rec.describe_limit()
    assert sources[kind] in phrase
    # strict JSON, the same limit, and the text report carries the limit phrase's numbers
    doc = json.loads(json.dumps(rec.to_dict(), allow_nan=False))
    assert doc["limit"] == limit and doc["family"] == rec.family
    assert str(limit if limit is not None else "none") in str(rec)
    # check_length: the line embeds describe_limit(); past the limit (when there is one) it fails
    ok, line = rec.check_length(10)
    assert ok and line.startswith("ok: 10 positions") and (phrase in line or limit is None)
    if limit is not None:
        ok, line = rec.check_length(limit + 5)
        assert not ok and line == f"{phrase}; asked for {limit + 5} positions (0..{limit + 4}): 5 past the limit"
        assert verdict(rec, limit + 5) == {
            "source": sources[kind],
            "family": rec.family,
            "scheme": rec.scheme,
            "key": rec.key,
            "length": limit + 5,
            "num_positions": limit,
            "max_length": limit,  # the deprecated former key, the same value until 0.3
            "fits": False,
            "excess": 5,
            "message": line,
        }
    else:
        assert rec.check_length(10**6)[0] and verdict(rec, 10**6)["excess"] == 0


def test_learned_limit_sentence_is_limits_py():
    rec = inspect_source("sinusoidal:40:8")
    assert (
        rec.describe_limit() == "sinusoidal position table (sinusoidal) of sinusoidal:40:8 holds 40 positions (0..39)"
    )


@pytest.mark.parametrize(
    "model_type, kind, name",
    [
        ("xlm-roberta", "learned", "xlm-roberta"),
        ("xlm_roberta", "learned", "xlm-roberta"),
        ("gpt-neo", "learned", "gpt_neo"),
        ("qwen2-moe", "rope", "qwen2"),
        ("gpt-neox", "rope", "gpt_neox"),
        ("mpnet", "relative_bias", "mpnet"),
        ("t5", "relative_bias", "t5"),
        ("llama", "rope", "llama"),
    ],
)
def test_which_family_normalises_every_registry_alike(model_type, kind, name):
    match = which_family(model_type)
    assert (match.kind, match.name) == (kind, name)


def test_which_family_covers_every_row_and_nothing_else():
    """Every row of every registry of every kind (vit, albert, whisper, deberta too)."""
    for kind in MECHANISMS.values():
        for row in kind.rows.values():
            for t in row.model_types:
                got = which_family(t)
                assert got is not None, (kind.name, t)
                last_kind, last_row = MODEL_MECHANISMS[t][-1]
                assert (got.kind, got.name) == (last_kind, last_row), (t, got)
                assert got.row is row or (got.kind, got.name) in MODEL_MECHANISMS[t]
    assert which_family("vit").kind == "grid" and which_family("albert").kind == "learned"
    assert which_family("whisper").name == "whisper_encoder" and which_family("deberta").kind == "deberta_relative"
    assert which_family("llama2") is None and which_family("") is None and which_family(None) is None
