"""The one table of position mechanisms: every kind a checkpoint's positions can be, as data.

A model is a set of position mechanisms. :data:`MECHANISMS` has one :class:`MechanismKind` row
per kind, in the order a record lists them; each row carries

- ``name``: the one vocabulary (a record's ``mechanisms[i].kind``, ``inspect --json``'s
  ``"kind"``, ``flax-posenc families``, the docs tables, the coverage page);
- ``registries``: the data rows it reads (each with ``name`` and ``model_types``; a row may name
  its ``tower``: ``"text"``, ``"vision"``, ``"audio"``) and the model types they serve;
- ``read``: ``(row, ReadContext) -> records``, the reader of one row of a checkpoint;
- ``schemes`` and ``record_types``: what its records are (a record's ``.scheme`` names its kind);
- ``limit_unit``: what its limit counts; ``details``: its part of ``Mechanism.to_dict()``.

Everything else follows from the table: :data:`~flax_posenc.conversion.models.MODEL_MECHANISMS`,
:data:`~flax_posenc.conversion.models.MECHANISM_KINDS`, the dispatch of
:func:`~flax_posenc.conversion.models.read_model`, :func:`~flax_posenc.conversion.which_family`,
``flax-posenc families``, the generated docs table of mechanisms, the coverage page and the
conformance cases. Adding a mechanism is one module (its row type, registry, record and reader)
and one row here (see CONTRIBUTING.md, "Adding a mechanism");
:meth:`MechanismTable.register` adds a row at run time (a plug-in, or a test).

A row that two registries of one kind both name, or a model type claimed by two rows of one kind
for the same tower and tensor, fails at import with one line naming both.

>>> MECHANISMS["learned"].limit_unit
'tokens'
>>> [k for k in MECHANISMS][:3]
['learned', 'sinusoidal', 'rope']
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.audio_tables import (
    AUDIO_TABLE_FAMILIES,
    AudioTableFamily,
    AudioTableSource,
    read_audio_table,
)
from flax_posenc.conversion.bbox_tables import BBOX_FAMILIES, BboxTableSource, read_bbox_tables
from flax_posenc.conversion.computed_sinusoids import (
    COMPUTED_SINUSOID_FAMILIES,
    ComputedSinusoid,
    computed_sinusoid_from_dict,
)
from flax_posenc.conversion.conv_positions import CONV_POSITION_FAMILIES, ConvPositionSource, read_conv_positions
from flax_posenc.conversion.deberta_relative import DEBERTA_FAMILIES, DebertaRelative, deberta_relative_from_dict
from flax_posenc.conversion.detr_positions import DETR_POSITION_FAMILIES, DetrPositions, read_detr_positions
from flax_posenc.conversion.families import FAMILIES, model_type_spellings
from flax_posenc.conversion.grid_tables import GRID_FAMILIES, GridSource, load_grid_table
from flax_posenc.conversion.learned_source import LearnedTableSource
from flax_posenc.conversion.load import load_position_table
from flax_posenc.conversion.no_position import NO_POSITION_FAMILIES, NoPositionEncoding, no_position_encoding
from flax_posenc.conversion.patch_tables import (
    PATCH_TABLE_FAMILIES,
    PatchTableFamily,
    PatchTableSource,
    read_patch_table,
)
from flax_posenc.conversion.position_tables import TABLE_FAMILIES, has_table, read_position_table, table_present
from flax_posenc.conversion.relative_bias import RELATIVE_BIAS_FAMILIES, RelativeBiasSource, relative_bias_source
from flax_posenc.conversion.relative_config import (
    RELATIVE_FAMILIES,
    NoPositionLayers,
    RelativeConfig,
    config_path_of,
    relative_configs_from_dict,
)
from flax_posenc.conversion.vision_rope import VISION_ROPE_FAMILIES, VisionRopeSource, read_vision_rope

__all__ = ["MECHANISMS", "MechanismKind", "MechanismTable", "ReadContext"]


@dataclasses.dataclass(frozen=True)
class ReadContext:
    """What a reader gets besides its row: the SOURCE as given (``source``, ``text``), its parsed
    ``config.json`` (``config``) and that file's path (``config_path``). In a composite model
    (LLaVA, PaliGemma, ...) ``config`` is one tower's sub-config and ``section`` its field
    (``"text_config"``, ``"vision_config"``, ``"audio_config"``); ``None`` for a whole config."""

    source: str | os.PathLike
    config: Mapping[str, Any]
    config_path: Path
    section: str | None = None

    @property
    def text(self) -> str:
        return os.fspath(self.source)


#: ``(registry row, context) -> records``: what one row reads of a checkpoint (``[]``: absent).
Reader = Callable[[Any, ReadContext], Sequence[Any]]


def record_details(record: Any) -> dict[str, Any]:
    """A record's own report, less what the mechanism repeats (``source``, ``config``, ``limit``)."""
    return {k: v for k, v in record.to_dict().items() if k not in ("source", "config", "limit")}


def table_details(record: Any) -> dict[str, Any]:
    """A table-backed record's report: its table's key, family, rows, dim, offset and unit
    (and an audio table's seconds); a record without a table: :func:`record_details`."""
    t = getattr(record, "table", None)
    if t is None:
        return record_details(record)
    unit = getattr(record, "unit", "tokens")
    out = {"key": t.key, "family": t.family, "rows": t.rows, "dim": t.dim, "offset": t.offset, "unit": unit}
    if unit == "seconds":
        out.update(
            seconds=record.seconds_limit,
            positions_per_second=record.positions_per_second,
            sinusoid_error=record.sinusoid_error,
        )
    return out


def grid_details(record: Any) -> dict[str, Any]:
    """A grid's report, less what the mechanism repeats."""
    return {k: v for k, v in record.to_dict().items() if k not in ("source", "limit", "scheme")}


@dataclasses.dataclass(frozen=True)
class MechanismKind:
    """One kind of position mechanism: a row of :data:`MECHANISMS`.

    Attributes:
      name: the kind (``"learned"``, ``"rope"``, ...): every record's ``mechanisms[i].kind``.
      summary: one line saying what it is (``flax-posenc families``, the docs).
      limit_unit: what its limit counts (``"tokens"``, ``"seconds"``, ``"image size"``, or
        ``"none"``: nothing limits a length).
      schemes: the ``.scheme`` values its records carry (a record's kind is looked up by them).
      record_types: the record classes it yields.
      registries: ``(dotted name, rows)`` pairs: the data rows it reads, each with ``name`` and
        ``model_types`` (``()``: another kind's reader yields it, as RoPE's reader yields ``nope``).
      read: ``(row, ReadContext) -> records`` (``None`` with no registries).
      tower: the tower its rows serve unless a row names its own ``tower``.
      details: ``record -> dict``: its part of ``Mechanism.to_dict()``.
      figures: which figures ``flax-posenc plot`` draws of it (:mod:`flax_posenc.report.plots`):
        ``"table"`` (a record with a ``table``), ``"grid"``, ``"relative"``, or ``None``: none.
    """

    name: str
    summary: str
    limit_unit: str
    schemes: tuple[str, ...]
    record_types: tuple[type, ...]
    registries: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    read: Reader | None = None
    tower: str = "text"
    details: Callable[[Any], dict[str, Any]] = record_details
    figures: str | None = None

    @property
    def rows(self) -> Mapping[str, Any]:
        """Every row of its registries by name, in registry order."""
        return MappingProxyType({name: row for _, rows in self.registries for name, row in rows.items()})

    def tower_of(self, row: Any) -> str:
        """The tower ``row`` serves: its own ``tower``, else the kind's."""
        return getattr(row, "tower", None) or self.tower


def _where(row: Any) -> str:
    """What sets a row apart among the rows of one kind claiming one model type: tower and tensor."""
    return f"{getattr(row, 'tower', '')}:{getattr(row, 'key_suffix', '')}"


def _check(kinds: Sequence[MechanismKind]) -> None:
    """Raise ValueError (one line naming both) on a duplicate kind or scheme, a row name two
    registries of one kind both hold, or a model type two rows of one kind (or registry) claim
    for the same tower and tensor."""
    seen_kinds: dict[str, str] = {}
    seen_schemes: dict[str, str] = {}
    for kind in kinds:
        if kind.name in seen_kinds:
            raise ValueError(f"MECHANISMS: expected one row per kind, found two rows named {kind.name!r}")
        seen_kinds[kind.name] = kind.name
        if (kind.read is None) != (not kind.registries):
            raise ValueError(f"MECHANISMS[{kind.name!r}]: expected a reader exactly when it has registries")
        for scheme in kind.schemes:
            if scheme in seen_schemes:
                raise ValueError(
                    f"MECHANISMS: expected each scheme in one kind, found {scheme!r} in both "
                    f"{seen_schemes[scheme]!r} and {kind.name!r}"
                )
            seen_schemes[scheme] = kind.name
        names: dict[str, str] = {}
        for registry, rows in kind.registries:
            for name in rows:
                if name in names:
                    raise ValueError(
                        f"MECHANISMS[{kind.name!r}]: row {name!r} is claimed by both {names[name]} and {registry}"
                    )
                names[name] = registry
    groups: dict[str, list[tuple[str, Any]]] = {}
    for kind in kinds:
        for registry, rows in kind.registries:
            groups.setdefault(f"kind {kind.name!r}", []).extend((registry, r) for r in rows.values())
            groups.setdefault(registry.split(" ")[0], []).extend((registry, r) for r in rows.values())
    for group, members in groups.items():
        claimed: dict[tuple[str, str], tuple[str, Any]] = {}
        for registry, row in members:
            for model_type in row.model_types:
                slot = (model_type.replace("-", "_"), _where(row))
                if slot in claimed and claimed[slot][1] is not row:
                    first_registry, first = claimed[slot]
                    raise ValueError(
                        f"MECHANISMS ({group}): model type {model_type!r} is claimed by two rows, "
                        f"{first.name!r} ({first_registry}) and {row.name!r} ({registry})"
                    )
                claimed[slot] = (registry, row)


class MechanismTable(Mapping[str, MechanismKind]):
    """:data:`MECHANISMS`: kind name -> :class:`MechanismKind`, in reading order, checked on every change.

    What is derived from it (:meth:`model_mechanisms`, :meth:`plan`, :meth:`kind_of`) follows a
    row added by :meth:`register` at once.
    """

    def __init__(self, kinds: Sequence[MechanismKind]):
        _check(kinds)
        self._kinds: dict[str, MechanismKind] = {k.name: k for k in kinds}
        self._derived: dict[str, Any] = {}

    def __getitem__(self, name: str) -> MechanismKind:
        return self._kinds[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def __repr__(self) -> str:
        return f"MechanismTable({list(self._kinds)})"

    def register(self, kind: MechanismKind, *, before: str | None = None) -> None:
        """Add ``kind`` (last, or before the kind named ``before``).

        Raises:
          ValueError: the table with it is not consistent (one line naming both rows).
        """
        kinds = list(self._kinds.values())
        at = len(kinds) if before is None else list(self._kinds).index(before)
        kinds.insert(at, kind)
        _check(kinds)
        self._kinds = {k.name: k for k in kinds}
        self._derived.clear()

    def unregister(self, name: str) -> None:
        """Remove the kind named ``name`` (KeyError when there is none)."""
        del self._kinds[name]
        self._derived.clear()

    @contextlib.contextmanager
    def registered(self, kind: MechanismKind, *, before: str | None = None) -> Iterator[MechanismKind]:
        """``with MECHANISMS.registered(kind):`` the table holds ``kind``, and no longer after."""
        self.register(kind, before=before)
        try:
            yield kind
        finally:
            self.unregister(kind.name)

    def _cached(self, key: str, build: Callable[[], Any]) -> Any:
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    def model_mechanisms(self) -> Mapping[str, tuple[tuple[str, str], ...]]:
        """``model_type -> ((kind, row name), ...)``, model types sorted, rows in reading order."""

        def build() -> Mapping[str, tuple[tuple[str, str], ...]]:
            out: dict[str, list[tuple[str, str]]] = {}
            for kind, row in self._all_rows():
                for model_type in row.model_types:
                    out.setdefault(model_type, []).append((kind.name, row.name))
            return MappingProxyType({k: tuple(v) for k, v in sorted(out.items())})

        return self._cached("model_mechanisms", build)

    def _all_rows(self) -> Iterator[tuple[MechanismKind, Any]]:
        for kind in self._kinds.values():
            for _, rows in kind.registries:
                for row in rows.values():
                    yield kind, row

    def plan(self, model_type: object) -> tuple[tuple[MechanismKind, Any], ...] | None:
        """The ``(kind, row)`` pairs read for ``model_type`` (any ``-``/``_`` spelling), else ``None``."""
        table = self.model_mechanisms()
        for spelling in model_type_spellings(model_type):
            if spelling in table:
                return tuple((self._kinds[k], self._kinds[k].rows[name]) for k, name in table[spelling])
        return None

    def kind_of(self, record: Any) -> str:
        """The kind of ``record`` by its ``.scheme``.

        Raises:
          ValueError: no kind lists the scheme.
        """
        schemes = self._cached("schemes", lambda: {s: k.name for k in self._kinds.values() for s in k.schemes})
        try:
            return schemes[record.scheme]
        except KeyError:
            raise ValueError(f"record scheme: expected one of {sorted(schemes)}, found {record.scheme!r}") from None


# ----------------------------------------------------------------------------- the readers


def _read_learned(row: Any, ctx: ReadContext) -> list[Any]:
    if row.name in FAMILIES and FAMILIES[row.name] is row:  # a whole input block: detected under its prefix
        if ctx.section is None:
            return [LearnedTableSource(load_position_table(ctx.source, family=row.name))]
        # a tower of a composite (an encoder-decoder's BERT): its table under that tower's module
        return [LearnedTableSource(read_position_table(ctx.source, row.name, ctx.config, row=row, section=ctx.section))]
    if isinstance(row, AudioTableFamily):
        return [read_audio_table(ctx.source, row.name, ctx.config)]
    if isinstance(row, PatchTableFamily):  # time series: a table over patches of time steps
        return [read_patch_table(ctx.source, row.name, ctx.config)]
    if not has_table(row.name, ctx.config, ctx.config_path):
        return []
    if row.optional and not table_present(ctx.source, row.name):
        return []
    return [LearnedTableSource(read_position_table(ctx.source, row.name, ctx.config, section=ctx.section))]


def _read_relative(row: Any, ctx: ReadContext) -> list[Any]:
    return list(relative_configs_from_dict(ctx.config, source=ctx.text, path=ctx.config_path))


def _read_relative_bias(row: Any, ctx: ReadContext) -> list[Any]:
    where = ctx.source if config_path_of(ctx.source) is not None else ctx.config_path  # a Hub id: its snapshot
    record = relative_bias_source(where)
    return [] if record is None else [record]


def _relative_rows(scheme: str) -> Mapping[str, Any]:
    return MappingProxyType({n: r for n, r in RELATIVE_FAMILIES.items() if r.scheme == scheme})


_RELATIVE = "flax_posenc.conversion.relative_config.RELATIVE_FAMILIES"

#: Every kind of position mechanism, one row each, in the order a record lists them.
MECHANISMS: MechanismTable = MechanismTable(
    (
        MechanismKind(
            "learned",
            "a learned table of absolute positions, one row per position",
            "tokens",
            ("learned",),
            (LearnedTableSource, AudioTableSource, PatchTableSource),
            (
                ("flax_posenc.conversion.families.FAMILIES", FAMILIES),
                ("flax_posenc.conversion.position_tables.TABLE_FAMILIES", TABLE_FAMILIES),
                ("flax_posenc.conversion.audio_tables.AUDIO_TABLE_FAMILIES", AUDIO_TABLE_FAMILIES),
                ("flax_posenc.conversion.patch_tables.PATCH_TABLE_FAMILIES", PATCH_TABLE_FAMILIES),
            ),
            _read_learned,
            details=table_details,
            figures="table",
        ),
        MechanismKind(
            "sinusoidal",
            "fixed sinusoids of absolute positions computed by the model (growing: no limit; CTRL: its rows)",
            "tokens",
            ("sinusoidal", "sinusoidal_computed"),
            (ComputedSinusoid, LearnedTableSource),
            (("flax_posenc.conversion.computed_sinusoids.COMPUTED_SINUSOID_FAMILIES", COMPUTED_SINUSOID_FAMILIES),),
            lambda row, ctx: [computed_sinusoid_from_dict(ctx.config, row.name, ctx.text, ctx.config_path)],
            details=table_details,
            figures="table",  # a sinusoidal:L:D table; a computed one has none
        ),
        MechanismKind(
            "rope",
            "rotary position embedding (RoPE) of attention queries and keys, per layer type",
            "tokens",
            ("rope",),
            (RelativeConfig,),
            ((f"{_RELATIVE} (scheme rope)", _relative_rows("rope")),),
            _read_relative,
            figures="relative",
        ),
        MechanismKind(
            "nope",
            "layers without any position encoding beside RoPE layers (read with them)",
            "none",
            ("nope",),
            (NoPositionLayers,),
        ),
        MechanismKind(
            "alibi",
            "ALiBi: a linear bias of attention scores by distance",
            "tokens",
            ("alibi",),
            (RelativeConfig,),
            ((f"{_RELATIVE} (scheme alibi)", _relative_rows("alibi")),),
            _read_relative,
            figures="relative",
        ),
        MechanismKind(
            "mrope",
            "multimodal 3-D RoPE (temporal, height, width sections) of a vision-language text tower",
            "tokens",
            ("mrope",),
            (RelativeConfig,),
            ((f"{_RELATIVE} (scheme mrope)", _relative_rows("mrope")),),
            _read_relative,
        ),
        MechanismKind(
            "relative_bias",
            "a learned bias per bucket of relative distance (T5, MPNet), per stack",
            "none",
            ("bucketed",),
            (RelativeBiasSource,),
            (("flax_posenc.conversion.relative_bias.RELATIVE_BIAS_FAMILIES", RELATIVE_BIAS_FAMILIES),),
            _read_relative_bias,
            figures="relative",
        ),
        MechanismKind(
            "deberta_relative",
            "DeBERTa's disentangled relative positions (log buckets past a span)",
            "none",
            ("deberta_relative",),
            (DebertaRelative,),
            (("flax_posenc.conversion.deberta_relative.DEBERTA_FAMILIES", DEBERTA_FAMILIES),),
            lambda row, ctx: deberta_relative_from_dict(ctx.config, ctx.text, ctx.config_path),
        ),
        MechanismKind(
            "grid",
            "a learned 2-D grid of image patch positions (limits the image size)",
            "image size",
            ("grid",),
            (GridSource,),
            (("flax_posenc.conversion.grid_tables.GRID_FAMILIES", GRID_FAMILIES),),
            lambda row, ctx: [
                GridSource(
                    load_grid_table(
                        ctx.source, family=row.name, section=None if ctx.section is None else (ctx.section, ctx.config)
                    )
                )
            ],
            tower="vision",
            details=grid_details,
            figures="grid",
        ),
        MechanismKind(
            "conv_position",
            "a grouped convolution of the hidden states over audio frames (wav2vec2 and kin): no limit, a receptive field",
            "none",
            ("conv_position",),
            (ConvPositionSource,),
            (("flax_posenc.conversion.conv_positions.CONV_POSITION_FAMILIES", CONV_POSITION_FAMILIES),),
            lambda row, ctx: read_conv_positions(row, ctx.config, ctx.source, ctx.config_path),
            tower="audio",
        ),
        MechanismKind(
            "none",
            "no position encoding at all (a recurrent, state-space or convolutional model)",
            "none",
            ("none",),
            (NoPositionEncoding,),
            (("flax_posenc.conversion.no_position.NO_POSITION_FAMILIES", NO_POSITION_FAMILIES),),
            lambda row, ctx: [no_position_encoding(row, ctx.config, ctx.text, ctx.config_path)],
        ),
        MechanismKind(
            "detr_positions",
            "a DETR-family 2-D position embedding of the feature map (sine of the pixel mask: no limit; "
            "learned: 50 rows and columns)",
            "feature-map cells",
            ("detr_positions",),
            (DetrPositions,),
            (("flax_posenc.conversion.detr_positions.DETR_POSITION_FAMILIES", DETR_POSITION_FAMILIES),),
            lambda row, ctx: [read_detr_positions(ctx.source, row, ctx.config, ctx.config_path)],
            tower="vision",
        ),
    )
)


# ----------------------------------------------------------------------------- window bias (issue 35)
# One block of its own (appended, not in the tuple above): Swin, SwinV2, Swin2SR, BEiT and
# Data2Vec-Vision window relative position bias tables (flax_posenc/conversion/window_bias.py).

from flax_posenc.conversion.window_bias import (  # noqa: E402 - the block stays self-contained
    WINDOW_BIAS_FAMILIES,
    WindowBiasSource,
    read_window_bias,
)

MECHANISMS.register(
    MechanismKind(
        "window_bias",
        "a learned bias per head for each offset within a window of patches (Swin, BEiT with its "
        "class token; SwinV2: an MLP over log-spaced offsets); limits the window, not a token count",
        "window (patches)",
        ("window_bias",),
        (WindowBiasSource,),
        (("flax_posenc.conversion.window_bias.WINDOW_BIAS_FAMILIES", WINDOW_BIAS_FAMILIES),),
        lambda row, ctx: read_window_bias(
            ctx.source, row, ctx.config, section=ctx.section, config_path=ctx.config_path
        ),
        tower="vision",
        details=grid_details,
    )
)

MECHANISMS.register(
    MechanismKind(  # issue 35 item 2: vision-tower RoPE (flax_posenc/conversion/vision_rope.py)
        "vision_rope",
        "2-D rotary positions of image patches in a vision tower (Pixtral, Qwen2/2.5-VL, DINOv3)",
        "image size",
        ("vision_rope",),
        (VisionRopeSource,),
        (("flax_posenc.conversion.vision_rope.VISION_ROPE_FAMILIES", VISION_ROPE_FAMILIES),),
        lambda row, ctx: read_vision_rope(row, ctx.config, ctx.text, ctx.config_path),
        tower="vision",
        details=grid_details,
    )
)

MECHANISMS.register(
    MechanismKind(
        "bbox_2d",
        "learned x, y, height and width tables of 2-D bounding boxes (document models; limits coordinates)",
        "coordinates",
        ("bbox_2d",),
        (BboxTableSource,),
        (("flax_posenc.conversion.bbox_tables.BBOX_FAMILIES", BBOX_FAMILIES),),
        lambda row, ctx: [read_bbox_tables(ctx.source, row.name, ctx.config)],
    ),
)

# ----------------------------------------------------------------------------- NaFlex grids (issue 35 item 3)
# One block of its own: SigLIP 2's learned grid, resized per image under a patch budget
# (flax_posenc/conversion/naflex_grids.py). A kind beside "grid": its limit is the patch budget.

from flax_posenc.conversion.naflex_grids import (  # noqa: E402 - the block stays self-contained
    NAFLEX_GRID_FAMILIES,
    NaflexGridSource,
    read_naflex_grid,
)

MECHANISMS.register(
    MechanismKind(
        "naflex_grid",
        "a learned 2-D grid resized to each image's own aspect ratio under a patch budget "
        "(SigLIP 2 NaFlex; limits the patches per image)",
        "patches per image",
        ("naflex_grid",),
        (NaflexGridSource,),
        (("flax_posenc.conversion.naflex_grids.NAFLEX_GRID_FAMILIES", NAFLEX_GRID_FAMILIES),),
        lambda row, ctx: read_naflex_grid(row, ctx.config, ctx.source, ctx.config_path, ctx.section),
        tower="vision",
        details=grid_details,
    ),
    before="conv_position",
)

# ----------------------------------------------------------------------------- Transformer-XL relative (issue 36)
# One block of its own: Conformer speech encoders' relative sinusoids with u/v biases
# (flax_posenc/conversion/xl_relative.py: Parakeet, Nemotron ASR, FastSpeech2-Conformer, wav2vec2-conformer).

from flax_posenc.conversion.xl_relative import (  # noqa: E402 - the block stays self-contained
    XL_RELATIVE_FAMILIES,
    XLRelativeSource,
    read_xl_relative,
)

MECHANISMS.register(
    MechanismKind(
        "xl_relative",
        "Transformer-XL relative sinusoids of distances, projected per layer with u/v biases (Conformer "
        "speech encoders); relative: no limit unless the model refuses past one, in encoder frames",
        "frames (of the encoder, asked as tokens)",
        ("xl_relative",),
        (XLRelativeSource,),
        (("flax_posenc.conversion.xl_relative.XL_RELATIVE_FAMILIES", XL_RELATIVE_FAMILIES),),
        lambda row, ctx: read_xl_relative(row, ctx.config, ctx.source, ctx.config_path),
        tower="audio",
    )
)

# ----------------------------------------------------------------------------- clipped relative keys (issue 36)
# One block of its own: Shaw-style per-layer relative key tables indexed by a clamped distance
# (flax_posenc/conversion/clipped_relative.py: wav2vec2-bert's relative_key, Granite Speech encoders).

from flax_posenc.conversion.clipped_relative import (  # noqa: E402 - the block stays self-contained
    CLIPPED_RELATIVE_FAMILIES,
    ClippedRelativeSource,
    read_clipped_relative,
)

MECHANISMS.register(
    MechanismKind(
        "clipped_relative",
        "learned relative key embeddings per layer (Shaw et al.), one row per distance clamped to a window "
        "(wav2vec2-bert, Granite Speech); relative: no limit, far distances share the end rows",
        "none",
        ("clipped_relative",),
        (ClippedRelativeSource,),
        (("flax_posenc.conversion.clipped_relative.CLIPPED_RELATIVE_FAMILIES", CLIPPED_RELATIVE_FAMILIES),),
        lambda row, ctx: read_clipped_relative(row, ctx.config, ctx.source, ctx.config_path),
        tower="audio",
    )
)

# ----------------------------------------------------------------------------- BROS box sinusoids (issue 36)
# One block of its own: relative bounding-box sinusoids (flax_posenc/conversion/bbox_sinusoids.py).

from flax_posenc.conversion.bbox_sinusoids import (  # noqa: E402 - the block stays self-contained
    BBOX_SINUSOID_FAMILIES,
    BboxSinusoidSource,
    read_bbox_sinusoids,
)

MECHANISMS.register(
    MechanismKind(
        "bbox_sinusoid",
        "sinusoids of the differences of every pair of bounding boxes, projected into the attention (BROS); "
        "relative: no coordinate limit",
        "coordinates",
        ("bbox_sinusoid",),
        (BboxSinusoidSource,),
        (("flax_posenc.conversion.bbox_sinusoids.BBOX_SINUSOID_FAMILIES", BBOX_SINUSOID_FAMILIES),),
        lambda row, ctx: read_bbox_sinusoids(row, ctx.config, ctx.source, ctx.config_path),
    )
)

# ----------------------------------------------------------------------------- LayoutLMv3 relative biases (issue 36)
# One block of its own: T5 buckets over position ids and box coordinates
# (flax_posenc/conversion/layout_relative_bias.py).

from flax_posenc.conversion.layout_relative_bias import (  # noqa: E402 - the block stays self-contained
    LAYOUT_BIAS_FAMILIES,
    LayoutBiasSource,
    read_layout_bias,
)

MECHANISMS.register(
    MechanismKind(
        "layout_relative_bias",
        "learned biases per head for T5 buckets of position distances and of box x0/y1 differences, shared by "
        "every layer (LayoutLMv3); relative: no limit",
        "none",
        ("layout_relative_bias",),
        (LayoutBiasSource,),
        (("flax_posenc.conversion.layout_relative_bias.LAYOUT_BIAS_FAMILIES", LAYOUT_BIAS_FAMILIES),),
        lambda row, ctx: read_layout_bias(row, ctx.config, ctx.source, ctx.config_path),
    )
)

# ----------------------------------------------------------------------------- axial positions (issue 36)
# Reformer's axial position embeddings (flax_posenc/conversion/axial_tables.py): two factors
# expanded to one table of its usable positions.

from flax_posenc.conversion.axial_tables import (  # noqa: E402 - the block stays self-contained
    AXIAL_FAMILIES,
    AxialTableSource,
    read_axial_table,
)

MECHANISMS.register(
    MechanismKind(
        "axial",
        "axial position embeddings: two learned factors (rows and columns of a grid of positions) "
        "concatenated per position (Reformer)",
        "tokens",
        ("axial",),
        (AxialTableSource,),
        (("flax_posenc.conversion.axial_tables.AXIAL_FAMILIES", AXIAL_FAMILIES),),
        lambda row, ctx: [read_axial_table(ctx.source, row, ctx.config)],
        details=table_details,
        figures="table",
    )
)

# ----------------------------------------------------------------------------- resampled tables (issue 36)
# SAM3-Lite's text position table, resampled bilinearly to every length
# (flax_posenc/conversion/resampled_tables.py): no limit.

from flax_posenc.conversion.resampled_tables import (  # noqa: E402 - the block stays self-contained
    RESAMPLED_FAMILIES,
    ResampledTableSource,
    read_resampled_table,
)

MECHANISMS.register(
    MechanismKind(
        "resampled",
        "a learned table resampled (bilinear) to the length of every sequence: no limit (SAM3-Lite's text encoder)",
        "none",
        ("resampled",),
        (ResampledTableSource,),
        (("flax_posenc.conversion.resampled_tables.RESAMPLED_FAMILIES", RESAMPLED_FAMILIES),),
        lambda row, ctx: [read_resampled_table(ctx.source, row, ctx.config)],
        details=table_details,
        figures="table",
    )
)

# ----------------------------------------------------------------------------- relative sinusoids (issue 36)
# XLNet's sinusoids of query-key distances (flax_posenc/conversion/relative_sinusoids.py): no limit.

from flax_posenc.conversion.relative_sinusoids import (  # noqa: E402 - the block stays self-contained
    RELATIVE_SINUSOID_FAMILIES,
    RelativeSinusoid,
    relative_sinusoid_from_dict,
)

MECHANISMS.register(
    MechanismKind(
        "relative_sinusoid",
        "sinusoids of query-key distances that the attention projects (XLNet, both streams): no limit",
        "none",
        ("relative_sinusoid",),
        (RelativeSinusoid,),
        (("flax_posenc.conversion.relative_sinusoids.RELATIVE_SINUSOID_FAMILIES", RELATIVE_SINUSOID_FAMILIES),),
        lambda row, ctx: [relative_sinusoid_from_dict(row, ctx.config, ctx.text, ctx.config_path)],
    )
)

# ----------------------------------------------------------------------------- segment bias (issue 36)
# CPM-Ant's segment relative position bias (flax_posenc/conversion/segment_bias.py): no limit.

from flax_posenc.conversion.segment_bias import (  # noqa: E402 - the block stays self-contained
    SEGMENT_BIAS_FAMILIES,
    SegmentBias,
    read_segment_bias,
)

MECHANISMS.register(
    MechanismKind(
        "segment_bias",
        "a learned bias per head: T5 buckets of distance within a segment, one row per segment pair "
        "across segments (CPM-Ant): no limit",
        "none",
        ("segment_bias",),
        (SegmentBias,),
        (("flax_posenc.conversion.segment_bias.SEGMENT_BIAS_FAMILIES", SEGMENT_BIAS_FAMILIES),),
        lambda row, ctx: [read_segment_bias(ctx.source, row, ctx.config)],
    )
)

# ----------------------------------------------------------------------------- decomposed relative positions (issue 35 item 6)
# One block of its own: SAM/ViTDet's per-layer rel_pos_h / rel_pos_w tables
# (flax_posenc/conversion/decomposed_rel_pos.py).

from flax_posenc.conversion.decomposed_rel_pos import (  # noqa: E402 - the block stays self-contained
    DECOMPOSED_REL_POS_FAMILIES,
    DecomposedRelPosSource,
    read_decomposed_rel_pos,
)

MECHANISMS.register(
    MechanismKind(
        "decomposed_rel_pos",
        "SAM/ViTDet decomposed relative positions: per layer, learned rel_pos_h / rel_pos_w tables of "
        "2 S - 1 offsets, resampled linearly to any size (get_rel_pos): no limit",
        "none",
        ("decomposed_rel_pos",),
        (DecomposedRelPosSource,),
        (("flax_posenc.conversion.decomposed_rel_pos.DECOMPOSED_REL_POS_FAMILIES", DECOMPOSED_REL_POS_FAMILIES),),
        lambda row, ctx: read_decomposed_rel_pos(ctx.source, row, ctx.config, ctx.config_path),
        tower="vision",
        details=grid_details,
    )
)
