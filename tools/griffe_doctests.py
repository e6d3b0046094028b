"""A griffe extension for the API site (mkdocs.yml): doctests written as plain paragraphs
(``>>> t[:, 0]`` at the left margin of a docstring) are shown as Python code blocks, not read as
Markdown (where ``[...]`` would be a cross-reference); Sphinx roles (``:func:`~a.b` ``) are
shown as code (``a.b``)."""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:func|class|mod|data|meth|attr|obj|exc|const):`~?([^`]+)`")


def fence_doctests(text: str) -> str:
    out: list[str] = []
    in_fence = in_doctest = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        if not in_fence and not in_doctest and line.startswith(">>>"):
            out.append("```pycon")
            in_doctest = True
        elif in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


def plain_roles(text: str) -> str:
    return _ROLE.sub(r"`\1`", text)


class FenceDoctests(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(fence_doctests(obj.docstring.value))
