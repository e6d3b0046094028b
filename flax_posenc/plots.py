"""The old import path of :mod:`flax_posenc.report.plots` (the figures), kept working.

Every public name (``__all__``) is the same object as in :mod:`flax_posenc.report.plots`; any other
attribute is looked up there. To patch the module (tests), patch :mod:`flax_posenc.report.plots`.
"""

from __future__ import annotations

from typing import Any

from flax_posenc.report import plots as _module
from flax_posenc.report.plots import *  # noqa: F403
from flax_posenc.report.plots import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(_module, name)
