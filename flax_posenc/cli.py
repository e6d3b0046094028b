"""The old import path of :mod:`flax_posenc.report.cli` (the ``flax-posenc`` command), kept working.

Every public name (``__all__``) is the same object as in :mod:`flax_posenc.report.cli`; any other
attribute is looked up there. To patch the module (tests), patch :mod:`flax_posenc.report.cli`.
"""

from __future__ import annotations

from typing import Any

from flax_posenc.report import cli as _module
from flax_posenc.report.cli import *  # noqa: F403
from flax_posenc.report.cli import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(_module, name)


if __name__ == "__main__":  # `python -m flax_posenc.cli ...`
    import sys

    sys.exit(_module.main())
