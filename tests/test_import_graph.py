"""The import graph of flax_posenc's own modules, read with ``ast``: no cycles, no upward arrow.

Every import of an own module counts, at module level and inside functions (``if TYPE_CHECKING``
blocks aside), except one inside a function that defers a heavy dependency: a module that is not
heavy importing, in a function, one that is (heavy: its module-level imports reach jax, flax,
torch, transformers, optax, orbax or matplotlib). Those deferrals are what keeps ``import
flax_posenc.conversion`` numpy-only (CONTRIBUTING, rule 1), so they are no cycle; but the
numpy-only conversion layer may not import a heavy module at all, not even in a function.
Every other own import is at module level, where tools and readers follow it: an own import inside
a function is a heavy deferral, and there are at most ``MAX_DEFERRALS`` of them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"jax", "jaxlib", "flax", "torch", "transformers", "optax", "orbax", "matplotlib"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in (ROOT / "flax_posenc").rglob("*.py")}


def imports(name: str, *, type_checking: bool = False) -> list[tuple[str, bool]]:
    """``(imported name, inside a function)`` for every import of ``name``'s file (with
    ``type_checking``, those of ``if TYPE_CHECKING`` blocks too)."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and not type_checking:
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, inner) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{name}:{child.lineno}: a relative import (the package imports absolutely)"
                for alias in child.names:  # `from pkg import submodule` imports the submodule
                    sub = f"{child.module}.{alias.name}"
                    found.append((sub if sub in MODULES else child.module, inner))
            visit(child, inner)

    visit(ast.parse(MODULES[name].read_text()), False)
    return found


@functools.cache
def graph() -> tuple[dict[tuple[str, str], bool], set[str]]:
    """Own-module arrows ``(importer, imported) -> only inside functions``, and the heavy modules."""
    arrows: dict[tuple[str, str], bool] = {}
    external: dict[str, set[str]] = {m: set() for m in MODULES}
    for name in MODULES:
        for imported, inner in imports(name):
            target = next((c for c in (imported, imported.rpartition(".")[0]) if c in MODULES), None)
            if target is not None and target != name:
                arrows[(name, target)] = arrows.get((name, target), True) and inner
            elif target is None and not inner:
                external[name].add(imported.partition(".")[0])
    heavy = {m for m in MODULES if external[m] & HEAVY}
    while grown := {a for (a, b), inner in arrows.items() if not inner and b in heavy and a not in heavy}:
        heavy |= grown
    return arrows, heavy


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    """One cycle of the directed graph ``edges`` as a list of modules, or ``None``."""
    succ: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        succ.setdefault(a, []).append(b)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in succ.get(node, []):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := walk(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    return next((c for n in sorted(succ) if n not in state and (c := walk(n))), None)


def test_the_graph_is_read():
    arrows, heavy = graph()
    assert ("flax_posenc.report.cli", "flax_posenc.report.output") in arrows and not arrows[
        ("flax_posenc.report.cli", "flax_posenc.report.output")
    ]
    assert arrows[("flax_posenc.report.analysis", "flax_posenc.rope")]  # inside rope_score_decay (jax)
    assert {"flax_posenc.block", "flax_posenc.pretrained", "flax_posenc.nnx", "flax_posenc.linen"} <= heavy
    assert not any(m.startswith("flax_posenc.conversion") for m in heavy)
    assert {
        "flax_posenc.limits",
        "flax_posenc.report.analysis",
        "flax_posenc.report.plots",  # matplotlib only inside the functions that draw
        "flax_posenc.rope_config",
        "flax_posenc.report.tour",
        "flax_posenc.table_properties",
        "flax_posenc.spec",  # the specs, on the numpy floor (block.py re-exports them)
    }.isdisjoint(heavy)
    assert find_cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"] and find_cycle({("a", "b")}) is None


def test_no_import_cycles():
    arrows, heavy = graph()
    counted = {(a, b) for (a, b), inner in arrows.items() if not (inner and b in heavy and a not in heavy)}
    assert find_cycle(counted) is None, find_cycle(counted)


def test_conversion_never_imports_a_jax_module():
    arrows, heavy = graph()
    upward = {(a, b) for a, b in arrows if a.startswith("flax_posenc.conversion") and b in heavy}
    assert upward == set(), sorted(upward)
    # the converted file is read on conversion's floor (conversion/converted_file.py), not through the jax bridge
    assert ("flax_posenc.conversion.source_record", "flax_posenc.conversion.converted_file") in arrows
    # so is the orbax directory's format (conversion/orbax_file.py; orbax only inside read_orbax_params)
    assert ("flax_posenc.conversion.source_record", "flax_posenc.orbax_io") not in arrows
    assert ("flax_posenc.conversion.source_record", "flax_posenc.conversion.orbax_file") in arrows
    assert "flax_posenc.conversion.orbax_file" not in heavy


#: the most own imports inside functions (each a heavy deferral) the package may hold.
MAX_DEFERRALS = 10


def inner_imports() -> list[tuple[str, str, bool]]:
    """``(importer, imported module, defers a heavy one)`` for each own import inside a function
    (one per imported name), ``if TYPE_CHECKING`` blocks aside."""
    _, heavy = graph()
    found = []
    for name in sorted(MODULES):
        for imported, inner in imports(name):
            target = next((c for c in (imported, imported.rpartition(".")[0]) if c in MODULES), None)
            if inner and target is not None and target != name:
                found.append((name, target, target in heavy and name not in heavy))
    return found


def test_own_imports_inside_functions_only_defer_heavy_modules():
    """An own import inside a function defers a heavy module (the importer is not heavy, the
    imported is), and there are at most ``MAX_DEFERRALS``."""
    found = inner_imports()
    assert ("flax_posenc.report.plots", "flax_posenc.grids", True) in found  # the figure that resizes (jax)
    offenders = sorted({(a, b) for a, b, defers in found if not defers})
    assert offenders == [], (
        f"own imports inside functions that defer no heavy module (import at module level): {offenders}"
    )
    assert len(found) <= MAX_DEFERRALS, f"{len(found)} deferrals, at most {MAX_DEFERRALS}: {found}"


#: the reporting wing (issue 25 item 5): the ``flax-posenc`` command, the tour, table properties
#: and figures, in ``flax_posenc.report``; the old paths are aliases of its modules.
WING = "flax_posenc.report"
ALIASES = {f"flax_posenc.{name}": f"{WING}.{name}" for name in ("analysis", "cli", "plots", "tour")}


def in_wing(module: str) -> bool:
    return module == WING or module.startswith(WING + ".") or module in ALIASES


def test_the_core_never_imports_plotting_code():
    """No module outside the wing imports matplotlib or the figures, not even inside a function;
    and the core imports nothing of the wing at all (the table properties an inspection record
    reports are the numpy floor :mod:`flax_posenc.table_properties`, below conversion)."""
    outside = [m for m in MODULES if not in_wing(m)]
    assert "flax_posenc.conversion.source_record" in outside and "flax_posenc.plots" not in outside
    plotting = {f"{WING}.plots", "flax_posenc.plots", f"{WING}.output", f"{WING}.cli", f"{WING}.tour"}
    found = [
        f"{m} imports {imported}"
        for m in outside
        for imported, _ in imports(m)
        if imported.partition(".")[0] == "matplotlib" or imported in plotting or imported in ALIASES
    ]
    assert found == [], found
    arrows, _ = graph()
    into_wing = {(a, b) for a, b in arrows if not in_wing(a) and in_wing(b)}
    assert into_wing == set(), sorted(into_wing)
    assert ("flax_posenc.conversion.learned_source", "flax_posenc.table_properties") in arrows


def test_old_paths_are_aliases_of_the_wing():
    """``flax_posenc.plots`` (and analysis, cli, tour) still import: every public name is the
    wing's object, any other attribute is looked up there; ``fp.plots`` is the alias."""
    import importlib

    import flax_posenc as fp

    for old, new in ALIASES.items():
        alias, module = importlib.import_module(old), importlib.import_module(new)
        assert alias.__all__ == module.__all__ and alias.__all__, old
        assert all(getattr(alias, name) is getattr(module, name) for name in module.__all__), old
        assert arrows_of(old) == {new}, f"{old} imports only {new}"
    assert fp.plots._save is importlib.import_module("flax_posenc.report.plots")._save  # a private name too
    assert fp.analysis.summarize is importlib.import_module("flax_posenc.report.analysis").summarize
    assert importlib.import_module("flax_posenc.cli").main is importlib.import_module("flax_posenc.report.cli").main
    # documented under the wing's names, whichever of the two paths was imported first
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_api_names
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert docs_api_names.missing_names() == []
    # the console script names the wing; an installed entry script naming flax_posenc.cli:main still runs
    import re

    scripts = (ROOT / "pyproject.toml").read_text().partition("[project.scripts]\n")[2].partition("\n\n")[0]
    assert re.findall(r'^(\S+) = "(\S+)"$', scripts, re.M) == [("flax-posenc", "flax_posenc.report.cli:main")]


def arrows_of(module: str) -> set[str]:
    return {b for a, b in graph()[0] if a == module}


# ----------------------------------------------------------------------------- floors

#: The shells: the NNX and Linen modules, their shared construction, ``from_pretrained`` and
#: the orbax writer it uses (orbax, and with it jax, imported only when a file is written).
SHELLS = {
    "flax_posenc.nnx",
    "flax_posenc.linen",
    "flax_posenc.shells",
    "flax_posenc.pretrained",
    "flax_posenc.orbax_io",
}

#: The floors, lowest first: the numpy floor (specs, configs, limits, numpy math), then the
#: checkpoint reader (``conversion``) and the jax core side by side, then the shells, then the
#: reporting wing, then the package's ``__init__``. An arrow may stay on its floor or go down;
#: conversion and the jax core never import each other.
FLOORS = {"numpy floor": 0, "conversion": 1, "jax core": 1, "shells": 2, "report wing": 3, "package": 4}


def floor_of(module: str) -> str:
    """The floor ``module`` stands on (the jax core: every other module whose imports reach jax)."""
    if module == "flax_posenc":
        return "package"
    if in_wing(module):
        return "report wing"
    if module in SHELLS:
        return "shells"
    if module.startswith("flax_posenc.conversion"):
        return "conversion"
    return "jax core" if module in graph()[1] else "numpy floor"


def arrows_against_the_floors() -> list[str]:
    """``"a (floor) -> b (floor)"`` for every own import, at any depth and in ``TYPE_CHECKING``
    blocks too, that goes up a floor or across between conversion and the jax core."""
    bad = []
    for name in sorted(MODULES):
        for imported, _ in imports(name, type_checking=True):
            target = next((c for c in (imported, imported.rpartition(".")[0]) if c in MODULES), None)
            if target is None or target == name:
                continue
            a, b = floor_of(name), floor_of(target)
            if FLOORS[b] > FLOORS[a] or (a != b and FLOORS[a] == FLOORS[b]):
                bad.append(f"{name} ({a}) -> {target} ({b})")
    return sorted(set(bad))


def test_every_arrow_goes_down_the_floors():
    assert floor_of("flax_posenc.grid_config") == floor_of("flax_posenc.grid_sincos") == "numpy floor"
    assert floor_of("flax_posenc.grids") == floor_of("flax_posenc.rope") == "jax core"
    assert floor_of("flax_posenc.conversion.models") == "conversion" and floor_of("flax_posenc.nnx") == "shells"
    assert floor_of("flax_posenc.report.cli") == floor_of("flax_posenc.plots") == "report wing"
    assert arrows_against_the_floors() == []


def test_the_floor_check_sees_an_arrow_against_them(monkeypatch):
    """The check is not vacuous: an import of the checkpoint reader from the jax core (what
    ``grids.py`` once did), and one hidden in a ``TYPE_CHECKING`` block of the numpy floor, are named."""
    real = imports

    def more(name: str, *, type_checking: bool = False):
        extra = []
        if name == "flax_posenc.grids":
            extra = [("flax_posenc.conversion.grid_tables", False)]
        if name == "flax_posenc.limits" and type_checking:
            extra = [("flax_posenc.overflow", False)]
        return real(name, type_checking=type_checking) + extra

    monkeypatch.setitem(globals(), "imports", more)
    assert arrows_against_the_floors() == [
        "flax_posenc.grids (jax core) -> flax_posenc.conversion.grid_tables (conversion)",
        "flax_posenc.limits (numpy floor) -> flax_posenc.overflow (jax core)",
    ]
