"""Hugging Face checkpoints <-> numpy: position tables and input blocks, read lazily.

numpy only: importing or using this package never imports jax, torch or transformers (torch is
imported only to read a ``.bin`` checkpoint; a ``sinusoidal:`` source is computed by the numpy
:mod:`flax_posenc.sinusoid_math`).
orbax (and with it jax) is imported only to restore an orbax directory's arrays
(:func:`~flax_posenc.conversion.orbax_file.read_orbax_params`).

- :func:`inspect_source` -- any SOURCE as one :class:`SourceRecord` (``limit``,
  ``describe_limit()``, ``check_length(n)``, ``to_dict()``, ``str``): learned tables, RoPE/ALiBi
  configs and T5/MPNet relative biases alike; :func:`which_family` -- the family of a
  ``model_type`` in every registry.
- :data:`~flax_posenc.conversion.mechanisms.MECHANISMS` -- the one table of mechanism kinds
  (learned, sinusoidal, rope, nope, alibi, mrope, relative_bias, deberta_relative, grid, none):
  each kind's registries, reader, records and limit unit; the model registry follows from it.
- :func:`load_position_table` -- the learned position table of a checkpoint
  (:class:`PositionTable`: ``weights``, ``family``, ``key``, ``offset``, ``num_positions``).
- :func:`load_input_block` -- every weight of the family's embedding block
  (:class:`InputBlockWeights`), enough to reproduce Hugging Face's embedding output.
- :func:`load_grid_table` -- the learned 2-D position grid of a vision checkpoint
  (:class:`GridTable`: ``weights``, ``grid``, ``prefix_tokens``, ``patch_size``, ``image_size``).
- :func:`load_bbox_tables` -- the 2-D bounding-box tables of a LayoutLM, LayoutLMv3 or LiLT
  checkpoint (:class:`BboxTableSource`: ``spec``, ``weights``, ``keys``; limit in coordinates).
- :func:`load_relative_bias` -- a T5/mT5/UMT5/LongT5/MPNet learned relative position bias
  table and its buckets (:class:`RelativeBiasTable`).
- :func:`export_position_table` -- write a new table into a copy of the checkpoint.
- :func:`rope_for_layer` -- the :class:`~flax_posenc.RopeConfig` one layer uses (``None``: NoPE).
- :data:`FAMILIES` -- the known families, one data row each; :func:`detect_family`.
- :func:`open_checkpoint` -- any tensor of a checkpoint and its ``config.json``
  (:class:`CheckpointReader`: ``config``, ``names``, ``info(name)``, ``tensor(name)``).
- :class:`AudioTableSource` -- Whisper's encoder table, its limit in seconds of audio
  (:data:`AUDIO_TABLE_FAMILIES`); M-RoPE configs: :func:`load_mrope_config`.
- :func:`load_conv_positions` -- the convolutional position embedding of a wav2vec2-style
  speech encoder (:class:`ConvPositions`: spec, folded kernel, bias; :class:`ConvPositionSource`:
  no limit, its receptive field in frames and seconds).

A SOURCE is a checkpoint directory, a ``.safetensors``/``.bin`` file, a sharded index, a Hub
model id (local cache first, offline-safe), ``sinusoidal:LENGTH:DIM`` or a ``.gguf`` file
(llama.cpp's format, with the optional ``gguf`` package: :mod:`~flax_posenc.conversion.gguf_source`).

>>> from flax_posenc.conversion import load_position_table
>>> t = load_position_table("sinusoidal:8:4")
>>> t.num_positions
8
"""

from __future__ import annotations

from flax_posenc.conversion.audio_tables import AUDIO_TABLE_FAMILIES, AudioTableSource
from flax_posenc.conversion.bbox_tables import BBOX_FAMILIES, BboxTableSource, load_bbox_tables
from flax_posenc.conversion.checkpoint import CheckpointReader, open_checkpoint
from flax_posenc.conversion.conv_positions import (
    CONV_POSITION_FAMILIES,
    ConvPositions,
    ConvPositionSource,
    load_conv_positions,
)
from flax_posenc.conversion.export import export_position_table
from flax_posenc.conversion.families import FAMILIES, Detected, Family, detect_family
from flax_posenc.conversion.grid_tables import GRID_FAMILIES, GridSource, GridTable, load_grid_table
from flax_posenc.conversion.layer_rope import rope_for_layer
from flax_posenc.conversion.load import load_input_block, load_position_table
from flax_posenc.conversion.mechanisms import MECHANISMS, MechanismKind
from flax_posenc.conversion.relative_bias import RelativeBiasTable, load_relative_bias
from flax_posenc.conversion.source_record import (
    FamilyMatch,
    LearnedTableSource,
    SourceRecord,
    inspect_source,
    load_mrope_config,
    which_family,
)
from flax_posenc.conversion.table import InputBlockWeights, PositionTable
from flax_posenc.errors import CheckpointError

__all__ = [
    "AUDIO_TABLE_FAMILIES",
    "AudioTableSource",
    "CONV_POSITION_FAMILIES",
    "ConvPositionSource",
    "ConvPositions",
    "BBOX_FAMILIES",
    "BboxTableSource",
    "FAMILIES",
    "GRID_FAMILIES",
    "CheckpointError",
    "CheckpointReader",
    "Detected",
    "Family",
    "FamilyMatch",
    "GridSource",
    "GridTable",
    "InputBlockWeights",
    "LearnedTableSource",
    "MECHANISMS",
    "MechanismKind",
    "PositionTable",
    "RelativeBiasTable",
    "SourceRecord",
    "detect_family",
    "export_position_table",
    "inspect_source",
    "load_conv_positions",
    "load_bbox_tables",
    "load_mrope_config",
    "load_grid_table",
    "load_input_block",
    "load_position_table",
    "load_relative_bias",
    "open_checkpoint",
    "rope_for_layer",
    "which_family",
]

# window relative position bias (issue 35): Swin, SwinV2, Swin2SR, BEiT, Data2Vec-Vision
from flax_posenc.conversion.window_bias import (  # noqa: E402
    WINDOW_BIAS_FAMILIES,
    WindowBiasLayer,
    WindowBiasSource,
    load_window_bias,
)

__all__ += ["WINDOW_BIAS_FAMILIES", "WindowBiasLayer", "WindowBiasSource", "load_window_bias"]

# variable-resolution (NaFlex) grids (issue 35 item 3): SigLIP 2, LFM2-VL
from flax_posenc.conversion.naflex_grids import (  # noqa: E402
    NAFLEX_GRID_FAMILIES,
    NaflexGridSource,
    NaflexGridTable,
    load_naflex_grid,
)

__all__ += ["NAFLEX_GRID_FAMILIES", "NaflexGridSource", "NaflexGridTable", "load_naflex_grid"]
