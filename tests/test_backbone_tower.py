"""``backbone_config`` read as a tower (``backbone``): a detection, segmentation or depth head
(UperNet, Depth Anything, DETR) read by a row of its own, its backbone beside it as its own model
type; an unread backbone named; a head whose own mechanism is not read (Mask2Former) refused even
when its backbone is read.

The values of each backbone against transformers' own module: ``tests/test_conformance.py``
(``upernet``, ``depth_anything``: :func:`conformance.reference.record_problems` checks the
backbone tower against the backbone module, the head against the model without it).
"""

from __future__ import annotations

import json

import pytest

from flax_posenc.conversion import inspect_source
from flax_posenc.conversion.models import HEAD_TOWER_FIELDS, TOWER_FIELDS, TOWER_UNITS
from flax_posenc.errors import CheckpointError

_RESNET = {"model_type": "resnet", "embedding_size": 8, "hidden_sizes": [8, 8], "depths": [1, 1]}
_SWIN = {"model_type": "swin", "embed_dim": 16, "depths": [1, 1], "num_heads": [1, 1], "window_size": 4}
# ViTPose's backbone: its learned patch-position grid (a row added to every patch) is not read (a refusal naming it)
_VITPOSE = {"model_type": "vitpose_backbone", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
_DINOV2 = {"model_type": "dinov2", "hidden_size": 32, "image_size": 56, "patch_size": 14, "num_attention_heads": 2}


def _write(path, config):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_backbone_is_a_tower_of_image_pixels():
    assert TOWER_FIELDS["backbone_config"] == "backbone"
    assert TOWER_UNITS["backbone"] == "image pixels" == TOWER_UNITS["vision"]
    assert HEAD_TOWER_FIELDS == {"backbone_config"}


def test_head_and_read_backbone(tmp_path):
    """UperNet (convolutional head) over a ResNet: both free of positions, each labelled with its tower."""
    record = inspect_source(_write(tmp_path / "u", {"model_type": "upernet", "backbone_config": _RESNET}))
    assert [(m.kind, m.tower) for m in record.mechanisms] == [("none", "vision"), ("none", "backbone")]
    assert record.unread == () and record.limit is None
    report = record.to_dict()
    assert report["towers"] == ["backbone", "vision"] and report["unread_towers"] == []
    assert "(backbone tower)" in str(record)


def test_unread_backbone_is_named(tmp_path, capsys):
    """UperNet over a ViTPose backbone: the head is read, the backbone is listed as not read with its mechanism
    (Swin and ViTDet were the examples until the window bias and the grid rows made them read)."""
    from flax_posenc.conversion.models import refusal
    from flax_posenc.report.cli import main

    d = _write(tmp_path / "u", {"model_type": "upernet", "backbone_config": _VITPOSE})
    record = inspect_source(d)
    assert [(m.kind, m.tower) for m in record.mechanisms] == [("none", "vision")]
    assert [(u.tower, u.field, u.model_type) for u in record.unread] == [
        ("backbone", "backbone_config", "vitpose_backbone")
    ]
    assert record.unread[0].reason == refusal("vitpose_backbone")
    assert "position_embeddings" in record.unread[0].reason  # the refusal names its mechanism
    assert "backbone tower (backbone_config: vitpose_backbone) NOT READ" in str(record)
    assert main(["inspect", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unread_towers"] == [record.unread[0].to_dict()]
    assert main(["check", str(d), "--image-size", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert "backbone tower (backbone_config: vitpose_backbone) NOT READ" in err and len(err.splitlines()) == 1


def test_backbone_grid_is_checked_by_image_size(tmp_path, capsys):
    """Depth Anything over DINOv2: the backbone's grid answers --image-size (56 px fits, 112 px does not)."""
    from flax_posenc.report.cli import main

    d = _write(tmp_path / "da", {"model_type": "depth_anything", "backbone_config": _DINOV2})
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"backbone.embeddings.position_embeddings": np.zeros((1, 17, 32), np.float32)}, d / "model.safetensors")
    record = inspect_source(d)
    assert [(m.kind, m.tower) for m in record.mechanisms] == [("none", "vision"), ("grid", "backbone")]
    assert main(["check", str(d), "--image-size", "56"]) == 0
    assert main(["check", str(d), "--image-size", "112"]) == 1
    capsys.readouterr()


def test_timm_backbone_is_unread(tmp_path):
    record = inspect_source(
        _write(tmp_path / "u", {"model_type": "upernet", "use_timm_backbone": True, "backbone": "resnet50"})
    )
    assert [(u.tower, u.field, u.model_type) for u in record.unread] == [("backbone", "backbone", "timm:resnet50")]
    assert "timm" in record.unread[0].reason


def test_head_not_read_is_refused_although_its_backbone_is(tmp_path):
    """ZoeDepth's own positions (the sinusoid of its patch transformer) are not in the registry: a read
    ResNet backbone does not make it read. (DETR, then Mask2Former were the example until their
    detr_positions rows made them read.)"""
    from flax_posenc.conversion.models import MODEL_MECHANISMS

    assert "zoedepth" not in MODEL_MECHANISMS  # the premise: once it is read, pick another unread head
    config = {"model_type": "zoedepth", "backbone_config": _RESNET}
    with pytest.raises(CheckpointError, match=config["model_type"]) as info:
        inspect_source(_write(tmp_path / "d", config))
    assert "\n" not in str(info.value)


def test_composite_catalog_never_reads_a_head_by_its_backbone():
    """DETR and UperNet are rows of their own; ZoeDepth (not read, its only sub-config a backbone)
    is the case that reaches the head-around-a-backbone rule."""
    from conformance.catalog import composite_read

    from flax_posenc.conversion.models import MODEL_MECHANISMS

    assert not composite_read("detr") and not composite_read("upernet")
    assert "zoedepth" not in MODEL_MECHANISMS and not composite_read("zoedepth")


def test_conformance_checks_the_backbone_against_its_own_module(tmp_path, monkeypatch):
    """Not vacuous: a Swin backbone wrongly declared free of positions under UperNet is caught by the
    backbone tower's check (its window bias table), and the head's own check does not see it."""
    import dataclasses

    from conformance import tiny
    from conformance.reference import conformance_problems

    from flax_posenc.conversion.mechanisms import MECHANISMS

    old = MECHANISMS["none"]
    registries = tuple(
        (
            name,
            {
                n: dataclasses.replace(r, model_types=(*r.model_types, "swin")) if n == "convolutional_vision" else r
                for n, r in rows.items()
            },
        )
        for name, rows in old.registries
    )
    monkeypatch.setattr(
        MECHANISMS, "_kinds", {**MECHANISMS._kinds, "none": dataclasses.replace(old, registries=registries)}
    )
    monkeypatch.setattr(MECHANISMS, "_derived", {})
    swin = {**_SWIN, "image_size": 32, "patch_size": 4, "out_features": ["stage1", "stage2"]}
    monkeypatch.setitem(
        tiny.OVERRIDES, "upernet", {**tiny.OVERRIDES["upernet"], "backbone_config": swin, "use_auxiliary_head": False}
    )
    problems = conformance_problems("upernet", tmp_path)
    assert problems and all(p.startswith("backbone tower: ") for p in problems), problems
    assert any("relative_position_bias_table" in p for p in problems), problems
