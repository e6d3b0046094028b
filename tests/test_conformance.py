"""Conformance: every model type in the registry agrees with transformers' own classes.

One case per model type in :data:`flax_posenc.conversion.models.MODEL_MECHANISMS` (generated from
the registry: adding a model type adds its case). Each builds a tiny random checkpoint with the
model type's own transformers classes, reads it with ``inspect_source``, and checks the limit and
the values (:mod:`conformance.reference` says exactly what and to which tolerance).
"""

from __future__ import annotations

import pytest
from conformance import catalog
from conformance.catalog import all_model_types, composite_model_types, text_model_types
from conformance.reference import composite_problems, conformance_problems
from helpers import replace_row

from flax_posenc.conversion.models import MODEL_MECHANISMS, REFUSED_MODEL_TYPES

#: Registry model types that transformers no longer (or never) registers under that name: the
#: legacy Falcon spellings, read as aliases of ``falcon``.
ALIASES = {"RefinedWeb", "RefinedWebModel"}


def cases() -> list[str]:
    """One case per model type of the registry (derived from ``MECHANISMS``), less the aliases."""
    return sorted(t for t in MODEL_MECHANISMS if t not in ALIASES)


CASES = cases()


@pytest.mark.parametrize("model_type", CASES)
def test_model_type_conforms(model_type, tmp_path):
    assert conformance_problems(model_type, tmp_path) == []


#: Every composite model type of the pinned transformers read as its towers (derived from its
#: config classes' ``sub_configs``: adding a tower's model type to the registry adds its case).
COMPOSITE_CASES = list(composite_model_types())


@pytest.mark.parametrize("model_type", COMPOSITE_CASES)
def test_composite_model_type_conforms(model_type, tmp_path):
    """Each tower of a tiny composite checkpoint (transformers' own class) read as its tower's own model type."""
    assert composite_problems(model_type, tmp_path) == []


def test_composite_catalog_is_current():
    """The cases above come from tests/conformance/composite_catalog.json (collection reads it instead
    of building every composite's default config in each process): it was written for the installed
    transformers, and the cases it gives are those transformers itself gives (with today's registry;
    ``python tests/conformance/catalog.py`` compares every fact, a few seconds more)."""
    assert catalog.catalog_facts() is not None, f"written for another transformers: run `{catalog.WRITE_COMMAND}`"
    live = [t for t in all_model_types() if catalog.composite_read(t)]
    assert live == COMPOSITE_CASES, f"stale: run `{catalog.WRITE_COMMAND}`"


def test_a_stale_catalog_is_noticed_and_not_used(tmp_path, monkeypatch):
    """A catalog written for another transformers is not read (the cases come from transformers); the
    cases are derived from the catalog's facts (a wrong fact changes a case)."""
    import json

    data = json.loads(catalog.CATALOG.read_text())
    monkeypatch.setattr(catalog, "CATALOG", tmp_path / "catalog.json")
    catalog.CATALOG.write_text(json.dumps({**data, "transformers": "0.0.0"}))
    assert catalog.catalog_facts() is None
    data["facts"]["llava"]["towers"][0][1] = "not_a_tower"
    catalog.CATALOG.write_text(json.dumps(data))
    assert catalog.catalog_facts()["llava"]["towers"][0][1] == "not_a_tower"
    assert catalog.composite_read("llava", data["facts"] | {"llava": catalog.composite_facts_of("llava")})
    assert not catalog.composite_read("llava", catalog.catalog_facts())  # the stale fact changes a case


def test_composite_cases_include_the_sample():
    assert {"llava", "paligemma", "gemma3", "aya_vision", "vision-text-dual-encoder"} <= set(COMPOSITE_CASES)
    assert not set(COMPOSITE_CASES) & set(MODEL_MECHANISMS)


def test_composite_conformance_notices_a_wrong_text_tower(tmp_path, monkeypatch):
    """The per-tower check is not vacuous: LLaVA's Llama tower read with interleaved pairs is caught."""
    import dataclasses

    from flax_posenc.conversion import relative_config

    real = relative_config._rope_from

    def swapped(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), layout="interleaved")

    monkeypatch.setattr(relative_config, "_rope_from", swapped)
    problems = composite_problems("llava", tmp_path)
    assert any(p.startswith("text tower") and "apply_rotary_pos_emb" in p for p in problems), problems


def test_composite_conformance_notices_an_unread_tower(tmp_path, monkeypatch):
    """A tower whose model type is not read is reported as unread, never passed over."""
    from flax_posenc.conversion import mechanisms

    plan = mechanisms.MECHANISMS.plan
    monkeypatch.setattr(
        mechanisms.MECHANISMS, "plan", lambda t: None if t == "siglip_vision_model" else plan(t), raising=False
    )
    problems = composite_problems("paligemma", tmp_path)
    assert any("tower not read" in p and "siglip_vision_model" in p for p in problems), problems


def test_every_mechanism_kind_has_a_conformance_hook():
    from conformance.reference import KIND_CHECKS

    from flax_posenc.conversion.mechanisms import MECHANISMS

    assert sorted(KIND_CHECKS) == sorted(MECHANISMS)  # one hook per kind, none for a kind that is not a row


def test_registry_names_real_model_types():
    assert set(CASES) <= set(all_model_types())
    assert set(REFUSED_MODEL_TYPES) <= set(all_model_types())
    assert not set(REFUSED_MODEL_TYPES) & set(MODEL_MECHANISMS)


def test_coverage_counts_text_model_types():
    read = [t for t in text_model_types() if t in MODEL_MECHANISMS]
    assert len(read) >= 200, len(read)


def test_conformance_notices_a_wrong_layout(tmp_path, monkeypatch):
    """The check is not vacuous: Llama read with interleaved pairs is caught."""
    import dataclasses

    from flax_posenc.conversion import relative_config

    real = relative_config._rope_from

    def swapped(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), layout="interleaved")

    monkeypatch.setattr(relative_config, "_rope_from", swapped)
    problems = conformance_problems("llama", tmp_path)
    assert any("apply_rotary_pos_emb" in p for p in problems), problems


def test_conformance_notices_a_wrong_table_limit(tmp_path, monkeypatch):
    """A learned table read with one reserved row too many is caught by transformers' forward pass."""
    from flax_posenc.conversion import position_tables

    # (length_field elsewhere: else the rows-vs-max_position_embeddings check refuses it before transformers runs)
    replace_row(monkeypatch, position_tables, "TABLE_FAMILIES", "bert_like", offset=1, length_field="no_such_field")
    problems = conformance_problems("albert", tmp_path)
    assert any("works in transformers" in p for p in problems), problems


def _replace_family(monkeypatch, name: str, **changes):
    """RELATIVE_FAMILIES with row ``name`` changed (the registry as a wrong reading would have it)."""
    from flax_posenc.conversion import relative_config

    replace_row(monkeypatch, relative_config, "RELATIVE_FAMILIES", name, **changes)


def _read_not_refused(monkeypatch, model_type: str, kind: str, row: str):
    """The mechanism table with ``model_type`` added to row ``row`` of kind ``kind`` and taken out of
    the refused types: the registry as a wrong reading would have it."""
    import dataclasses

    from flax_posenc.conversion import models
    from flax_posenc.conversion.mechanisms import MECHANISMS

    old = MECHANISMS[kind]
    registries = tuple(
        (
            name,
            {
                n: dataclasses.replace(r, model_types=(*r.model_types, model_type)) if n == row else r
                for n, r in rows.items()
            },
        )
        for name, rows in old.registries
    )
    monkeypatch.setattr(
        MECHANISMS, "_kinds", {**MECHANISMS._kinds, kind: dataclasses.replace(old, registries=registries)}
    )
    monkeypatch.setattr(MECHANISMS, "_derived", {})
    refused = {t: why for t, why in models.REFUSED_MODEL_TYPES.items() if t != model_type}
    monkeypatch.setattr(models, "REFUSED_MODEL_TYPES", refused)


def test_forward_check_notices_a_type_registered_with_the_wrong_layout(tmp_path, monkeypatch):
    """GLM-MoE-DSA's attention rotates interleaved pairs; registered in halves, the forward pass
    (the rotation its attention calls, layer by layer) disagrees with apply_rope_qk."""
    _replace_family(monkeypatch, "mla_interleaved", layout="half")
    problems = conformance_problems("glm_moe_dsa", tmp_path)
    forward = [p for p in problems if "transformers' forward rotates with apply_rotary_pos_emb_interleave" in p]
    assert forward and all("layout half" in p for p in forward), problems


def test_forward_check_notices_a_nope_layer_given_rope(tmp_path, monkeypatch):
    """Cohere 2 rotates only on its sliding-window layers; without that rule its full-attention
    layer 3 (of the tiny 4) would be given RoPE, and the forward pass shows no rotation there."""
    _replace_family(monkeypatch, "cohere2", rope_layer_rule=None)
    problems = conformance_problems("cohere2", tmp_path)
    assert "layer 3: we give RoPE; transformers' forward applies no rotation there" in problems, problems


def test_forward_check_notices_a_learned_rotary_parameter(tmp_path, monkeypatch):
    """Mistral Large 4's rotary module holds a learned alpha: read as plain (interleaved) MLA RoPE,
    the case fails with "position parameters not read" even though alpha's initial value (0)
    leaves cos/sin unchanged."""
    _replace_family(monkeypatch, "mla_interleaved", model_types=("mistral_large4_text",))
    _read_not_refused(monkeypatch, "mistral_large4_text", "rope", "mla_interleaved")
    problems = conformance_problems("mistral_large4_text", tmp_path)
    assert problems == ["position parameters not read: rotary_emb.alpha"], problems


@pytest.mark.parametrize(
    ("model_type", "override"),
    [
        # EXAONE 4 without a sliding window: every (full-attention) layer rotates; its global NoPE
        # needs the window
        ("exaone4", {"sliding_window": None, "layer_types": ["full_attention"] * 4}),
        # LFM2's convolution layers: no attention, no rotation (one rope_parameters for the model)
        ("lfm2", {"layer_types": ["conv", "full_attention", "conv", "full_attention"]}),
        # Cohere 2 MoE: a dense prefix layer rotates although it is full attention (force_rope)
        (
            "cohere2_moe",
            {
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
            },
        ),
    ],
)
def test_layer_rules_follow_the_model_on_other_configs(model_type, override, tmp_path, monkeypatch):
    from conformance import tiny

    monkeypatch.setitem(tiny.OVERRIDES, model_type, override)
    assert conformance_problems(model_type, tmp_path) == []


def test_position_parameters_not_read_fail_a_case(tmp_path, monkeypatch):
    """Inkling 2 read as it was ("no position encoding: a recurrent state") fails: its relative
    position bias (relative_position_bias.proj) is a position parameter no reported mechanism reads."""
    _read_not_refused(monkeypatch, "inkling2_text", "none", "recurrent")
    problems = conformance_problems("inkling2_text", tmp_path)
    assert any(
        p.startswith("position parameters not read: ") and "relative_position_bias.proj" in p for p in problems
    ), problems


def test_a_layer_rule_without_layer_types_is_refused(tmp_path):
    """Cohere 2 rotates by its layer types: a config without them is refused, one line naming the field."""
    import json

    from flax_posenc.conversion import inspect_source
    from flax_posenc.errors import CheckpointError

    fields = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4, "sliding_window": 16}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "cohere2", **fields}))
    with pytest.raises(CheckpointError, match="layer_types as a list of strings") as info:
        inspect_source(tmp_path)
    assert "\n" not in str(info.value)


def test_rope_for_layer_counts_the_layers_transformers_builds(tmp_path):
    """Dory saves two layer_types entries (attention, mlp) and twice num_hidden_layers per layer;
    transformers builds half as many layers, and so does rope_for_layer's range."""
    from conformance.tiny import quiet, tiny_model

    from flax_posenc.conversion import rope_for_layer
    from flax_posenc.errors import CheckpointError

    model = tiny_model("dory")
    with quiet():
        model.save_pretrained(tmp_path)
    count = model.config.num_hidden_layers
    assert len(model.layers) == count
    assert all(rope_for_layer(tmp_path, i) is not None for i in range(count))
    with pytest.raises(CheckpointError, match=rf"layer in 0\.\.{count - 1} \({count} layers"):
        rope_for_layer(tmp_path, count)


def test_conformance_notices_a_position_tensor_in_a_model_declared_free_of_positions(tmp_path):
    """A model declared without positions is caught when it holds a position table (BERT's), and
    every declared type is a case of its own (derived from the registry)."""
    from conformance.reference import KIND_CHECKS
    from conformance.tiny import tiny_model

    from flax_posenc.conversion.no_position import NO_POSITION_FAMILIES

    problems = KIND_CHECKS["none"](tiny_model("bert"), None, tmp_path)
    assert problems == ["we report no position encoding; the model holds embeddings.position_embeddings.weight"]
    declared = {t for row in NO_POSITION_FAMILIES.values() for t in row.model_types}
    assert {"resnet", "convnext", "dac"} <= declared <= set(CASES)
