"""Every public name of flax-posenc must be documented on an API page (docs/api/*.md).

A name is documented when a page holds a mkdocstrings directive for it, ``::: flax_posenc.NAME``
(``::: flax_posenc.nnx.NAME`` for a module class, ``::: flax_posenc.conversion.NAME``), or lists
it under a directive's ``members:`` option; a submodule that lives elsewhere (``flax_posenc.plots``
is ``flax_posenc.report.plots``) is documented under its own name. The public names are:

- ``flax_posenc.__all__`` (the functional core, the errors and the submodules),
- the public classes and functions defined in ``flax_posenc.nnx`` and ``flax_posenc.linen``
  (their ``__all__`` when they have one),
- ``flax_posenc.conversion.__all__``.

Used by ``tools/mkdocs_hooks.py`` (``make docs`` fails) and ``tests/test_docs_site.py``.

    python tools/docs_api_names.py     # prints every missing name and where to add it; exit 1 if any
"""

from __future__ import annotations

import importlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
API_DIR = ROOT / "docs" / "api"

_DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$")
_MEMBERS = re.compile(r"^\s+members:\s*(.*)$")
_LIST_ITEM = re.compile(r"^\s+-\s+([\w.]+)\s*$")


def module_public_names(module) -> list[str]:
    """``module.__all__``, or the public classes/functions the module itself defines."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    )


def public_names() -> dict[str, str]:
    """Dotted public name -> where it is declared public (for the message)."""
    import flax_posenc

    names = {f"flax_posenc.{n}": "flax_posenc.__all__" for n in flax_posenc.__all__}
    for shell in ("nnx", "linen"):
        module = importlib.import_module(f"flax_posenc.{shell}")
        where = f"flax_posenc.{shell}.__all__" if hasattr(module, "__all__") else f"defined in flax_posenc/{shell}.py"
        for n in module_public_names(module):
            names[f"flax_posenc.{shell}.{n}"] = where
    conversion = importlib.import_module("flax_posenc.conversion")
    for n in conversion.__all__:
        names[f"flax_posenc.conversion.{n}"] = "flax_posenc.conversion.__all__"
    return names


def documented_names(api_dir: pathlib.Path = API_DIR) -> dict[str, str]:
    """Dotted name -> the API page (relative to the repo) that documents it."""
    found: dict[str, str] = {}
    for page in sorted(api_dir.glob("*.md")):
        rel = f"docs/api/{page.name}"
        current = None
        in_members = False
        for line in page.read_text(encoding="utf-8").splitlines():
            m = _DIRECTIVE.match(line)
            if m:
                current, in_members = m.group(1), False
                found.setdefault(current, rel)
                continue
            m = _MEMBERS.match(line)
            if m and current:
                inline = m.group(1).strip()
                in_members = inline == ""
                if inline.startswith("["):
                    for member in re.findall(r"[\w.]+", inline):
                        found.setdefault(f"{current}.{member}", rel)
                continue
            m = _LIST_ITEM.match(line)
            if m and current and in_members:
                found.setdefault(f"{current}.{m.group(1)}", rel)
                continue
            if line.strip() and not line.startswith((" ", "\t")):
                current, in_members = None, False
    return found


def _page_for(name: str, documented: dict[str, str]) -> str:
    """The page where names from the same defining module (or the same namespace) live."""
    parent = name.rsplit(".", 1)[0]
    if parent != "flax_posenc":  # flax_posenc.nnx.X -> the page of the other nnx names
        pages = [page for doc, page in documented.items() if doc.startswith(parent + ".")]
        if pages:
            return max(set(pages), key=pages.count)
    try:
        import flax_posenc

        obj = getattr(flax_posenc, name.split(".", 1)[1])
        home = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    except Exception:
        home = ""
    if home:
        for doc, page in documented.items():
            if doc == home or doc.startswith(home + "."):
                return page
            try:
                mod, attr = doc.rsplit(".", 1)
                if getattr(getattr(importlib.import_module(mod), attr, None), "__module__", None) == home:
                    return page
            except Exception:
                continue
    return "the docs/api/*.md page of its README group"


def _module_name(name: str) -> str | None:
    """The module's own name when ``name`` is a submodule that lives elsewhere (``flax_posenc.plots``
    is ``flax_posenc.report.plots``, documented under that name), else ``None``."""
    import types

    import flax_posenc

    obj = getattr(flax_posenc, name.removeprefix("flax_posenc."), None) if name.count(".") == 1 else None
    if not isinstance(obj, types.ModuleType):
        return None
    return vars(obj).get("_module", obj).__name__  # an alias module (flax_posenc/plots.py) names its target


def missing_names(api_dir: pathlib.Path = API_DIR) -> list[str]:
    """One line per public name that no API page documents, saying where to add it."""
    documented = documented_names(api_dir)
    lines = []
    for name, where in public_names().items():
        if name not in documented and _module_name(name) not in documented:
            lines.append(
                f"{name} ({where}) is not on any API page: add the line `::: {name}` to {_page_for(name, documented)}"
            )
    return lines


def stale_names(api_dir: pathlib.Path = API_DIR) -> list[str]:
    """Directives naming an object that does not exist (a renamed or removed public name)."""
    lines = []
    for name, page in documented_names(api_dir).items():
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                lines.append(f"{page} documents {name}, which does not exist: remove or rename the `::: {name}` line")
            break
    return lines


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    problems = missing_names() + stale_names()
    print("\n".join(problems) or f"every public name is documented ({len(public_names())} names)")
    sys.exit(1 if problems else 0)
