"""A made-up mechanism kind, for tests only: one module and one row, nothing else.

``toy_window``: a model type ``toy_model`` whose ``config.json`` field ``toy_window`` (made up)
limits its length. ``tests/test_mechanism_table.py`` registers :data:`TOY` in
:data:`~flax_posenc.conversion.mechanisms.MECHANISMS` and sees it everywhere a mechanism shows.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.mechanisms import MechanismKind, ReadContext
from flax_posenc.conversion.readers import fail
from flax_posenc.limits import describe_limit, verdict_line


@dataclasses.dataclass(frozen=True)
class ToyFamily:
    name: str
    model_types: tuple[str, ...]
    window_field: str = "toy_window"


TOY_FAMILIES = MappingProxyType({"toy_row": ToyFamily("toy_row", ("toy_model",))})


@dataclasses.dataclass(frozen=True)
class ToyWindow:
    source: str
    model_type: str
    window: int

    scheme = "toy_window"
    family = "toy_row"
    key = None

    @property
    def limit(self) -> int:
        return self.window

    def describe_limit(self) -> str:
        return describe_limit(f"toy window (toy_window {self.window}) of {self.source}", self.window)

    def check_length(self, length: int) -> tuple[bool, str]:
        return verdict_line(length, self.window, self.describe_limit())

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "scheme": self.scheme, "window": self.window, "limit": self.limit}

    def __str__(self) -> str:
        return f"source:      {self.source}\nscheme:      toy_window\nlimit:       {self.describe_limit()}"


def read_toy(row: ToyFamily, ctx: ReadContext) -> list[ToyWindow]:
    window = ctx.config.get(row.window_field)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise fail(ctx.config_path, f"{row.window_field} as a positive integer", repr(window)[:80])
    return [ToyWindow(ctx.text, str(ctx.config.get("model_type")), window)]


#: The one row.
TOY = MechanismKind(
    "toy_window",
    "a made-up window of positions (tests only)",
    "tokens",
    ("toy_window",),
    (ToyWindow,),
    (("toy_mechanism.TOY_FAMILIES", TOY_FAMILIES),),
    read_toy,
)


def toy_conformance(model: Any, mech: Any, directory: Any) -> list[str]:
    """The toy's conformance hook: its window is what the config says."""
    return [] if mech.limit == model.config.toy_window else [f"toy window {mech.limit}"]
