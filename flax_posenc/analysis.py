"""The old import path of :mod:`flax_posenc.report.analysis` (properties of a table), kept working.

Every public name (``__all__``) is the same object as in :mod:`flax_posenc.report.analysis`; any other
attribute is looked up there. To patch the module (tests), patch :mod:`flax_posenc.report.analysis`.
"""

from __future__ import annotations

from typing import Any

from flax_posenc.report import analysis as _module
from flax_posenc.report.analysis import *  # noqa: F403
from flax_posenc.report.analysis import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(_module, name)
