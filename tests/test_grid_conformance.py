"""The conformance check of vision grids is not vacuous: a wrong resize convention or prefix is caught."""

from __future__ import annotations

import pytest
from conformance.reference import conformance_problems
from helpers import replace_row


def test_conformance_notices_a_wrong_resize_convention(tmp_path, monkeypatch):
    _grid_row(monkeypatch, "vit", convention="torch_bicubic_antialias")
    problems = conformance_problems("vit", tmp_path)
    assert any("differs from interpolate_pos_encoding" in p for p in problems), problems


def test_conformance_notices_a_wrong_text_tower_table(tmp_path, monkeypatch):
    """CLIP's text tower read with one reserved row: transformers' own forward pass disagrees."""
    from flax_posenc.conversion import position_tables

    replace_row(
        monkeypatch, position_tables, "TABLE_FAMILIES", "clip_text_tower", offset=1, length_field="no_such_field"
    )
    problems = conformance_problems("clip", tmp_path)
    assert any("works in transformers" in p for p in problems), problems


def _grid_row(monkeypatch, name: str, **changes):
    from flax_posenc.conversion import grid_tables

    replace_row(monkeypatch, grid_tables, "GRID_FAMILIES", name, **changes)


def test_conformance_notices_a_model_said_to_resize_its_grid_that_refuses(tmp_path, monkeypatch):
    """BLIP's vision embeddings refuse a larger image: a row saying they resize it is caught."""
    _grid_row(monkeypatch, "blip_vision", resizes_itself=True)
    problems = conformance_problems("blip_vision_model", tmp_path)
    assert "we say the model resizes its grid itself; its embeddings refuse a larger image" in problems, problems


def test_conformance_notices_a_model_said_to_refuse_that_resizes(tmp_path, monkeypatch):
    """CLIPSeg's vision embeddings interpolate by default: a row saying they refuse is caught."""
    _grid_row(monkeypatch, "clipseg_vision", resizes_itself=False)
    problems = conformance_problems("clipseg_vision_model", tmp_path)
    assert "we say the model refuses another image size; its embeddings take one patch more a side" in problems


def test_conformance_notices_a_grid_read_without_its_class_token(tmp_path, monkeypatch):
    """BLIP's grid read as the class-token-free row (patch_grid) does not fit its rows: caught in one line."""
    from flax_posenc.errors import CheckpointError

    _grid_row(monkeypatch, "blip_vision", prefix_tokens=0)
    with pytest.raises(CheckpointError, match=r"expected 16 rows \(0 prefix \+ 4 x 4 patches") as info:
        conformance_problems("blip_vision_model", tmp_path)
    assert "\n" not in str(info.value)


def test_a_composite_reads_each_tower_under_its_own_module(tmp_path):
    """OWL-ViT's text and vision tables end alike (embeddings.position_embedding.weight): each tower
    reads the one under its own module, with its own rows, and the image check names the grid."""
    from conformance.reference import composite_problems

    from flax_posenc.conversion import inspect_source

    assert composite_problems("owlvit", tmp_path) == []
    record = inspect_source(tmp_path)
    keys = {m.tower: (m.record.table.key, m.record.table.rows) for m in record.mechanisms}
    assert keys == {
        "text": ("text_model.embeddings.position_embedding.weight", 16),
        "vision": ("vision_model.embeddings.position_embedding.weight", 17),
    }
    fits, line = next(m for m in record.mechanisms if m.tower == "vision").record.check_image_size(64)
    assert not fits and line.endswith(
        "; the model refuses another image size unless called with interpolate_pos_encoding=True; "
        "a 64 px image needs 8 x 8 patches: the grid must be resized (fp.resize_grid)"
    ), line


def test_composite_conformance_notices_positions_outside_every_tower():
    """GIT keeps its text positions in the composite itself, beside its vision tower: read as its
    towers only, those positions are named (so GIT is a row of its own, not a composite)."""
    from conformance.reference import _untowered_position_problems
    from conformance.tiny import tiny_model

    model = tiny_model("git")
    problems = _untowered_position_problems(model, [model.image_encoder])
    assert problems == ["position parameters outside every tower, not read: embeddings.position_embeddings.weight"]
    assert _untowered_position_problems(model, [model]) == []


@pytest.mark.parametrize("value", [-1, "8", True, 4096])
def test_a_prefix_count_from_the_config_is_checked(tmp_path, value):
    """Pixio's prefix rows come from n_cls_tokens: a value that is not a count is one line naming it."""
    import json

    from conformance.tiny import quiet, tiny_model

    from flax_posenc.conversion import inspect_source
    from flax_posenc.errors import CheckpointError

    with quiet():
        tiny_model("pixio").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert inspect_source(tmp_path).mechanisms[0].record.table.prefix_tokens == config["n_cls_tokens"] == 2
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_cls_tokens": value}))
    with pytest.raises(
        CheckpointError, match=r"config.json:n_cls_tokens: expected n_cls_tokens as an integer in 0\.\.1024"
    ) as info:
        inspect_source(tmp_path)
    assert "\n" not in str(info.value)
