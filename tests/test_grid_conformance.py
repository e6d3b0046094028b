"""The conformance check of vision grids is not vacuous: a wrong resize convention or prefix is caught."""

from __future__ import annotations

import dataclasses

from conformance.reference import conformance_problems


def test_conformance_notices_a_wrong_resize_convention(tmp_path, monkeypatch):
    from flax_posenc.conversion import grid_tables

    rows = dict(grid_tables.GRID_FAMILIES)
    rows["vit"] = dataclasses.replace(rows["vit"], convention="torch_bicubic_antialias")
    monkeypatch.setattr(grid_tables, "GRID_FAMILIES", rows)
    problems = conformance_problems("vit", tmp_path)
    assert any("differs from interpolate_pos_encoding" in p for p in problems), problems


def test_conformance_notices_a_wrong_text_tower_table(tmp_path, monkeypatch):
    """CLIP's text tower read with one reserved row: transformers' own forward pass disagrees."""
    from flax_posenc.conversion import position_tables

    rows = dict(position_tables.TABLE_FAMILIES)
    rows["clip_text_tower"] = dataclasses.replace(rows["clip_text_tower"], offset=1, length_field="no_such_field")
    monkeypatch.setattr(position_tables, "TABLE_FAMILIES", rows)
    problems = conformance_problems("clip", tmp_path)
    assert any("works in transformers" in p for p in problems), problems
