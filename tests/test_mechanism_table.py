"""The one table of mechanism kinds: a new kind is one module and one row, and shows everywhere.

``tests/toy_mechanism.py`` is a made-up kind (a ``toy_window`` config field that limits a
``toy_model``); registered in ``MECHANISMS`` it must show in ``inspect_source``, ``flax-posenc
families``, ``inspect``/``check`` (text and ``--json``), the coverage page, the docs table of kinds
and the conformance parametrization, without any other library file knowing it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
from types import MappingProxyType

import pytest
import toy_mechanism
from conformance import reference

from flax_posenc.conversion import inspect_source, which_family
from flax_posenc.conversion.families import FAMILIES
from flax_posenc.conversion.mechanisms import MECHANISMS, MechanismKind, MechanismTable
from flax_posenc.conversion.models import MECHANISM_KINDS, MODEL_MECHANISMS
from flax_posenc.conversion.position_tables import TABLE_FAMILIES
from flax_posenc.report.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A ``toy_model`` checkpoint (its config only) while the toy kind is registered."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "toy_model", "toy_window": 7}))
    monkeypatch.setitem(reference.KIND_CHECKS, "toy_window", toy_mechanism.toy_conformance)
    with MECHANISMS.registered(toy_mechanism.TOY):
        yield tmp_path


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_a_toy_kind_is_read_by_inspect_source(toy):
    rec = inspect_source(toy)
    assert [m.kind for m in rec.mechanisms] == ["toy_window"] and rec.mechanisms[0].tower == "text"
    assert rec.limit == 7 and rec.check_length(8)[0] is False and rec.check_length(7)[0] is True
    assert MODEL_MECHANISMS["toy_model"] == (("toy_window", "toy_row"),)
    assert "toy_window" in MECHANISM_KINDS and which_family("toy-model").kind == "toy_window"


def test_a_toy_kind_shows_in_the_cli(toy, capsys):
    code, out = _cli(capsys, "families")
    assert code == 0 and "toy_window" in out and "a made-up window of positions" in out
    assert any(line.split() == ["toy_model", "toy_window:toy_row"] for line in out.splitlines())
    code, out = _cli(capsys, "families", "--json")
    listed = json.loads(out)
    assert listed["read"]["toy_model"] == [{"kind": "toy_window", "family": "toy_row", "tower": "text"}]
    assert listed["kinds"]["toy_window"]["limit_unit"] == "tokens"
    code, out = _cli(capsys, "inspect", str(toy))
    assert code == 0 and "toy window (toy_window 7)" in out and "holds 7 positions (0..6)" in out
    code, out = _cli(capsys, "inspect", str(toy), "--json")
    report = json.loads(out)
    assert report["limit"] == 7 and [m["kind"] for m in report["mechanisms"]] == ["toy_window"]
    assert report["mechanisms"][0]["window"] == 7
    code, out = _cli(capsys, "check", str(toy), "--length", "7")
    assert code == 0 and "ok: 7 positions fit" in out
    code, out = _cli(capsys, "check", str(toy), "--length", "9", "--json")
    assert code == 1 and json.loads(out)["excess"] == 2


def test_a_toy_kind_without_figures_is_not_plotted(toy, tmp_path):
    from flax_posenc.report.plots import figure_jobs

    with pytest.raises(ValueError, match=r"nothing to plot \(mechanisms: toy_window; none has figures\)"):
        figure_jobs(inspect_source(toy), tmp_path / "figures")


def test_a_toy_kind_shows_on_the_generated_pages(toy):
    coverage = _script("coverage_script", "benchmarks/coverage.py")
    assert any(line.startswith("| `toy_window` | a made-up window") for line in coverage.mechanism_kinds())
    tables = _script("docs_tables", "tools/docs_tables.py")
    assert "| toy_window | a made-up window of positions (tests only) | tokens |" in tables.render("mechanism-kinds")


def test_a_toy_kind_is_a_conformance_case(toy):
    conformance = _script("conformance_cases", "tests/test_conformance.py")
    assert "toy_model" in conformance.cases()
    assert sorted(reference.KIND_CHECKS) == sorted(MECHANISMS)  # as test_every_mechanism_kind_has_a_conformance_hook


def test_the_toy_leaves_no_trace():
    assert "toy_window" not in MECHANISMS and "toy_model" not in MODEL_MECHANISMS
    assert which_family("toy_model") is None and "toy_window" not in MECHANISM_KINDS


def _kind(name: str, registries, scheme: str | None = None) -> MechanismKind:
    return dataclasses.replace(toy_mechanism.TOY, name=name, schemes=(scheme or name,), registries=registries)


def test_a_row_two_registries_of_one_kind_claim_fails_naming_both():
    bert = MappingProxyType({"bert": TABLE_FAMILIES["bert_like"]})
    with pytest.raises(ValueError) as e:
        MechanismTable([_kind("learned", (("A.FAMILIES", FAMILIES), ("B.TABLES", bert)))])
    assert str(e.value) == "MECHANISMS['learned']: row 'bert' is claimed by both A.FAMILIES and B.TABLES"


def test_a_model_type_two_rows_of_one_kind_claim_fails_naming_both():
    twin = dataclasses.replace(toy_mechanism.TOY_FAMILIES["toy_row"], name="toy_twin")
    rows = MappingProxyType({"toy_twin": twin})
    with pytest.raises(ValueError) as e:
        MECHANISMS.register(_kind("toy_a", (("toy.ONE", toy_mechanism.TOY_FAMILIES), ("toy.TWO", rows))))
    message = str(e.value)
    assert "\n" not in message and "model type 'toy_model' is claimed by two rows" in message
    assert "'toy_row' (toy.ONE)" in message and "'toy_twin' (toy.TWO)" in message
    assert "toy_a" not in MECHANISMS  # a refused row leaves the table as it was


def test_a_scheme_of_two_kinds_fails_naming_both():
    with pytest.raises(ValueError, match="found 'rope' in both 'rope' and 'toy_b'"):
        MECHANISMS.register(_kind("toy_b", toy_mechanism.TOY.registries, scheme="rope"))


def test_rows_of_one_kind_may_share_a_model_type_for_different_tensors():
    """mbart's encoder and decoder tables, Whisper's decoder (text) and encoder (audio) tables."""
    assert MODEL_MECHANISMS["mbart"] == (("learned", "bart_like_encoder"), ("learned", "bart_like_decoder"))
    kinds = MECHANISMS["learned"]
    assert [kinds.tower_of(kinds.rows[name]) for _, name in MODEL_MECHANISMS["whisper"]] == ["text", "audio"]
    assert MECHANISMS["grid"].tower_of(MECHANISMS["grid"].rows["clip_vision_tower"]) == "vision"
