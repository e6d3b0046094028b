"""Configs as found on the Hub (issue 34): fields missing, older and mixed layouts.

Every other fixture is written by ``save_pretrained``, which spells out every default. A real
``config.json`` often omits them (``rope_theta``, ``partial_rotary_factor``, ``pad_token_id``,
DeBERTa's ``relative_attention``, Gemma's ``head_dim``), keeps a 4.x ``rope_scaling`` beside v5's
``rope_parameters``, or gives an MLA model no ``head_dim``. Each case writes such a config.json
(tiny sizes; only the fields named are present), builds transformers' own model from
``AutoConfig.from_pretrained`` of that very file (so transformers' per-class defaults fill the
gaps), and holds our reading to that model with the conformance suite's comparisons
(``tests/conformance/reference.py``: inv_freq, cos/sin, the rotation, table rows, limits).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from conformance import reference  # noqa: E402
from conformance.tiny import quiet  # noqa: E402

TINY_TEXT = {"vocab_size": 64, "num_hidden_layers": 1, "intermediate_size": 32}

#: (case id, the config.json as written: fields missing on purpose, the default transformers applies)
HUB_CONFIGS = [
    # rope_theta (10000) and max_position_embeddings (2048) missing
    ("llama-no-theta", {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2, **TINY_TEXT}),
    # Mixtral's rope_theta defaults to 1e6, its max_position_embeddings to 4096 * 32
    (
        "mixtral-no-theta",
        {
            "model_type": "mixtral",
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,  # as every real config states it (its default, 8, is no tiny model's)
            "num_local_experts": 2,
            **TINY_TEXT,
        },
    ),
    # Qwen2: max_position_embeddings 32768
    (
        "qwen2-no-theta",
        {"model_type": "qwen2", "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2, **TINY_TEXT},
    ),
    # Gemma: head_dim defaults to 256, not hidden_size / heads
    (
        "gemma-no-head-dim",
        {"model_type": "gemma", "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, **TINY_TEXT},
    ),
    # GPT-NeoX: rotary_pct 0.25 and rotary_emb_base 10000
    (
        "gpt-neox-no-rotary-pct",
        {"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 2, **TINY_TEXT},
    ),
    # Phi: partial_rotary_factor 0.5
    ("phi-no-partial", {"model_type": "phi", "hidden_size": 64, "num_attention_heads": 2, **TINY_TEXT}),
    # GPT-J: rotary_dim 64 of a 128-wide head, n_positions 2048
    ("gptj-no-rotary-dim", {"model_type": "gptj", "n_embd": 256, "n_head": 2, "n_layer": 1, "vocab_size": 64}),
    # Falcon without "alibi": RoPE, theta 10000
    ("falcon-no-alibi-flag", {"model_type": "falcon", "hidden_size": 32, "num_attention_heads": 2, **TINY_TEXT}),
    # a 4.x rope_scaling beside v5 rope_parameters (a config edited by hand after an upgrade)
    (
        "llama-mixed-rope-layout",
        {
            "model_type": "llama",
            "hidden_size": 32,
            "num_attention_heads": 2,
            "max_position_embeddings": 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "rope_scaling": {"type": "linear", "factor": 2.0},
            **TINY_TEXT,
        },
    ),
    # the 4.x layout alone (rope_scaling with "type", top-level rope_theta)
    (
        "llama-4x-rope-scaling",
        {
            "model_type": "llama",
            "hidden_size": 32,
            "num_attention_heads": 2,
            "max_position_embeddings": 64,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
            **TINY_TEXT,
        },
    ),
    # MLA without head_dim: the rope head is qk_rope_head_dim
    (
        "deepseek-v3-no-head-dim",
        {
            "model_type": "deepseek_v3",
            "hidden_size": 32,
            "num_attention_heads": 2,
            "kv_lora_rank": 8,
            "q_lora_rank": 8,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 8,
            "n_routed_experts": 2,
            "num_experts_per_tok": 1,
            "moe_intermediate_size": 16,
            "first_k_dense_replace": 1,
            **TINY_TEXT,
        },
    ),
    # learned tables: RoBERTa without pad_token_id (1: the offset-2 positions skip it)
    ("roberta-no-pad", {"model_type": "roberta", "hidden_size": 32, "num_attention_heads": 2, **TINY_TEXT}),
    # GPT-2 without n_positions (1024 rows)
    ("gpt2-no-n-positions", {"model_type": "gpt2", "n_embd": 32, "n_head": 2, "n_layer": 1, "vocab_size": 64}),
    # DeBERTa-v2 without relative_attention (False) and position_biased_input (True): absolute positions
    ("deberta-v2-no-relative", {"model_type": "deberta-v2", "hidden_size": 32, "num_attention_heads": 2, **TINY_TEXT}),
    # DeBERTa-v2 with relative_attention but no position_buckets / max_relative_positions
    (
        "deberta-v2-relative-defaults",
        {
            "model_type": "deberta-v2",
            "hidden_size": 32,
            "num_attention_heads": 2,
            "relative_attention": True,
            "position_biased_input": False,
            **TINY_TEXT,
        },
    ),
    # MPT without attn_config at all
    ("mpt-no-attn-config", {"model_type": "mpt", "d_model": 32, "n_heads": 2, "n_layers": 1, "vocab_size": 64}),
]


def _model_for(raw: dict, directory: Path):
    """transformers' own model for the config.json as written (its classes fill the missing fields)."""
    (directory / "config.json").write_text(json.dumps(raw))
    with quiet():
        config = transformers.AutoConfig.from_pretrained(directory)
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(config).eval()
    save = model.save_pretrained

    def save_keeping_the_raw_config(path, *args, **kwargs):  # weights saved, config.json as on the Hub
        save(path, *args, **kwargs)
        (Path(path) / "config.json").write_text(json.dumps(raw))

    model.save_pretrained = save_keeping_the_raw_config
    return model


@pytest.mark.parametrize("raw", [c for _, c in HUB_CONFIGS], ids=[i for i, _ in HUB_CONFIGS])
def test_hub_shaped_config_reads_as_transformers_fills_it(tmp_path, monkeypatch, raw):
    model = _model_for(raw, tmp_path)
    monkeypatch.setattr(reference, "tiny_model", lambda model_type: model)
    problems = reference.conformance_problems(raw["model_type"], tmp_path)
    assert problems == [], problems
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved == raw  # what was read is the config with its fields missing


def test_the_defaults_at_stake_differ_from_the_generic_ones():
    """The cases above test something only if transformers' per-family defaults are not the
    generic guess (theta 10000, head_dim = hidden / heads, full rotation, pad 0)."""
    from transformers import (
        DebertaV2Config,
        GemmaConfig,
        GPTJConfig,
        GPTNeoXConfig,
        MixtralConfig,
        PhiConfig,
        RobertaConfig,
    )

    assert MixtralConfig().rope_parameters["rope_theta"] == 1e6
    assert GemmaConfig(hidden_size=32, num_attention_heads=2).head_dim == 256
    assert GPTNeoXConfig().rope_parameters["partial_rotary_factor"] == 0.25
    assert PhiConfig().rope_parameters["partial_rotary_factor"] == 0.5
    assert GPTJConfig().rotary_dim == 64
    assert RobertaConfig().pad_token_id == 1
    assert DebertaV2Config().relative_attention is False


def test_mixed_layout_takes_the_scaling_transformers_applies(tmp_path):
    """A 4.x rope_scaling beside v5 rope_parameters: our record says what transformers' model runs."""
    from flax_posenc.conversion import inspect_source

    raw = dict(HUB_CONFIGS)["llama-mixed-rope-layout"]
    model = _model_for(raw, tmp_path)
    with quiet():
        model.save_pretrained(tmp_path)
    rope = inspect_source(tmp_path).mechanisms[0].rope
    theirs = model.config.rope_parameters
    assert rope.rope_type == theirs["rope_type"]
    assert rope.factor == theirs.get("factor")


# --------------------------------------------------------------------------- every RoPE model type, fields missing


def _rope_model_types():
    from flax_posenc.conversion.relative_config import RELATIVE_FAMILIES

    return [
        (family, model_type)
        for family in RELATIVE_FAMILIES.values()
        if family.scheme == "rope" and not family.per_layer_type and family.text_config_field is None
        for model_type in family.model_types
    ]


def _defaults_of(config) -> dict | None:
    """transformers' values of the fields CONFIG_DEFAULTS may hold (None: per-layer-type parameters)."""
    d = config.to_dict()
    rp = d.get("rope_parameters") or {}
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) for v in rp.values()):
        return None
    return {
        "rope_theta": rp.get("rope_theta", d.get("rope_theta")),
        "partial_rotary_factor": rp.get("partial_rotary_factor", d.get("partial_rotary_factor")),
        "head_dim": d.get("head_dim"),
        "max_position_embeddings": d.get("max_position_embeddings"),
        "rope_interleave": d.get("rope_interleave"),
        "rotary_dim": d.get("rotary_dim"),
    }


def test_a_config_with_only_its_sizes_reads_as_transformers_defaults_it():
    """For every RoPE model type read: a config.json holding only model_type and its sizes (every
    RoPE field left out) gives the theta, rotated fraction, head width, limit and layout that
    transformers' own config class gives the same sizes."""
    from transformers import AutoConfig

    from flax_posenc.conversion.relative_config import relative_configs_from_dict
    from flax_posenc.errors import CheckpointError

    compared, wrong = 0, []
    for family, model_type in _rope_model_types():
        try:
            with quiet():
                config = AutoConfig.for_model(model_type)
        except Exception:  # noqa: BLE001 - a model type this transformers does not know
            continue
        theirs = _defaults_of(config)
        if theirs is None:
            continue
        d = config.to_dict()
        sizes = ("hidden_size", "n_embd", "d_model", "num_attention_heads", "n_head", "n_heads", "qk_rope_head_dim")
        raw = {"model_type": model_type, **{f: d[f] for f in sizes if isinstance(d.get(f), int)}}
        try:
            ours = next(r.rope for r in relative_configs_from_dict(raw) if getattr(r, "rope", None) is not None)
        except (CheckpointError, StopIteration):
            continue  # transformers' own default sizes give an odd rotation (refused, one line)
        compared += 1
        problems = []
        if theirs["rope_theta"] is not None and not np_close(ours.rope_theta, theirs["rope_theta"]):
            problems.append(f"rope_theta {ours.rope_theta} vs {theirs['rope_theta']}")
        if theirs["partial_rotary_factor"] is not None and ours.rotary_dim != int(
            ours.head_dim * theirs["partial_rotary_factor"]
        ):
            problems.append(f"rotary_dim {ours.rotary_dim} vs {theirs['partial_rotary_factor']} of {ours.head_dim}")
        # rotary_dim where the model reads it (GPT-J, CodeGen; MiniMax-M3's config holds one its model ignores)
        if family.rotary_dim_field and theirs["rotary_dim"] is not None and ours.rotary_dim != theirs["rotary_dim"]:
            problems.append(f"rotary_dim {ours.rotary_dim} vs {theirs['rotary_dim']}")
        if isinstance(theirs["head_dim"], int) and ours.head_dim != theirs["head_dim"]:
            problems.append(f"head_dim {ours.head_dim} vs {theirs['head_dim']}")
        if (
            theirs["max_position_embeddings"] is not None
            and ours.max_position_embeddings != theirs["max_position_embeddings"]
        ):
            problems.append(
                f"max_position_embeddings {ours.max_position_embeddings} vs {theirs['max_position_embeddings']}"
            )
        if theirs["rope_interleave"] and ours.layout != "interleaved":
            problems.append("layout half, transformers interleaves (rope_interleave)")
        if problems:
            wrong.append(f"{model_type}: {'; '.join(problems)}")
    assert wrong == [], wrong
    # most RoPE types compared; those whose layers rotate by a layer rule (Cohere 2, EXAONE 4, ...) are
    # refused on a sizes-only config (no layer_types), one line, and so not compared here
    assert compared >= 95, compared


def np_close(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= 1e-9 * abs(float(b))


def test_every_stored_default_is_transformers_own():
    """CONFIG_DEFAULTS holds transformers' values, constant in the sizes (a doubled hidden_size keeps them)."""
    from transformers import AutoConfig

    from flax_posenc.conversion.config_defaults import CONFIG_DEFAULTS

    wrong = []
    for model_type, fields in CONFIG_DEFAULTS.items():
        with quiet():
            config = AutoConfig.for_model(model_type)
            width = "n_embd" if hasattr(config, "n_embd") else "hidden_size"
            wider = AutoConfig.for_model(model_type, **{width: 2 * getattr(config, width)})
        for theirs in (_defaults_of(config), _defaults_of(wider)):
            for field, value in fields.items():
                if theirs[field] != value:
                    wrong.append(f"{model_type}.{field}: ours {value}, transformers {theirs[field]}")
    assert wrong == [], wrong
