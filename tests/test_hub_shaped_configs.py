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


# --------------------------------------------------------------------------- the newer readers, defaults left out

#: One model type per kind read since issue 34 (window biases, DETR sines, vision RoPE, ...), and
#: new rows of older kinds (a grid tower, a codec's RoPE, a composite's towers, a backbone tower).
HUB_SHAPED_TYPES = (
    "swin",  # window_bias: patch_size 4
    "dab-detr",  # detr_positions: temperature_height / _width 20 (not DETR's 10000)
    "qwen3_vl_vision",  # vision_rope
    "pixtral",  # vision_rope
    "sew",  # conv_position: squeeze_factor 2, conv_kernel / conv_stride
    "layoutlm",  # bbox_2d: max_2d_position_embeddings 1024
    "siglip2_vision_model",  # naflex_grid
    "sam_vision_model",  # decomposed_rel_pos: use_rel_pos True
    "fastspeech2_conformer",  # xl_relative: encoder_/decoder_num_attention_heads 2
    "parakeet_encoder",  # xl_relative
    "wav2vec2-bert",  # clipped_relative: position_embeddings_type "relative_key"
    "bros",  # bbox_sinusoid: dim_bbox 8
    "layoutlmv3",  # layout_relative_bias: rel_pos_bins, max_rel_pos, rel_2d_pos_bins, max_rel_2d_pos
    "reformer",  # axial
    "sam3_lite_text_text_model",  # resampled
    "xlnet",  # relative_sinusoid
    "cpmant",  # segment_bias
    "sew-d",  # deberta relative: relative_attention True, position_buckets 256
    "idefics3_vision",  # grid
    "mimi",  # rope (a codec's transformer)
    "mask2former",  # a Swin backbone tower (backbone_config without patch_size)
    "siglip2",  # a composite: each tower's sub-config with its defaults left out
)

#: Bookkeeping keys (not the model's): what save_pretrained adds or AutoConfig sets on loading.
_BOOKKEEPING = {"_name_or_path", "transformers_version", "architectures", "dtype", "torch_dtype"}


def _class_defaults(config) -> dict:
    with quiet():
        return type(config)().to_dict()


def _without_defaults(saved: dict, config) -> dict:
    """``saved`` (a config.json as save_pretrained writes it) less every field equal to the config
    class's default, sub-configs (towers, backbones) by their own classes' defaults."""
    defaults = _class_defaults(config)
    out = {}
    for key, value in saved.items():
        sub = getattr(config, key, None)
        if isinstance(value, dict) and isinstance(sub, transformers.PreTrainedConfig):
            out[key] = _without_defaults(value, sub)
        elif key in ("model_type", "transformers_version") or key not in defaults or defaults[key] != value:
            out[key] = value
    return out


def _flat(d: dict, prefix: tuple = ()) -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and "model_type" in value:
            out.update(_flat(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


def _config_differences(ours: dict, theirs: dict) -> list[tuple]:
    a, b = _flat(ours), _flat(theirs)
    return sorted(k for k in set(a) | set(b) if k[-1] not in _BOOKKEEPING and a.get(k, ...) != b.get(k, ...))


def _hub_shaped_copy(config, full: Path, hub: Path) -> tuple[dict, list[tuple]]:
    """``hub``: ``full``'s checkpoint with a config.json that leaves out every default (a field
    transformers would then fill differently, such as a backbone's label2id, is put back, so that
    both files describe the same model); returns that config.json and the fields left out."""
    import shutil

    saved = json.loads((full / "config.json").read_text())
    shaped = _without_defaults(saved, config)
    shutil.copytree(full, hub)
    for _ in range(3):
        (hub / "config.json").write_text(json.dumps(shaped))
        with quiet():
            back = transformers.AutoConfig.from_pretrained(hub)
        differing = _config_differences(config.to_dict(), back.to_dict())
        if not differing:
            break
        for path in differing:
            into = shaped
            for part in path[:-1]:
                into = into[part]
            into[path[-1]] = _flat(saved)[path]
    assert not differing, f"the shaped config.json no longer describes the model: {differing}"
    left_out = sorted(set(_flat(saved)) - set(_flat(shaped)))
    return shaped, left_out


_NOT_READ = {"source", "config_path"}


def _record_differences(a, b, path: str = "") -> list[str]:
    """Where two readings differ (arrays by value; the SOURCE, the config path and the raw
    config.json dict a table keeps are not readings)."""
    import dataclasses

    import numpy as np

    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        if type(a) is not type(b):
            return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
        return [
            d
            for f in dataclasses.fields(a)
            if f.name not in _NOT_READ and not (f.name == "config" and isinstance(getattr(a, f.name), dict))
            for d in _record_differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
        ]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return [] if np.array_equal(np.asarray(a), np.asarray(b)) else [f"{path}: arrays differ"]
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _record_differences(x, y, f"{path}[{i}]")]
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for k in sorted(set(a) | set(b), key=str)
            for d in _record_differences(a.get(k), b.get(k), f"{path}[{k!r}]")
        ]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


@pytest.mark.parametrize("model_type", HUB_SHAPED_TYPES)
def test_a_config_without_its_defaults_reads_as_the_full_one(tmp_path, model_type):
    """The tiny checkpoint of ``model_type`` (its own transformers class, as the conformance suite
    builds it) read from a config.json that leaves out every field at its config class's default
    gives the same mechanisms, limits and values as from the full config.json (which the
    conformance suite holds to the model itself)."""
    from conformance.tiny import tiny_composite_config, tiny_model

    from flax_posenc.conversion import inspect_source

    if model_type == "siglip2":  # a composite: both towers tiny
        torch.manual_seed(0)
        with quiet():
            model = transformers.AutoModel.from_config(tiny_composite_config(model_type)).eval()
    else:
        model = tiny_model(model_type)
    full, hub = tmp_path / "full", tmp_path / "hub"
    with quiet():
        model.save_pretrained(full)
    shaped, left_out = _hub_shaped_copy(model.config, full, hub)
    assert left_out, "no field left out: the case tests nothing"
    expected, found = inspect_source(full), inspect_source(hub)
    assert _record_differences(expected.mechanisms, found.mechanisms) == []
    assert expected.limit == found.limit
    assert [u.to_dict() for u in expected.unread] == [u.to_dict() for u in found.unread]
    # where READER_DEFAULTS fills a field, the file leaves at least one of them out (the case tests the filling)
    from flax_posenc.conversion.config_defaults import READER_DEFAULTS

    saved = json.loads((full / "config.json").read_text())
    filled = [p for p in left_out if p[-1] in READER_DEFAULTS.get(_model_type_at(saved, p[:-1]), {})]
    assert bool(filled) == (model_type in FILLED), (filled, left_out)


#: The cases above whose reading needed READER_DEFAULTS (the others read no field a Hub file leaves out).
FILLED = {
    "swin",
    "dab-detr",
    "sew",
    "layoutlm",
    "sam_vision_model",
    "fastspeech2_conformer",
    "wav2vec2-bert",
    "bros",
    "layoutlmv3",
    "sew-d",
    "mask2former",
}


def _model_type_at(config: dict, path: tuple) -> str:
    for part in path:
        config = config[part]
    return str(config.get("model_type"))


def test_every_reader_default_is_transformers_own():
    """READER_DEFAULTS holds the values of transformers' config classes (tuples as JSON lists)."""
    from transformers import CONFIG_MAPPING

    from flax_posenc.conversion.config_defaults import READER_DEFAULTS

    wrong = []
    for model_type, fields in READER_DEFAULTS.items():
        with quiet():
            config = CONFIG_MAPPING[model_type]()
        for field, value in fields.items():
            theirs = getattr(config, field)
            theirs = list(theirs) if isinstance(theirs, tuple) else theirs
            if theirs != value or type(theirs) is not type(value):
                wrong.append(f"{model_type}.{field}: ours {value!r}, transformers {theirs!r}")
    assert wrong == [], wrong


def test_a_left_out_default_is_filled_not_guessed(tmp_path, monkeypatch):
    """Without READER_DEFAULTS, DAB-DETR's sines would take DETR's temperature (10000) for its 20,
    and SAM's config without use_rel_pos would lose its decomposed tables: the cases above test
    the filling, not a reader that happens to agree."""
    from conformance.tiny import tiny_model

    from flax_posenc.conversion import config_defaults, inspect_source

    for model_type in ("dab-detr", "sam_vision_model"):
        model = tiny_model(model_type)
        full, hub = tmp_path / model_type / "full", tmp_path / model_type / "hub"
        with quiet():
            model.save_pretrained(full)
        _hub_shaped_copy(model.config, full, hub)
        expected = inspect_source(full)
        with monkeypatch.context() as m:
            others = {k: v for k, v in config_defaults.READER_DEFAULTS.items() if k != model_type}
            m.setattr(config_defaults, "READER_DEFAULTS", others)
            found = inspect_source(hub)
        assert _record_differences(expected.mechanisms, found.mechanisms) != [], model_type


# --------------------------------------------------------------------------- the same configs, spelled otherwise

#: (model type, the field's path in config.json, how the Hub file spells it): an alias from the
#: config class's ``attribute_map`` (a new name), or a square ``[n, n]`` for an int (``None``).
HUB_SPELLINGS = (
    ("swin", ("num_heads",), "num_attention_heads"),  # refused before (num_heads: found None)
    ("qwen3_vl_vision", ("num_heads",), "num_attention_heads"),  # read the row's 16 heads before
    ("qwen2_5_vl", ("vision_config", "num_heads"), "num_attention_heads"),  # head_dim 4 for 32 before
    ("xlnet", ("d_model",), "hidden_size"),  # d_model 1024 for 64 before
    ("detr", ("d_model",), "hidden_size"),
    ("maskformer", ("decoder_config", "d_model"), "hidden_size"),  # a sub-config the row reads itself
    ("mask2former", ("backbone_config", "num_heads"), "num_attention_heads"),  # a backbone tower
    ("pixtral", ("patch_size",), None),  # patch_size None before
    ("swin", ("image_size",), None),
)


def _respelled(config: dict, path: tuple, name: str | None) -> dict:
    import copy

    out = copy.deepcopy(config)
    into = out
    for part in path[:-1]:
        into = into[part]
    value = into.pop(path[-1])
    if name is None:
        into[path[-1]] = [value, value]
    else:
        into[name] = value
    return out


@pytest.mark.parametrize(
    ("model_type", "path", "name"), HUB_SPELLINGS, ids=[f"{t}-{'.'.join(p)}-{n or 'list'}" for t, p, n in HUB_SPELLINGS]
)
def test_a_config_spelled_otherwise_reads_as_transformers_reads_it(tmp_path, model_type, path, name):
    """The Hub-shaped file of the cases above with one field under another spelling transformers
    takes: transformers builds the same config from it, and we read the same mechanisms."""
    from conformance.tiny import tiny_model

    from flax_posenc.conversion import inspect_source

    model = tiny_model(model_type)
    full, hub = tmp_path / "full", tmp_path / "hub"
    with quiet():
        model.save_pretrained(full)
    shaped, _ = _hub_shaped_copy(model.config, full, hub)
    assert _flat(shaped).get(path) is not None, f"{path} not in the file: the case tests nothing"
    (hub / "config.json").write_text(json.dumps(_respelled(shaped, path, name)))
    with quiet():
        back = transformers.AutoConfig.from_pretrained(hub)
    assert _config_differences(model.config.to_dict(), back.to_dict()) == ([] if name else [path])
    expected, found = inspect_source(full), inspect_source(hub)
    assert _record_differences(expected.mechanisms, found.mechanisms) == []


def test_a_patch_size_that_is_not_square_is_refused_naming_it(tmp_path):
    from conformance.tiny import tiny_model

    from flax_posenc.conversion import inspect_source
    from flax_posenc.errors import CheckpointError

    model = tiny_model("pixtral")
    with quiet():
        model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "patch_size": [4, 8]}))
    with pytest.raises(CheckpointError, match=r"patch_size as a positive integer, found \[4, 8\]"):
        inspect_source(tmp_path)


def test_every_field_alias_is_transformers_own():
    """FIELD_ALIASES is each config class's attribute_map (alias -> field), whole."""
    from transformers import CONFIG_MAPPING

    from flax_posenc.conversion.config_defaults import FIELD_ALIASES

    wrong = [
        f"{t}: ours {dict(a)}, transformers {CONFIG_MAPPING[t].attribute_map}"
        for t, a in FIELD_ALIASES.items()
        if dict(a) != dict(CONFIG_MAPPING[t].attribute_map)
    ]
    assert wrong == [], wrong
