"""flax-posenc: positional encodings for JAX and Flax.

The functional core is re-exported here; modules live in :mod:`flax_posenc.nnx` and
:mod:`flax_posenc.linen`, checkpoint interop in :mod:`flax_posenc.conversion`.

Attributes are imported lazily (PEP 562), so ``import flax_posenc.conversion`` does not pull
in jax: conversion is numpy-only and usable from any framework.

>>> import flax_posenc as fp
>>> fp.sinusoidal_table(4, 4).shape
(4, 4)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from flax_posenc.errors import CheckpointError, PositionLimitError

#: THE version (pyproject.toml reads it: the package metadata says the same; CHANGELOG.md's newest
#: heading names it)
__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "sinusoidal_frequencies": "flax_posenc.sinusoid_math",
    "sinusoidal_table": "flax_posenc.sinusoidal",
    "sinusoidal_encoding": "flax_posenc.sinusoidal",
    "lookup_positions": "flax_posenc.lookup",
    "check_positions": "flax_posenc.limits",
    "describe_limit": "flax_posenc.limits",
    "position_errors": "flax_posenc.overflow",
    "checkify_errors": "flax_posenc.overflow",
    "packed_positions": "flax_posenc.lookup",
    "sequential_positions": "flax_posenc.lookup",
    "padding_aware_positions": "flax_posenc.lookup",
    "RopeConfig": "flax_posenc.rope_config",
    "AlibiConfig": "flax_posenc.alibi_config",
    "rope_inverse_frequencies": "flax_posenc.rope_config",
    "alibi_slopes": "flax_posenc.alibi_config",
    "rotary_cos_sin": "flax_posenc.rope",
    "apply_rotary": "flax_posenc.rope",
    "apply_rope": "flax_posenc.rope",
    "apply_rope_qk": "flax_posenc.rope",
    "alibi_bias": "flax_posenc.alibi",
    "alibi_bias_from_positions": "flax_posenc.alibi",
    "relative_position_bucket": "flax_posenc.relative_bias",
    "relative_position_bias": "flax_posenc.relative_bias",
    "BucketConfig": "flax_posenc.relative_bias_config",
    "RelativeBiasSpec": "flax_posenc.relative_bias_config",
    "PositionSpec": "flax_posenc.spec",
    "InputSpec": "flax_posenc.spec",
    "deberta_relative_positions": "flax_posenc.deberta",
    "DebertaRelativeConfig": "flax_posenc.deberta_config",
    "save_orbax": "flax_posenc.orbax_io",
    "load_orbax": "flax_posenc.orbax_io",
    "resize_grid": "flax_posenc.grids",
    "sincos_2d_table": "flax_posenc.grid_sincos",
    "resize_patch_grid": "flax_posenc.grids",
    "GridConvention": "flax_posenc.grid_config",
    "GRID_CONVENTIONS": "flax_posenc.grid_config",
    "GridSpec": "flax_posenc.grid_config",
    "MRopeConfig": "flax_posenc.mrope_config",
    "mrope_positions": "flax_posenc.mrope_config",
    "mrope_cos_sin": "flax_posenc.mrope",
    "apply_mrope": "flax_posenc.mrope",
}
_SUBMODULES = {
    "nnx",
    "linen",
    "conversion",
    "analysis",
    "extend",
    "plots",
    "lookup",
    "sinusoidal",
    "sinusoid_math",
    "block",
    "spec",
    "rope",
    "alibi",
    "rope_config",
    "alibi_config",
    "overflow",
    "limits",
    "relative_bias",
    "relative_bias_config",
    "deberta",
    "deberta_config",
    "orbax_io",
    "progress",
    "grids",
    "grid_config",
    "grid_sincos",
    "mrope",
    "mrope_config",
}

#: submodules that live in the reporting wing (``flax_posenc.plots`` still imports: an alias module)
_WING = {"analysis": "flax_posenc.report.analysis", "plots": "flax_posenc.report.plots"}

__all__ = ["CheckpointError", "PositionLimitError", *_EXPORTS, *sorted(_SUBMODULES)]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(_WING.get(name, f"flax_posenc.{name}"))
    else:
        raise AttributeError(f"module 'flax_posenc' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)


if TYPE_CHECKING:  # let type checkers and IDEs see the real names
    from flax_posenc import conversion, linen, nnx  # noqa: F401
    from flax_posenc.alibi import alibi_bias, alibi_bias_from_positions  # noqa: F401
    from flax_posenc.alibi_config import AlibiConfig, alibi_slopes  # noqa: F401
    from flax_posenc.deberta import deberta_relative_positions  # noqa: F401
    from flax_posenc.deberta_config import DebertaRelativeConfig  # noqa: F401
    from flax_posenc.grid_config import GRID_CONVENTIONS, GridConvention, GridSpec  # noqa: F401
    from flax_posenc.grid_sincos import sincos_2d_table  # noqa: F401
    from flax_posenc.grids import resize_grid, resize_patch_grid  # noqa: F401
    from flax_posenc.limits import check_positions, describe_limit  # noqa: F401
    from flax_posenc.lookup import (  # noqa: F401
        lookup_positions,
        packed_positions,
        padding_aware_positions,
        sequential_positions,
    )
    from flax_posenc.mrope import apply_mrope, mrope_cos_sin  # noqa: F401
    from flax_posenc.mrope_config import MRopeConfig, mrope_positions  # noqa: F401
    from flax_posenc.orbax_io import load_orbax, save_orbax  # noqa: F401
    from flax_posenc.overflow import checkify_errors, position_errors  # noqa: F401
    from flax_posenc.relative_bias import relative_position_bias, relative_position_bucket  # noqa: F401
    from flax_posenc.relative_bias_config import BucketConfig, RelativeBiasSpec  # noqa: F401
    from flax_posenc.rope import apply_rope, apply_rope_qk, apply_rotary, rotary_cos_sin  # noqa: F401
    from flax_posenc.rope_config import RopeConfig, rope_inverse_frequencies  # noqa: F401
    from flax_posenc.sinusoid_math import sinusoidal_frequencies  # noqa: F401
    from flax_posenc.sinusoidal import sinusoidal_encoding, sinusoidal_table  # noqa: F401
    from flax_posenc.spec import InputSpec, PositionSpec  # noqa: F401
