"""The import graph of flax_posenc's own modules, read with ``ast``: no cycles, no upward arrow.

Every import of an own module counts, at module level and inside functions (``if TYPE_CHECKING``
blocks aside), except one inside a function that defers a heavy dependency: a module that is not
heavy importing, in a function, one that is (heavy: its module-level imports reach jax, flax,
torch, transformers, optax, orbax or matplotlib). Those deferrals are what keeps ``import
flax_posenc.conversion`` numpy-only (CONTRIBUTING, rule 1), so they are no cycle; but the
numpy-only conversion layer may not import a heavy module at all, not even in a function.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"jax", "jaxlib", "flax", "torch", "transformers", "optax", "orbax", "matplotlib"}
#: arrows known to break the rules, each to go; the test fails when one of them is gone (remove it here).
KNOWN = {
    # issue 25: to remove. models <-> source_record, both in functions: LearnedTableSource (used by
    # models.read_model) belongs in a module below both.
    ("flax_posenc.conversion.models", "flax_posenc.conversion.source_record"),
    # issue 25: to remove. inspect_source reads a converted .msgpack through the jax bridge
    # (pretrained.converted_position_table, which needs InputSpec and flax.serialization): the
    # converted-file format and the numpy-only spec belong on conversion's floor.
    ("flax_posenc.conversion.source_record", "flax_posenc.pretrained"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in (ROOT / "flax_posenc").rglob("*.py")}


def imports(name: str) -> list[tuple[str, bool]]:
    """``(imported name, inside a function)`` for every import of ``name``'s file."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
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
    assert ("flax_posenc.cli", "flax_posenc.cli_output") in arrows and not arrows[
        ("flax_posenc.cli", "flax_posenc.cli_output")
    ]
    assert arrows[("flax_posenc.cli", "flax_posenc.tour")]  # inside cmd_tour
    assert {"flax_posenc.block", "flax_posenc.pretrained", "flax_posenc.nnx", "flax_posenc.linen"} <= heavy
    assert not any(m.startswith("flax_posenc.conversion") for m in heavy)
    assert {"flax_posenc.limits", "flax_posenc.analysis", "flax_posenc.rope_config", "flax_posenc.tour"}.isdisjoint(
        heavy
    )
    assert find_cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"] and find_cycle({("a", "b")}) is None


def test_no_import_cycles():
    arrows, heavy = graph()
    counted = {(a, b) for (a, b), inner in arrows.items() if not (inner and b in heavy and a not in heavy)}
    assert KNOWN - {("flax_posenc.conversion.source_record", "flax_posenc.pretrained")} <= counted, (
        "a known arrow is gone: remove it from KNOWN"
    )
    assert find_cycle(counted - KNOWN) is None, find_cycle(counted - KNOWN)


def test_conversion_never_imports_a_jax_module():
    arrows, heavy = graph()
    upward = {(a, b) for a, b in arrows if a.startswith("flax_posenc.conversion") and b in heavy}
    assert upward - KNOWN == set(), sorted(upward - KNOWN)
    assert ("flax_posenc.conversion.source_record", "flax_posenc.pretrained") in upward, "gone: remove it from KNOWN"
