"""flax-posenc: positional encodings for JAX and Flax.

The functional core is re-exported here; modules live in :mod:`flax_posenc.nnx` and
:mod:`flax_posenc.linen`, checkpoint interop in :mod:`flax_posenc.conversion`.

Attributes are imported lazily (PEP 562), so ``import flax_posenc.conversion`` does not pull
in jax: conversion is numpy-only and usable from any framework.

``__all__`` is the public surface: the functional core, the errors and the submodules users reach
as attributes (``nnx``, ``linen``, ``conversion``, ``block``, ``analysis``, ``plots``). Every other
submodule (``flax_posenc.rope``, ``flax_posenc.lookup``, ...) is imported by its path; reached as an
attribute it is imported on first use, as after ``import flax_posenc.rope``, but it is not exported.

>>> import flax_posenc as fp
>>> fp.sinusoidal_table(4, 4).shape
(4, 4)
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from flax_posenc._version import __version__ as __version__
from flax_posenc.errors import CheckpointError, PositionLimitError


def _public_names() -> tuple[dict[str, str], dict[str, str]]:
    """``(name -> module defining it, submodule name -> module path)``, read from the ``if
    TYPE_CHECKING:`` block at the end of this file: the one list of public names, which type
    checkers and IDEs read too. A name imported from ``flax_posenc`` or ``flax_posenc.report``
    is a submodule (``fp.nnx``, ``fp.plots``)."""
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    names: dict[str, str] = {}
    submodules: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names:
            if node.module in ("flax_posenc", "flax_posenc.report"):
                submodules[alias.name] = f"{node.module}.{alias.name}"
            else:
                names[alias.name] = node.module
    return names, submodules


_EXPORTS, _SUBMODULES = _public_names()

__all__ = ["CheckpointError", "PositionLimitError", *_EXPORTS, *sorted(_SUBMODULES)]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    elif not name.startswith("_") and importlib.util.find_spec(f"flax_posenc.{name}") is not None:
        value = importlib.import_module(f"flax_posenc.{name}")  # any other submodule: reached, not exported
    else:
        raise AttributeError(f"module 'flax_posenc' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)


if TYPE_CHECKING:  # the one list of public names (:func:`_public_names` reads it); type checkers see them
    # the submodules users reach as attributes: the shells, checkpoints, the input block's functional
    # core (``fp.block.transformer_input``) and the reporting wing; every other module is imported by
    # its path (``import flax_posenc.rope``), not exported
    from flax_posenc import block, conversion, linen, nnx  # noqa: F401
    from flax_posenc.alibi import alibi_bias, alibi_bias_from_positions  # noqa: F401
    from flax_posenc.alibi_config import AlibiConfig, alibi_slopes  # noqa: F401
    from flax_posenc.bbox import bbox_embedding  # noqa: F401
    from flax_posenc.bbox_config import BboxSpec  # noqa: F401
    from flax_posenc.conv_position import add_conv_positions, conv_positions  # noqa: F401
    from flax_posenc.conv_position_config import ConvPositionSpec, fold_weight_norm  # noqa: F401
    from flax_posenc.deberta import deberta_relative_positions  # noqa: F401
    from flax_posenc.deberta_config import DebertaRelativeConfig  # noqa: F401
    from flax_posenc.decomposed_rel_pos import decomposed_rel_pos_bias, decomposed_rel_pos_table  # noqa: F401
    from flax_posenc.detr import detr_feature_mask, detr_learned_embedding, detr_sine_embedding  # noqa: F401
    from flax_posenc.detr_config import DetrSineConfig  # noqa: F401
    from flax_posenc.fourier_encoding import fourier_positions  # noqa: F401
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
    from flax_posenc.mrope import apply_mrope, mrope_cos_sin, mrope_decode_positions  # noqa: F401
    from flax_posenc.mrope_config import MRopeConfig, mrope_positions  # noqa: F401
    from flax_posenc.naflex import naflex_positions  # noqa: F401
    from flax_posenc.naflex_config import NAFLEX_CONVENTIONS, naflex_image_size  # noqa: F401
    from flax_posenc.orbax_io import load_orbax, save_orbax  # noqa: F401
    from flax_posenc.overflow import checkify_errors, position_errors  # noqa: F401
    from flax_posenc.portable import PositionReport, call_exported, checked, export  # noqa: F401
    from flax_posenc.relative_bias import relative_position_bias, relative_position_bucket  # noqa: F401
    from flax_posenc.relative_bias_config import BucketConfig, RelativeBiasSpec  # noqa: F401
    from flax_posenc.report import analysis, plots  # noqa: F401
    from flax_posenc.rope import apply_rope, apply_rope_qk, apply_rotary, rotary_cos_sin  # noqa: F401
    from flax_posenc.rope_config import RopeConfig, rope_inverse_frequencies  # noqa: F401
    from flax_posenc.rotate import rotate_keys  # noqa: F401
    from flax_posenc.sinusoid_math import sinusoidal_frequencies  # noqa: F401
    from flax_posenc.sinusoidal import sinusoidal_encoding, sinusoidal_table  # noqa: F401
    from flax_posenc.spec import InputSpec, PositionSpec  # noqa: F401
    from flax_posenc.temperature import attention_temperature  # noqa: F401
    from flax_posenc.vision_rope import (  # noqa: F401
        apply_vision_rope,
        apply_vision_rope_qk,
        vision_frame_sinusoid,
        vision_grid_positions,
        vision_rope_cos_sin,
    )
    from flax_posenc.vision_rope_config import (  # noqa: F401
        VisionRopeConfig,
        vision_patch_positions,
        vision_window_index,
    )

    # window relative position bias (issue 35): Swin, SwinV2, BEiT
    from flax_posenc.window_bias_config import WINDOW_RESIZES, WindowBiasSpec  # noqa: F401
    from flax_posenc.windows import (  # noqa: F401
        continuous_window_bias,
        continuous_window_table,
        resize_window_table,
        window_bias,
    )
