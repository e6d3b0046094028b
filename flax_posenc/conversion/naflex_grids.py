"""Variable-resolution (NaFlex) learned grids: SigLIP 2's vision tower, one row per family (numpy only).

SigLIP 2 (``siglip2_vision_model``; inside ``siglip2`` and ``lfm2_vl`` as their ``vision_config``
tower) stores one square learned grid, ``embeddings.position_embedding.weight`` of
``num_patches`` rows (``config.num_patches``: 256, a 16 x 16 grid), and has **no** trained image
size: its forward resizes the grid to each image's own patch grid ``spatial_shapes[i] = (h, w)``
(transformers 5.24.0 ``Siglip2VisionEmbeddings.resize_positional_embeddings``: bilinear,
antialiased, ``align_corners=False``) and pads it to the sequence length, the **patch budget**
``max_num_patches`` the image processor pads every image to. An image of more patches than the
budget is refused by the model ("Resized positional embeddings exceed max_length"); the processor
scales every image to fit it first. So the limit of this mechanism is the budget, in patches per
image, and it is a setting of the image processor, not of ``config.json``:

- ``preprocessor_config.json`` beside ``config.json``: ``max_num_patches`` (SigLIP 2), or LFM2-VL's
  ``max(max_image_tokens * downsample_factor**2, (tile_size // encoder_patch_size)**2)`` (the second
  term only with ``do_image_splitting``), as ``Lfm2VlImageProcessor.__init__`` computes it;
- else the default of the checkpoint's image processor (:data:`PROCESSOR_BUDGETS`, by the
  top-level ``model_type``): ``Siglip2ImageProcessor`` 256, ``Lfm2VlImageProcessor`` 1024.

>>> import numpy as np
>>> t = NaflexGridTable(np.zeros((256, 8), np.float32), family="siglip2_vision", key="pos",
...                     patch_size=(16, 16), max_num_patches=256, budget_source="test", model_type="siglip2_vision_model")
>>> t.grid, t.describe()
((16, 16), 'a 16 x 16 learned grid resized to each image (bilinear, antialiased), at most 256 patches per image (16 px patches; test)')
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.readers import fail, read_float, tower_keys
from flax_posenc.conversion.safety import checkpoint_boundary, contained, load_json
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.conversion.table import GridBacked
from flax_posenc.errors import CheckpointError, PositionLimitError
from flax_posenc.grid_config import MAX_IMAGE_SIDE, MAX_PATCHES, image_grid, positive_pair
from flax_posenc.naflex_config import budget_phrase, naflex_image_size, naflex_spatial_shape

__all__ = [
    "NAFLEX_GRID_FAMILIES",
    "PROCESSOR_BUDGETS",
    "NaflexGridFamily",
    "NaflexGridSource",
    "NaflexGridTable",
    "load_naflex_grid",
    "read_naflex_grid",
]

PREPROCESSOR_NAME = "preprocessor_config.json"


@dataclasses.dataclass(frozen=True)
class NaflexGridFamily:
    """One NaFlex vision family's learned grid, as data.

    Attributes:
      name: our name; model_types: ``config.json`` values that mean it.
      key_suffix: the ``(num_patches, dim)`` tensor's name without the checkpoint's prefix.
      patches_field: the config field holding the grid's row count (a square number).
      convention: the :data:`~flax_posenc.naflex_config.NAFLEX_CONVENTIONS` row its forward follows.
      tower: the tower it serves in a composite model.
    """

    name: str
    model_types: tuple[str, ...]
    key_suffix: str
    patches_field: str = "num_patches"
    convention: str = "siglip2"
    tower: str = "vision"


NAFLEX_GRID_FAMILIES: Mapping[str, NaflexGridFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            # SigLIP 2's vision tower (alone, or the vision_config of siglip2 and lfm2_vl)
            NaflexGridFamily("siglip2_vision", ("siglip2_vision_model",), "embeddings.position_embedding.weight"),
        )
    }
)

#: top-level ``model_type`` -> (its image processor, that processor's default patch budget).
PROCESSOR_BUDGETS: Mapping[str, tuple[str, int]] = MappingProxyType(
    {
        "siglip2": ("Siglip2ImageProcessor", 256),
        "siglip2_vision_model": ("Siglip2ImageProcessor", 256),
        # max(max_image_tokens 256 * downsample_factor 2 ** 2, (tile_size 512 // encoder_patch_size 16) ** 2)
        "lfm2_vl": ("Lfm2VlImageProcessor", 1024),
    }
)


@dataclasses.dataclass(frozen=True)
class NaflexGridTable:
    """A NaFlex learned grid as stored in a checkpoint, with its patch budget.

    Attributes:
      weights: ``(g * g, dim)``: the square grid row-major.
      family, key: the :data:`NAFLEX_GRID_FAMILIES` row and the tensor's name.
      patch_size: ``(height, width)`` px of a patch.
      max_num_patches: the patch budget (patches per image, the padded sequence length).
      budget_source: where the budget was read (``preprocessor_config.json`` or the processor's default).
      model_type: the checkpoint's (tower's) ``model_type``; source: where it came from.
      convention: how the model resizes it (:data:`~flax_posenc.naflex_config.NAFLEX_CONVENTIONS`).
    """

    weights: np.ndarray
    family: str
    key: str
    patch_size: tuple[int, int]
    max_num_patches: int
    budget_source: str
    model_type: str
    source: str = ""
    convention: str = "siglip2"

    def __post_init__(self):
        where = f"{self.source}:{self.key}" if self.source else self.key
        shape = getattr(self.weights, "shape", ())
        if len(shape) != 2:
            raise fail(where, "a 2-D grid table (g * g, dim)", f"shape {tuple(shape)}")
        side = math.isqrt(int(shape[0]))
        if side == 0 or side * side != shape[0]:
            raise fail(where, "a square grid of patches (g * g rows)", f"{shape[0]} rows")

    @property
    def grid(self) -> tuple[int, int]:
        """``(g, g)``: the learned grid's sides."""
        side = math.isqrt(int(self.weights.shape[0]))
        return side, side

    @property
    def rows(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dim(self) -> int:
        return int(self.weights.shape[1])

    @property
    def patches(self) -> np.ndarray:
        """``(g, g, dim)``: the grid."""
        return self.weights.reshape(*self.grid, self.dim)

    def describe(self) -> str:
        """What the grid holds and its limit, in one phrase."""
        g, _ = self.grid
        ph, pw = self.patch_size
        patch = f"{ph}" if ph == pw else f"{ph} x {pw}"
        how = "bilinear, antialiased" if self.convention == "siglip2" else self.convention
        return (
            f"a {g} x {g} learned grid resized to each image ({how}), at most {self.max_num_patches} patches "
            f"per image ({patch} px patches; {self.budget_source})"
        )


def _budget_from_preprocessor(path: Path) -> int | None:
    """The patch budget a ``preprocessor_config.json`` sets (``None``: it names none)."""
    cfg = load_json(path, what="a JSON image processor config")
    if not isinstance(cfg, dict):
        raise fail(path, "a JSON object as image processor config", type(cfg).__name__)

    def field(name: str, default: int | None = None) -> int | None:
        value = cfg.get(name, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_PATCHES:
            raise fail(f"{path}:{name}", f"{name} as a positive integer up to {MAX_PATCHES}", repr(value)[:80])
        return value

    if "max_num_patches" in cfg:
        return field("max_num_patches")
    if "max_image_tokens" in cfg:  # LFM2-VL's image processor: its __init__'s arithmetic
        tokens, factor = field("max_image_tokens"), field("downsample_factor", 2)
        tile, patch = field("tile_size", 512), field("encoder_patch_size", 16)
        assert tokens is not None and factor is not None and tile is not None and patch is not None
        splitting = cfg.get("do_image_splitting", True)
        return max(tokens * factor**2, (tile // patch) ** 2 if splitting else 0)
    return None


def _patch_budget(config_path: Path | None, top_type: str, where: str) -> tuple[int, str]:
    """``(budget, where it was read)``: ``preprocessor_config.json`` beside ``config.json``, else the default."""
    if config_path is not None:
        path = Path(config_path).parent / PREPROCESSOR_NAME
        if os.path.lexists(path):
            contained(checkpoint_boundary(path.parent), path, what=PREPROCESSOR_NAME)
            budget = _budget_from_preprocessor(path)
            if budget is not None:
                return budget, f"{PREPROCESSOR_NAME}"
    if top_type not in PROCESSOR_BUDGETS:
        raise fail(where, f"a model type whose image processor is known ({', '.join(PROCESSOR_BUDGETS)})", top_type)
    processor, budget = PROCESSOR_BUDGETS[top_type]
    return budget, f"the {processor} default"


def _top_model_type(config: Mapping[str, Any], config_path: Path | None, section: str | None) -> str:
    if section is None or config_path is None:
        return str(config.get("model_type"))
    try:
        top = load_json(config_path, what="a JSON model config", allow_constants=True)
    except CheckpointError:
        return str(config.get("model_type"))
    return str(top.get("model_type")) if isinstance(top, dict) else str(config.get("model_type"))


def load_naflex_grid(
    source: str | os.PathLike,
    row: NaflexGridFamily | str = "siglip2_vision",
    *,
    config: Mapping[str, Any] | None = None,
    config_path: Path | None = None,
    section: str | None = None,
) -> NaflexGridTable:
    """The NaFlex learned grid of a checkpoint (only that tensor is read) and its patch budget.

    Args:
      source: a checkpoint directory, weights file beside a ``config.json``, or Hub id of a
        ``siglip2_vision_model`` (or a ``siglip2`` / ``lfm2_vl`` with ``section="vision_config"``).
      row: the :data:`NAFLEX_GRID_FAMILIES` row (or its name).
      config, config_path, section: the (sub-)config to read and where it came from (the reader
        passes them; default: the checkpoint's own ``config.json``).

    Returns:
      :class:`NaflexGridTable`.

    Raises:
      CheckpointError: a ``patch_size`` or ``num_patches`` that is not a positive integer, a
        ``num_patches`` that is not a square, a tensor missing or with other rows, a budget in
        ``preprocessor_config.json`` that is not a positive integer (one line naming the field).
    """
    fam = NAFLEX_GRID_FAMILIES[row] if isinstance(row, str) else row
    ckpt = open_checkpoint(source)
    if config is None:
        config, config_path = ckpt.config, ckpt.config_path
    where_config = f"{config_path or ckpt.weights_path}:{section + '.' if section else ''}"
    patch_size = positive_pair(config.get("patch_size"), "patch_size", f"{where_config}patch_size", MAX_IMAGE_SIDE)
    count = config.get(fam.patches_field)
    side = math.isqrt(count) if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
    if side == 0 or side * side != count or count > MAX_PATCHES:
        raise fail(
            f"{where_config}{fam.patches_field}",
            f"{fam.patches_field} a square number of patches up to {MAX_PATCHES}",
            repr(count)[:80],
        )
    top = _top_model_type(config, config_path, section)
    budget, budget_source = _patch_budget(config_path, top, f"{where_config}model_type")
    keys = sorted(k for k in ckpt.reader.keys() if k == fam.key_suffix or k.endswith("." + fam.key_suffix))
    keys = tower_keys(keys, section)
    if len(keys) != 1:
        found = "none" if not keys else ", ".join(keys[:4])
        raise fail(ckpt.weights_path, f"one {fam.name} position grid *{fam.key_suffix}", found)
    weights = read_float(ckpt.reader, keys[0], ndim=2, what=f"{fam.name} position grid")
    if weights.shape[0] != count:
        raise fail(
            f"{ckpt.weights_path}:{keys[0]}",
            f"{count} rows ({fam.patches_field} {count} = {side} x {side})",
            f"{weights.shape[0]} rows",
        )
    return NaflexGridTable(
        weights,
        family=fam.name,
        key=keys[0],
        patch_size=patch_size,
        max_num_patches=budget,
        budget_source=budget_source,
        model_type=str(config.get("model_type")),
        source=os.fspath(source),
        convention=fam.convention,
    )


@dataclasses.dataclass(frozen=True)
class NaflexGridSource(GridBacked):
    """A NaFlex grid as a :class:`~flax_posenc.conversion.SourceRecord` (a ``naflex_grid`` mechanism).

    The budget limits the patches of one image, not the text: ``limit`` is ``None`` (a text
    tower's token limit stays the record's); :attr:`patch_budget` is the limit and
    :meth:`check_image_size` the question to ask.
    """

    table: NaflexGridTable

    scheme = "naflex_grid"
    grid_name = "NaFlex position grid"
    limits = "each image's patches"

    @property
    def patch_budget(self) -> int:
        """``max_num_patches``: patches per image."""
        return self.table.max_num_patches

    def check_image_size(self, image_size: Any, *, max_num_patches: int | None = None) -> tuple[bool, str]:
        """``(True, line)`` when an image of ``image_size`` px (given as is) fits the budget, else ``(False, line)``.

        Args:
          image_size: ``(height, width)`` px or one int, a whole number of patches a side.
          max_num_patches: another budget (the processor's ``max_num_patches=``); default: the record's.

        Raises:
          CheckpointError: a size that is not a whole number of patches (one line).
          ValueError: a budget that is not a positive integer.
        """
        budget = self.patch_budget if max_num_patches is None else max_num_patches
        h, w = image_grid(image_size, self.table.patch_size, where="--image-size")
        px = (h * self.table.patch_size[0], w * self.table.patch_size[1])
        size = f"{px[0]} x {px[1]} px"
        try:
            naflex_spatial_shape(px, self.table.patch_size, budget)
        except PositionLimitError:
            th, tw = naflex_image_size(px[0], px[1], self.table.patch_size[0], budget)
            return False, (
                f"{self.name}: {budget_phrase(budget)}; a {size} image gives {h} x {w} = {h * w} patches: the model "
                f"refuses it; the image processor resizes it to {th} x {tw} px "
                f"({th // self.table.patch_size[0]} x {tw // self.table.patch_size[1]} patches) first"
            )
        return True, (
            f"{self.name}: {budget_phrase(budget)}; a {size} image fits: {h} x {w} = {h * w} patches, "
            f"the {self.table.grid[0]} x {self.table.grid[1]} grid resized to {h} x {w} (fp.naflex_positions)"
        )

    def grid_fields(self) -> dict[str, Any]:
        t = self.table
        return {
            "patch_size": list(t.patch_size),
            "max_num_patches": t.max_num_patches,
            "budget_source": t.budget_source,
            "convention": t.convention,
        }


def read_naflex_grid(
    row: NaflexGridFamily, config: Mapping[str, Any], source: str | os.PathLike, config_path: Any, section: str | None
) -> list[NaflexGridSource]:
    """The reader of the ``naflex_grid`` kind: one record for ``row`` (see :func:`load_naflex_grid`)."""
    path = Path(config_path) if config_path is not None else None
    return [NaflexGridSource(load_naflex_grid(source, row, config=config, config_path=path, section=section))]
