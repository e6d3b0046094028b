"""The old import path of :mod:`flax_posenc.report.tour` (the ``flax-posenc tour`` demo), kept working.

Every public name (``__all__``) is the same object as in :mod:`flax_posenc.report.tour`; any other
attribute is looked up there. To patch the module (tests), patch :mod:`flax_posenc.report.tour`.
"""

from __future__ import annotations

from typing import Any

from flax_posenc.report import tour as _module
from flax_posenc.report.tour import *  # noqa: F403
from flax_posenc.report.tour import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(_module, name)
