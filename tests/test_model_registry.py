"""The model registry: a checkpoint is a set of position mechanisms; bad configs get one line.

(Every registry row is checked against transformers by tests/test_conformance.py; this file
covers the record, the command line and the bad inputs.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conformance.tiny import quiet, tiny_model
from helpers import cli_in_process

from flax_posenc.conversion import inspect_source
from flax_posenc.conversion.mechanisms import MECHANISMS
from flax_posenc.conversion.models import MODEL_MECHANISMS, mechanisms_of, refusal
from flax_posenc.errors import CheckpointError

# flax-posenc's main() in this process (the console script's entry point; tests/test_cli.py runs the
# script itself for its exit codes and one-line errors)
cli = cli_in_process


@pytest.fixture(scope="module")
def mpnet(tmp_path_factory) -> Path:
    """A tiny MPNet with MPNet's real table shape: 514 rows, 2 reserved, 512 positions."""
    import torch
    from transformers import MPNetConfig, MPNetModel

    torch.manual_seed(0)
    config = MPNetConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
        max_position_embeddings=514,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("mpnet")
    with quiet():
        MPNetModel(config).save_pretrained(path)
    return path


def test_mpnet_has_two_mechanisms_and_the_table_binds(mpnet):
    rec = inspect_source(mpnet)
    assert [m.kind for m in rec.mechanisms] == ["learned", "relative_bias"]
    assert rec.limit == 512
    assert rec.check_length(512)[0] and not rec.check_length(513)[0]
    assert rec.to_dict()["mechanisms"][1]["kind"] == "relative_bias"


def test_mpnet_check_513_exits_1_naming_the_512_position_table(mpnet):
    ok, past = cli("check", str(mpnet), "--length", "512"), cli("check", str(mpnet), "--length", "513")
    assert ok.returncode == 0, ok.stderr
    assert past.returncode == 1
    assert "mpnet position table (embeddings.position_embeddings.weight)" in past.stderr
    assert "holds 512 positions (0..511)" in past.stderr and "1 past the limit" in past.stderr


def test_inspect_json_lists_every_mechanism(mpnet):
    proc = cli("inspect", str(mpnet), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [m["kind"] for m in report["mechanisms"]] == ["learned", "relative_bias"]
    assert report["limit"] == 512 and report["mechanisms"][0]["limit"] == 512
    assert report["mechanisms"][1]["limit"] is None


def test_inspect_text_shows_every_mechanism(mpnet):
    proc = cli("inspect", str(mpnet))
    assert proc.returncode == 0, proc.stderr
    assert "mechanism 1 of 2: learned" in proc.stdout and "mechanism 2 of 2: relative_bias" in proc.stdout


def test_families_lists_the_registry():
    proc = cli("families", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert set(listed["read"]) == set(MODEL_MECHANISMS)
    assert listed["read"]["mpnet"] == [
        {"kind": "learned", "family": "mpnet", "tower": "text"},
        {"kind": "relative_bias", "family": "mpnet", "tower": "text"},
    ]
    assert set(listed["kinds"]) == set(MECHANISMS) and listed["kinds"]["grid"]["limit_unit"] == "image size"


def test_spellings_and_refusals():
    assert mechanisms_of("xlm_roberta") == mechanisms_of("xlm-roberta")
    assert mechanisms_of(None) is None and mechanisms_of("no_such_model") is None
    assert refusal("funnel").startswith("funnel: Funnel's relative attention with pooling is not read")
    assert "not in the registry" in refusal("no_such_model")


def write(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


GEMMA3 = {
    "model_type": "gemma3_text",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "head_dim": 16,
    "num_hidden_layers": 4,
    "max_position_embeddings": 64,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
    },
}


def test_rope_per_layer_type(tmp_path):
    rec = inspect_source(write(tmp_path, GEMMA3))
    by_type = {m.layer_type: m for m in rec.mechanisms}
    assert by_type["full_attention"].rope.rope_theta == 1e6 and by_type["full_attention"].layers == (1, 3)
    assert by_type["sliding_attention"].rope.rope_theta == 1e4 and by_type["sliding_attention"].layers == (0, 2)
    assert rec.limit == 64


def test_legacy_per_layer_type_config_is_refused_not_read_with_one_theta(tmp_path):
    """A 4.x Gemma 3 config (rope_theta + rope_local_base_freq, no per-type rope_parameters)."""
    legacy = {k: v for k, v in GEMMA3.items() if k != "rope_parameters"}
    with pytest.raises(CheckpointError) as e:
        inspect_source(write(tmp_path, {**legacy, "rope_theta": 1e6, "rope_local_base_freq": 1e4}))
    assert "\n" not in str(e.value) and "re-save the config with transformers >= 5" in str(e.value)


def test_layer_rope_theta_sets_each_layers_base_and_zero_means_nope(tmp_path):
    base = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4, "max_position_embeddings": 64}
    granite = {**base, "model_type": "granite_swa", "rope_parameters": {"rope_theta": 1e4}}
    rec = inspect_source(write(tmp_path, {**granite, "layer_rope_theta": [1e4, 1e6, 0, 1e6]}))
    got = sorted((m.kind, m.layers, m.rope.rope_theta if m.rope else None) for m in rec.mechanisms)
    assert got == [("nope", (2,), None), ("rope", (0,), 1e4), ("rope", (1, 3), 1e6)]
    muse = {**base, "model_type": "muse_spark_text", "rope_parameters": {"rope_theta": 5e5}}
    rec = inspect_source(write(tmp_path, {**muse, "layer_rope_theta": [5e5, 1.0, 5e5, 0]}))
    got = sorted((m.kind, m.layers, m.rope.rope_theta if m.rope else None) for m in rec.mechanisms)
    assert got == [("nope", (3,), None), ("rope", (0, 1, 2), 5e5)]


def test_nope_layers(tmp_path):
    config = {
        "model_type": "smollm3",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 4,
        "max_position_embeddings": 64,
        "no_rope_layers": [1, 1, 1, 0],
        "rope_parameters": {"rope_type": "default", "rope_theta": 2e6},
    }
    rec = inspect_source(write(tmp_path, config))
    assert [(m.kind, m.layers) for m in rec.mechanisms] == [("rope", (0, 1, 2)), ("nope", (3,))]
    assert rec.limit == 64


@pytest.mark.parametrize(
    "change, words",
    [
        ({"layer_types": ["sliding_attention", "full_attention"]}, "layer_types as a list of num_hidden_layers = 4 entries"),
        ({"layer_types": ["sliding_attention", "full_attention", "global", "full_attention"]}, "none for global"),
        ({"rope_parameters": {"sliding_attention": {"rope_type": "spiral", "rope_theta": 1e4},
                              "full_attention": {"rope_theta": 1e6}}}, "unknown scaling type 'spiral'"),
        ({"rope_parameters": {"sliding_attention": {"rope_theta": 0}, "full_attention": {"rope_theta": 1e6}}},
         "rope_theta"),
        ({"per_layer_config": {"9": {"head_dim": 8}}}, "per_layer_config keys layer indices 0..3"),
    ],
)  # fmt: skip
def test_bad_per_layer_configs_get_one_line(tmp_path, change, words):
    with pytest.raises(CheckpointError) as e:
        inspect_source(write(tmp_path, {**GEMMA3, **change}))
    message = str(e.value)
    assert "\n" not in message and words in message and "config.json" in message


@pytest.mark.parametrize(
    "config, field",
    [
        ({"model_type": "llama", "rope_theta": 0}, "rope_theta"),
        ({"model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 0}}, "rope_theta"),
        ({"model_type": "phi", "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0}}, "partial_rotary_factor"),
        ({"model_type": "gpt_neox", "rotary_pct": 0}, "partial_rotary_factor"),
        ({"model_type": "gpt_neox", "rotary_emb_base": 0}, "rope_theta"),
        ({"model_type": "smollm3", "no_rope_layers": [1, 0]}, "no_rope_layers as a list of num_hidden_layers = 4"),
        ({"model_type": "smollm3", "no_rope_layers": [1, 1, 2, 0]}, "no_rope_layers as a list of 0 (NoPE) and 1"),
        ({"model_type": "granite_swa", "rope_parameters": {"rope_theta": 1e4}, "layer_rope_theta": [1e4, -1, 1e4, 1e4]},
         "layer_rope_theta as a list of non-negative numbers"),
        ({"model_type": "molmo2_text", "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
          "rope_scaling_layers": [0, 1]}, "rope_scaling_layers naming every layer"),
    ],
)  # fmt: skip
def test_a_present_value_is_used_or_refused_never_swapped(tmp_path, config, field):
    """rope_theta 0 was reported as 10000, rotary_pct 0 as 0.25 (the silent-default bug)."""
    base = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4, "max_position_embeddings": 64}
    with pytest.raises(CheckpointError) as e:
        inspect_source(write(tmp_path, {**base, **config}))
    assert "\n" not in str(e.value) and field in str(e.value)


def test_table_rows_against_the_declared_length_name_both(tmp_path):
    model = tiny_model("albert")
    with quiet():
        model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    with pytest.raises(CheckpointError) as e:
        inspect_source(tmp_path)
    message = str(e.value)
    assert "\n" not in message
    assert "expected max_position_embeddings=64 to match " in message
    assert "embeddings.position_embeddings.weight (64 rows), found max_position_embeddings=512" in message


def test_unknown_model_type_names_it(tmp_path):
    with pytest.raises(CheckpointError) as e:
        inspect_source(write(tmp_path, {"model_type": "funnel"}))
    assert "funnel: Funnel's relative attention with pooling is not read" in str(e.value)


def test_plot_writes_a_figure_for_every_plottable_mechanism(mpnet, tmp_path):
    proc = cli("plot", str(mpnet), "--out", str(tmp_path / "figs"))
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert any("heatmap" in n for n in names)  # the learned table
    assert any("bucket" in n or "bias" in n for n in names), names  # the relative bias


def test_every_rope_type_transformers_registers_is_known():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from flax_posenc.rope_config import ROPE_TYPES

    assert set(ROPE_INIT_FUNCTIONS) <= set(ROPE_TYPES)


@pytest.mark.parametrize("partial, factor", [(0.25, None), (0.5, 2.0), (1.0, None)])
def test_proportional_rope_equals_transformers(partial, factor):
    """Gemma 4's proportional RoPE: leading frequencies over the whole head width, the rest zero."""
    import numpy as np
    from transformers import Gemma4TextConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from flax_posenc.rope_config import RopeConfig, rope_inverse_frequencies

    params = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": partial}
    if factor is not None:
        params["factor"] = factor
    with quiet():
        config = Gemma4TextConfig(head_dim=64, num_hidden_layers=2, layer_types=["sliding_attention"] * 2)
        config.rope_parameters = {"full_attention": params, "sliding_attention": params}
        theirs, scale = ROPE_INIT_FUNCTIONS["proportional"](config, None, layer_type="sliding_attention")
    ours, our_scale = rope_inverse_frequencies(RopeConfig.from_rope_parameters(params, head_dim=64))
    assert ours.shape == tuple(theirs.shape) and our_scale == scale
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=2**-21)


def test_a_refused_model_type_is_refused_even_with_a_table_in_its_weights(tmp_path):
    """TAPAS keeps a BERT-like position table, but indexes it within each table cell: it is refused,
    not guessed as a table. (BROS and X-MOD, the examples before issue 36, are read now.)"""
    with quiet():
        tiny_model("tapas").save_pretrained(tmp_path)
    with pytest.raises(CheckpointError) as e:
        inspect_source(tmp_path)
    why = "TAPAS's learned table indexed within each table cell"
    assert "\n" not in str(e.value) and f"tapas: position mechanism not read: {why}" in str(e.value)
    proc = cli("check", str(tmp_path), "--length", "8")
    assert proc.returncode == 2 and why in proc.stderr
