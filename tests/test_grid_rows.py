"""Issue 35 item 7: the remaining ViT-style grid rows; their conformance check is not vacuous."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conformance.reference import conformance_problems


def _grid_row(monkeypatch, name: str, **changes):
    from flax_posenc.conversion import grid_tables

    rows = dict(grid_tables.GRID_FAMILIES)
    rows[name] = dataclasses.replace(rows[name], **changes)
    monkeypatch.setattr(grid_tables, "GRID_FAMILIES", rows)


@pytest.mark.parametrize(("old", "new"), [(4, 4), (4, 8), (4, 6), (4, 5), (7, 3), (16, 27), (27, 64), (32, 17)])
def test_idefics_bucket_rows_equal_torch_bucketize(old, new):
    """The idefics_buckets matrix picks, for each of ``new`` patches, the row Idefics 3's forward
    computes with torch (the arithmetic written out here from its modeling file)."""
    import torch

    from flax_posenc.grid_config import GRID_CONVENTIONS, resize_matrix

    boundaries = torch.arange(1 / old, 1.0, 1 / old)
    step = 1.0 / torch.tensor([new])
    fractions = torch.clamp(torch.arange(new, dtype=torch.float32)[None, :] * step[:, None], max=1.0 - 1e-6)
    want = torch.bucketize(fractions, boundaries, right=True)[0].numpy()
    m = resize_matrix(old, new, GRID_CONVENTIONS["idefics_buckets"])
    assert m.shape == (new, old) and set(np.unique(m)) <= {0.0, 1.0} and (m.sum(axis=1) == 1).all()
    np.testing.assert_array_equal(m.argmax(axis=1), want)


@pytest.mark.parametrize(("old", "new"), [(4, 4), (4, 6), (7, 3), (16, 27), (27, 64), (32, 17), (70, 33)])
def test_minicpm_bucket_rows_equal_transformers(old, new):
    """The minicpm_buckets matrix picks the rows transformers' own get_vision_nearest_position_ids gives."""
    import torch
    from transformers.vision_utils import get_vision_nearest_position_ids

    from flax_posenc.grid_config import GRID_CONVENTIONS, resize_matrix

    ids = get_vision_nearest_position_ids(torch.tensor([[new, 1]]), old).numpy()  # one column: the row buckets
    m = resize_matrix(old, new, GRID_CONVENTIONS["minicpm_buckets"])
    np.testing.assert_array_equal(m.argmax(axis=1) * old, ids)


def test_conformance_notices_idefics_read_with_bicubic_resizing(tmp_path, monkeypatch):
    """SmolVLM's grid resized bicubically (instead of its bucketed ids) disagrees with its own forward."""
    _grid_row(monkeypatch, "idefics_vision", convention="torch_bicubic")
    problems = conformance_problems("smolvlm_vision", tmp_path)
    assert any("differs from the model's own forward" in p for p in problems), problems


def test_conformance_notices_a_grid_said_to_interpolate_without_interpolate_pos_encoding(tmp_path, monkeypatch):
    """EoMT has no interpolate_pos_encoding: a row saying it has one is caught."""
    _grid_row(monkeypatch, "eomt", interpolation=True)
    problems = conformance_problems("eomt", tmp_path)
    assert "we say interpolation=True; EomtEmbeddings differs" in problems, problems


def test_conformance_notices_eomt_read_with_a_class_row(tmp_path, monkeypatch):
    """EoMT's grid has no class row (its class and register tokens take no position): read with one,
    the rows do not fit, in one line naming the tensor."""
    from flax_posenc.errors import CheckpointError

    _grid_row(monkeypatch, "eomt", prefix_tokens=1)
    with pytest.raises(CheckpointError, match=r"expected 17 rows \(1 prefix \+ 4 x 4 patches") as info:
        conformance_problems("eomt", tmp_path)
    assert "\n" not in str(info.value)


def test_a_grid_without_interpolation_says_so(tmp_path):
    """AIMv2's vision tower refuses another image size and cannot resize: the verdict says so."""
    from conformance.tiny import quiet, tiny_model

    from flax_posenc.conversion import inspect_source

    with quiet():
        tiny_model("aimv2_vision_model").save_pretrained(tmp_path)
    (mech,) = inspect_source(tmp_path).mechanisms
    assert mech.record.check_image_size(32)[0]
    fits, line = mech.record.check_image_size(64)
    assert not fits and "the model refuses another image size (it has no interpolate_pos_encoding)" in line
    assert mech.record.to_dict()["interpolation"] is False


def test_conformance_notices_a_model_adding_its_rows_in_another_order(tmp_path):
    """A grid added as stored is checked row by row: AIMv2 with its position ids reversed (the same
    rows, another order) is caught."""
    import torch
    from conformance.reference import record_problems
    from conformance.tiny import quiet, tiny_model

    from flax_posenc.conversion import inspect_source

    model = tiny_model("aimv2_vision_model")
    with quiet():
        model.save_pretrained(tmp_path)
    assert record_problems(model, inspect_source(tmp_path), tmp_path) == []
    emb = model.embeddings
    emb.position_ids = torch.flip(emb.position_ids, dims=[1])
    problems = record_problems(model, inspect_source(tmp_path), tmp_path)
    assert any("the rows the forward adds differ from the table's" in p for p in problems), problems
