"""The family, scheme and convention tables of the docs are what tools/docs_tables.py writes from
the registries today; a registry row shows on its page."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "tools" / "docs_tables.py")
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)


def test_every_generated_table_is_current():
    assert tables.stale() == [], "run `python tools/docs_tables.py --write`"


@pytest.mark.parametrize(
    ("name", "registry"),
    [
        ("mechanism-kinds", "flax_posenc.conversion.mechanisms:MECHANISMS"),
        ("learned-families", "flax_posenc.conversion.families:FAMILIES"),
        ("position-tables", "flax_posenc.conversion.position_tables:TABLE_FAMILIES"),
        ("rope-alibi-families", "flax_posenc.conversion.relative_config:RELATIVE_FAMILIES"),
        ("relative-bias-families", "flax_posenc.conversion.relative_bias:RELATIVE_BIAS_FAMILIES"),
        ("rope-scalings", "flax_posenc.rope_config:ROPE_SCALINGS"),
        ("grid-conventions", "flax_posenc.grid_config:GRID_CONVENTIONS"),
    ],
)
def test_one_line_per_registry_row(name, registry):
    module, attr = registry.split(":")
    rows = getattr(importlib.import_module(module), attr)
    body = [line for line in tables.render(name).splitlines() if line.startswith("| ")][1:]
    first_cells = [line.split(" | ")[0].removeprefix("| ").strip("`") for line in body]
    assert first_cells == list(rows), name


def test_every_model_type_of_the_registries_is_on_a_page():
    from flax_posenc.conversion.families import FAMILIES
    from flax_posenc.conversion.grid_tables import GRID_FAMILIES
    from flax_posenc.conversion.position_tables import TABLE_FAMILIES
    from flax_posenc.conversion.relative_bias import RELATIVE_BIAS_FAMILIES
    from flax_posenc.conversion.relative_config import RELATIVE_FAMILIES

    for name, registry in [
        ("learned-families", FAMILIES),
        ("position-tables", TABLE_FAMILIES),
        ("rope-alibi-families", RELATIVE_FAMILIES),
        ("relative-bias-families", RELATIVE_BIAS_FAMILIES),
        ("grid-families", GRID_FAMILIES),
    ]:
        page = (ROOT / tables.TABLES[name][0]).read_text()
        for row in registry.values():
            assert all(f"`{t}`" in page for t in row.model_types), (name, row.name)


def test_a_stale_or_missing_table_is_named(tmp_path, monkeypatch):
    for page in {p for p, _ in tables.TABLES.values()}:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text())
    assert tables.stale(tmp_path) == []
    page = tmp_path / "docs" / "rope-alibi.md"
    page.write_text(page.read_text().replace("| `proportional` |", "| `proportionall` |"))
    assert tables.stale(tmp_path) == [
        "docs/rope-alibi.md: table 'rope-scalings' is stale: run `python tools/docs_tables.py --write`"
    ]
    assert tables.rewrite(page.read_text(), "docs/rope-alibi.md") == (ROOT / "docs" / "rope-alibi.md").read_text()
    page.write_text(page.read_text().replace("<!-- generated: rope-scalings -->", ""))
    assert tables.stale(tmp_path) == [
        "docs/rope-alibi.md: needs exactly one `<!-- generated: rope-scalings -->` ... `<!-- /generated -->` block"
    ]
    with pytest.raises(SystemExit, match="'grid-families' is not one of docs/rope-alibi.md's tables"):
        tables.rewrite("<!-- generated: grid-families -->\n<!-- /generated -->", "docs/rope-alibi.md")


def test_a_scaling_type_without_its_formula_fails(monkeypatch):
    monkeypatch.delitem(tables.ROPE_FORMULAS, "llama3")
    with pytest.raises(SystemExit, match=r"ROPE_FORMULAS has no line for the scaling type\(s\) \['llama3'\]"):
        tables.render("rope-scalings")
