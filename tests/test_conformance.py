"""Conformance: every model type in the registry agrees with transformers' own classes.

One case per model type in :data:`flax_posenc.conversion.models.MODEL_MECHANISMS` (generated from
the registry: adding a model type adds its case). Each builds a tiny random checkpoint with the
model type's own transformers classes, reads it with ``inspect_source``, and checks the limit and
the values (:mod:`conformance.reference` says exactly what and to which tolerance).
"""

from __future__ import annotations

import pytest
from conformance.catalog import all_model_types, text_model_types
from conformance.reference import conformance_problems

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


def test_every_mechanism_kind_has_a_conformance_hook():
    from conformance.reference import KIND_CHECKS

    from flax_posenc.conversion.mechanisms import MECHANISMS

    assert list(KIND_CHECKS) == list(MECHANISMS)


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
    import dataclasses

    from flax_posenc.conversion import position_tables

    rows = dict(position_tables.TABLE_FAMILIES)
    # (length_field elsewhere: else the rows-vs-max_position_embeddings check refuses it before transformers runs)
    rows["bert_like"] = dataclasses.replace(rows["bert_like"], offset=1, length_field="no_such_field")
    monkeypatch.setattr(position_tables, "TABLE_FAMILIES", rows)
    problems = conformance_problems("albert", tmp_path)
    assert any("works in transformers" in p for p in problems), problems


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
