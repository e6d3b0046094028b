"""Every model type accounted for: the refusals that name the mechanism not read
(``flax_posenc/conversion/unread_mechanisms.py``), their wiring (``refusal``, ``inspect``, ``check``,
``families``), the import-time check that no type is both read and refused, and the modality of
each type on the coverage page.

The rows come from ``tools/unread_mechanisms.py`` (the position modules and tensors of each type's
model as transformers builds it); here they are checked against transformers again for a sample
(the class a row names is in the model transformers builds today), and the module against the
recorded scan (regenerating it changes nothing).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

from flax_posenc.conversion import inspect_source, models
from flax_posenc.conversion.models import MODEL_MECHANISMS, REFUSED_MODEL_TYPES, refusal
from flax_posenc.conversion.unread_mechanisms import UNBUILDABLE_MODEL_TYPES, UNREAD_MECHANISMS
from flax_posenc.errors import CheckpointError

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tool():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import unread_mechanisms
    finally:
        sys.path.pop(0)
    return unread_mechanisms


def _coverage():
    spec = importlib.util.spec_from_file_location("coverage_script", ROOT / "benchmarks" / "coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_are_sorted_one_line_each_and_real_model_types():
    from conformance.catalog import all_model_types

    for rows in (UNREAD_MECHANISMS, UNBUILDABLE_MODEL_TYPES):
        assert list(rows) == sorted(rows)
        assert all(v and "\n" not in v for v in rows.values())
        assert set(rows) <= set(all_model_types())
    assert not set(UNREAD_MECHANISMS) & set(UNBUILDABLE_MODEL_TYPES)
    assert not (set(UNREAD_MECHANISMS) | set(UNBUILDABLE_MODEL_TYPES)) & (
        set(MODEL_MECHANISMS) | set(REFUSED_MODEL_TYPES)
    )


def test_every_model_type_is_accounted_for():
    """Read, free of positions, refused with the mechanism named, or unbuildable: never "not in the
    registry". The page is current (``tests/test_coverage_page.py``), and writing it stops at a type
    with no status (below), so its counts are those of every type."""
    import re

    page = (ROOT / "docs" / "coverage.md").read_text()
    assert "not in the registry" not in page and "| not read |" not in page
    total = re.search(r"^\| \*\*all\*\* \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", page, re.M)
    assert total, "docs/coverage.md: expected the counts table's **all** row"
    count, *by_status = map(int, total.groups())
    from conformance.catalog import all_model_types

    assert count == len(all_model_types()) == sum(by_status)


def test_a_type_accounted_for_nowhere_stops_the_page(monkeypatch):
    coverage = _coverage()
    monkeypatch.setattr(
        coverage, "UNREAD_MECHANISMS", {k: v for k, v in UNREAD_MECHANISMS.items() if k != "clap_audio_model"}
    )
    with pytest.raises(
        SystemExit, match=r"^clap_audio_model: expected a model type read, free of positions, refused or unbuildable"
    ):
        coverage.status("clap_audio_model")
    assert _coverage().status("clap_audio_model") == "refused"


def test_a_type_both_read_and_refused_fails_at_import(monkeypatch):
    monkeypatch.setattr(models, "UNREAD_MECHANISMS", {**UNREAD_MECHANISMS, "gpt2": "a learned table"})
    with pytest.raises(
        ValueError, match=r"^UNREAD_MECHANISMS: expected no model type that a registry row reads, found 1: gpt2"
    ) as info:
        models._check_refusals()
    assert "\n" not in str(info.value)
    monkeypatch.setattr(models, "UNREAD_MECHANISMS", UNREAD_MECHANISMS)
    monkeypatch.setattr(models, "REFUSED_MODEL_TYPES", {**REFUSED_MODEL_TYPES, "llama": "RoPE"})
    with pytest.raises(ValueError, match=r"^REFUSED_MODEL_TYPES: expected no model type .* found 1: llama"):
        models._check_refusals()


@pytest.mark.parametrize(
    ("model_type", "words"),
    [
        ("clap_audio_model", "relative_position_bias_table"),
        ("wavtokenizer", "backbone.pos_net"),
        ("minimax_m3_vl_vision", "MiniMaxM3VLVisionRotaryEmbedding"),
        ("florence_vision", "Florence2VisionLearnedAbsolutePositionEmbedding2D"),
        ("pp_doclayout_v2", "PPDocLayoutV2SinePositionEmbedding"),
        ("zoedepth", "ZoeDepthPatchTransformerEncoder.positional_encoding_1d"),
        ("sam_prompt_encoder", "cannot build it here"),
    ],
)
def test_refusal_names_the_mechanism(model_type, words):
    line = refusal(model_type)
    assert line.startswith(f"{model_type}: ") and words in line and "\n" not in line


@pytest.mark.parametrize(
    ("model_type", "found"),
    [
        ("clap_audio_model", "relative_position_bias_table"),
        ("wavtokenizer", "backbone.pos_net"),
        ("minimax_m3_vl_vision", "MiniMaxM3VLVisionRotaryEmbedding"),
    ],
)
def test_rows_agree_with_the_model_transformers_builds(model_type, found):
    """The class or tensor a row names is in the model transformers builds today (meta device: no weights)."""
    scanned = _tool().scan_one(model_type)
    assert found in scanned["modules"] + scanned["names"] or any(found in n for n in scanned["names"]), scanned
    assert found in UNREAD_MECHANISMS[model_type]


def test_module_is_what_the_tool_writes_from_the_recorded_scan():
    """The rows of single model types are what ``--write`` derives from the recorded scan; a composite
    type's row names no tower as not read that a registry row now reads (rebuilding every composite
    config to rederive those rows takes ~20 s: ``python tools/unread_mechanisms.py --write`` does)."""
    import re

    tool = _tool()
    scanned = json.loads(tool.SCAN.read_text())
    unread, unbuildable = tool.derive(scanned, composites=False)
    assert {t: v for t, v in UNREAD_MECHANISMS.items() if not scanned[t].get("composite")} == unread, (
        "flax_posenc/conversion/unread_mechanisms.py is stale: run `python tools/unread_mechanisms.py --write`"
    )
    assert {t: v for t, v in UNBUILDABLE_MODEL_TYPES.items() if not scanned[t].get("composite")} == {
        t: v for t, v in unbuildable.items() if not scanned[t].get("composite")
    }
    towers = 0
    for t, line in UNREAD_MECHANISMS.items():
        if scanned[t].get("composite"):
            named = re.findall(r"(?:^|; )\w+ ([\w.-]+) \((?!read on its own)", line)
            assert not set(named) & set(MODEL_MECHANISMS), (t, line)
            towers += len(named)
    assert towers > 100  # the pattern finds the towers the rows name (not vacuous)


def test_inspect_and_check_give_the_refusal(tmp_path, capsys):
    from flax_posenc.report.cli import main

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "clap_audio_model"}))
    with pytest.raises(CheckpointError, match="relative_position_bias_table"):
        inspect_source(tmp_path)
    for args in (["inspect", str(tmp_path)], ["check", str(tmp_path), "--length", "8"]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "clap_audio_model: position mechanism not read: Swin-style window relative position bias table" in err
        assert len(err.splitlines()) == 1


def test_families_json_lists_every_refusal(capsys):
    from flax_posenc.report.cli import main

    assert main(["families", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["refused"]) == set(REFUSED_MODEL_TYPES) | set(UNREAD_MECHANISMS)
    assert out["unbuildable"] == dict(UNBUILDABLE_MODEL_TYPES)


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [
        ("gpt2", "text"),
        ("resnet", "vision"),
        ("whisper", "audio"),
        ("vivit", "video"),
        ("llava", "multimodal"),
        ("patchtst", "time series"),
        ("siglip_vision_model", "vision"),
        ("owlvit_text_model", "text"),
        ("speecht5_hifigan", "audio"),
    ],
)
def test_modality_from_auto_mappings(model_type, expected):
    from conformance.catalog import modality

    assert modality(model_type) == expected


def test_a_composite_line_holds_its_towers_whole_lines():
    """A tower's line is copied whole into its composite's (a ``;`` between two of the tower's mechanisms
    no longer cuts the second off: Cohere Compass's vision grid), and a composite tower's line is its
    own derived line, not "not read" (Qwen2.5-Omni's thinker, derived after the composite)."""
    from conformance.catalog import composite_towers

    checked, with_clauses = 0, 0
    for model_type, line in UNREAD_MECHANISMS.items():
        for field, tower in composite_towers(model_type) or ():
            own = UNREAD_MECHANISMS.get(tower)
            if own is None or f"{field} {tower} (" not in line:
                continue
            assert f"{field} {tower} ({own.removeprefix('not read: ')})" in line, (model_type, tower)
            checked += 1
            with_clauses += "; " in own
    assert checked >= 20 and with_clauses >= 5, (checked, with_clauses)
    assert "learned patch-position grid (pos_embed)" in UNREAD_MECHANISMS["cohere_compass"]
    assert "qwen2_5_omni_thinker (not read)" not in UNREAD_MECHANISMS["qwen2_5_omni"]
