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
import importlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.audio_tables import AudioTableFamily, AudioTableSource, read_audio_table
from flax_posenc.conversion.axial_tables import AxialTableSource, read_axial_table
from flax_posenc.conversion.bbox_sinusoids import BboxSinusoidSource, read_bbox_sinusoids
from flax_posenc.conversion.bbox_tables import BboxTableSource, read_bbox_tables
from flax_posenc.conversion.clipped_relative import ClippedRelativeSource, read_clipped_relative
from flax_posenc.conversion.computed_sinusoids import ComputedSinusoid, computed_sinusoid_from_dict
from flax_posenc.conversion.conv_positions import ConvPositionSource, read_conv_positions
from flax_posenc.conversion.deberta_relative import DebertaRelative, deberta_relative_from_dict
from flax_posenc.conversion.decomposed_rel_pos import DecomposedRelPosSource, read_decomposed_rel_pos
from flax_posenc.conversion.detr_positions import DetrPositions, read_detr_positions
from flax_posenc.conversion.families import FAMILIES, model_type_spellings
from flax_posenc.conversion.grid_tables import GridSource, load_grid_table
from flax_posenc.conversion.layout_relative_bias import LayoutBiasSource, read_layout_bias
from flax_posenc.conversion.learned_source import LearnedTableSource
from flax_posenc.conversion.load import load_position_table
from flax_posenc.conversion.naflex_grids import NaflexGridSource, read_naflex_grid
from flax_posenc.conversion.no_position import NoPositionEncoding, no_position_encoding
from flax_posenc.conversion.patch_tables import PatchTableFamily, PatchTableSource, read_patch_table
from flax_posenc.conversion.position_tables import has_table, read_position_table, table_present
from flax_posenc.conversion.relative_bias import RelativeBiasSource, relative_bias_source
from flax_posenc.conversion.relative_config import (
    RELATIVE_FAMILIES,
    NoPositionLayers,
    RelativeConfig,
    config_path_of,
    relative_configs_from_dict,
)
from flax_posenc.conversion.relative_sinusoids import RelativeSinusoid, relative_sinusoid_from_dict
from flax_posenc.conversion.resampled_tables import ResampledTableSource, read_resampled_table
from flax_posenc.conversion.segment_bias import SegmentBias, read_segment_bias
from flax_posenc.conversion.vision_rope import VisionRopeSource, read_vision_rope
from flax_posenc.conversion.window_bias import WindowBiasSource, read_window_bias
from flax_posenc.conversion.xl_relative import XLRelativeSource, read_xl_relative

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
        out.update(record.seconds_report())
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


def _relative_rows(scheme: str) -> tuple[str, Mapping[str, Any]]:
    """The rows of ``RELATIVE_FAMILIES`` with ``scheme``, as a registry of their own."""
    rows = MappingProxyType({n: r for n, r in RELATIVE_FAMILIES.items() if r.scheme == scheme})
    return f"flax_posenc.conversion.relative_config.RELATIVE_FAMILIES (scheme {scheme})", rows


def _registry(name: str) -> tuple[str, Mapping[str, Any]]:
    """``(dotted name, rows)`` of the registry ``module.NAME`` of ``flax_posenc.conversion``."""
    dotted = f"flax_posenc.conversion.{name}"
    module, _, attribute = dotted.rpartition(".")
    return dotted, getattr(importlib.import_module(module), attribute)


def _kind(
    name: str, summary: str, limit_unit: str, record_type: type, registry: str, read: Reader, **options: Any
) -> MechanismKind:
    """The row of a kind whose one scheme is its name, with one record type and one registry
    (``module.NAME`` of ``flax_posenc.conversion``)."""
    return MechanismKind(name, summary, limit_unit, (name,), (record_type,), (_registry(registry),), read, **options)


def _reads(read: Callable[[Any, Mapping[str, Any], Any, Path], Sequence[Any]]) -> Reader:
    """The reader of a kind whose own reader is ``read(row, config, source, config_path) -> records``."""
    return lambda row, ctx: read(row, ctx.config, ctx.source, ctx.config_path)


def _reads_one(read: Callable[[Any, Any, Mapping[str, Any]], Any]) -> Reader:
    """The reader of a kind whose own reader is ``read(source, row, config) -> one record``."""
    return lambda row, ctx: [read(ctx.source, row, ctx.config)]


def _read_grid(row: Any, ctx: ReadContext) -> list[Any]:
    section = None if ctx.section is None else (ctx.section, ctx.config)
    return [GridSource(load_grid_table(ctx.source, family=row.name, section=section))]


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
                _registry("families.FAMILIES"),
                _registry("position_tables.TABLE_FAMILIES"),
                _registry("audio_tables.AUDIO_TABLE_FAMILIES"),
                _registry("patch_tables.PATCH_TABLE_FAMILIES"),
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
            (_registry("computed_sinusoids.COMPUTED_SINUSOID_FAMILIES"),),
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
            (_relative_rows("rope"),),
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
            (_relative_rows("alibi"),),
            _read_relative,
            figures="relative",
        ),
        MechanismKind(
            "mrope",
            "multimodal 3-D RoPE (temporal, height, width sections) of a vision-language text tower",
            "tokens",
            ("mrope",),
            (RelativeConfig,),
            (_relative_rows("mrope"),),
            _read_relative,
        ),
        MechanismKind(
            "relative_bias",
            "a learned bias per bucket of relative distance (T5, MPNet), per stack",
            "none",
            ("bucketed",),
            (RelativeBiasSource,),
            (_registry("relative_bias.RELATIVE_BIAS_FAMILIES"),),
            _read_relative_bias,
            figures="relative",
        ),
        _kind(
            "deberta_relative",
            "DeBERTa's disentangled relative positions (log buckets past a span)",
            "none",
            DebertaRelative,
            "deberta_relative.DEBERTA_FAMILIES",
            lambda row, ctx: deberta_relative_from_dict(ctx.config, ctx.text, ctx.config_path),
        ),
        _kind(
            "grid",
            "a learned 2-D grid of image patch positions (limits the image size)",
            "image size",
            GridSource,
            "grid_tables.GRID_FAMILIES",
            _read_grid,
            tower="vision",
            details=grid_details,
            figures="grid",
        ),
        _kind(
            "naflex_grid",
            "a learned 2-D grid resized to each image's own aspect ratio under a patch budget "
            "(SigLIP 2 NaFlex; limits the patches per image)",
            "patches per image",
            NaflexGridSource,
            "naflex_grids.NAFLEX_GRID_FAMILIES",
            lambda row, ctx: read_naflex_grid(row, ctx.config, ctx.source, ctx.config_path, ctx.section),
            tower="vision",
            details=grid_details,
        ),
        _kind(
            "conv_position",
            "a grouped convolution of the hidden states over audio frames (wav2vec2 and kin): no limit, a receptive field",
            "none",
            ConvPositionSource,
            "conv_positions.CONV_POSITION_FAMILIES",
            _reads(read_conv_positions),
            tower="audio",
        ),
        _kind(
            "none",
            "no position encoding at all (a recurrent, state-space or convolutional model)",
            "none",
            NoPositionEncoding,
            "no_position.NO_POSITION_FAMILIES",
            lambda row, ctx: [no_position_encoding(row, ctx.config, ctx.text, ctx.config_path)],
        ),
        _kind(
            "detr_positions",
            "a DETR-family 2-D position embedding of the feature map (sine of the pixel mask: no limit; "
            "learned: 50 rows and columns)",
            "feature-map cells",
            DetrPositions,
            "detr_positions.DETR_POSITION_FAMILIES",
            lambda row, ctx: [read_detr_positions(ctx.source, row, ctx.config, ctx.config_path)],
            tower="vision",
        ),
        # Swin, SwinV2, Swin2SR, BEiT and Data2Vec-Vision window relative position bias tables
        _kind(
            "window_bias",
            "a learned bias per head for each offset within a window of patches (Swin, BEiT with its "
            "class token; SwinV2: an MLP over log-spaced offsets); limits the window, not a token count",
            "window (patches)",
            WindowBiasSource,
            "window_bias.WINDOW_BIAS_FAMILIES",
            lambda row, ctx: read_window_bias(
                ctx.source, row, ctx.config, section=ctx.section, config_path=ctx.config_path
            ),
            tower="vision",
            details=grid_details,
        ),
        _kind(
            "vision_rope",
            "2-D rotary positions of image patches in a vision tower (Pixtral, Qwen2/2.5-VL, DINOv3)",
            "image size",
            VisionRopeSource,
            "vision_rope.VISION_ROPE_FAMILIES",
            lambda row, ctx: read_vision_rope(row, ctx.config, ctx.text, ctx.config_path),
            tower="vision",
            details=grid_details,
        ),
        _kind(
            "bbox_2d",
            "learned x, y, height and width tables of 2-D bounding boxes (document models; limits coordinates)",
            "coordinates",
            BboxTableSource,
            "bbox_tables.BBOX_FAMILIES",
            lambda row, ctx: [read_bbox_tables(ctx.source, row.name, ctx.config)],
        ),
        # Conformer speech encoders (Parakeet, Nemotron ASR, FastSpeech2-Conformer, wav2vec2-conformer)
        _kind(
            "xl_relative",
            "Transformer-XL relative sinusoids of distances, projected per layer with u/v biases (Conformer "
            "speech encoders); relative: no limit unless the model refuses past one, in encoder frames",
            "frames (of the encoder, asked as tokens)",
            XLRelativeSource,
            "xl_relative.XL_RELATIVE_FAMILIES",
            _reads(read_xl_relative),
            tower="audio",
        ),
        # Shaw-style per-layer relative key tables (wav2vec2-bert's relative_key, Granite Speech encoders)
        _kind(
            "clipped_relative",
            "learned relative key embeddings per layer (Shaw et al.), one row per distance clamped to a window "
            "(wav2vec2-bert, Granite Speech); relative: no limit, far distances share the end rows",
            "none",
            ClippedRelativeSource,
            "clipped_relative.CLIPPED_RELATIVE_FAMILIES",
            _reads(read_clipped_relative),
            tower="audio",
        ),
        _kind(
            "bbox_sinusoid",
            "sinusoids of the differences of every pair of bounding boxes, projected into the attention (BROS); "
            "relative: no coordinate limit",
            "coordinates",
            BboxSinusoidSource,
            "bbox_sinusoids.BBOX_SINUSOID_FAMILIES",
            _reads(read_bbox_sinusoids),
        ),
        _kind(
            "layout_relative_bias",
            "learned biases per head for T5 buckets of position distances and of box x0/y1 differences, shared by "
            "every layer (LayoutLMv3); relative: no limit",
            "none",
            LayoutBiasSource,
            "layout_relative_bias.LAYOUT_BIAS_FAMILIES",
            _reads(read_layout_bias),
        ),
        _kind(
            "axial",
            "axial position embeddings: two learned factors (rows and columns of a grid of positions) "
            "concatenated per position (Reformer)",
            "tokens",
            AxialTableSource,
            "axial_tables.AXIAL_FAMILIES",
            _reads_one(read_axial_table),
            details=table_details,
            figures="table",
        ),
        _kind(
            "resampled",
            "a learned table resampled (bilinear) to the length of every sequence: no limit (SAM3-Lite's text encoder)",
            "none",
            ResampledTableSource,
            "resampled_tables.RESAMPLED_FAMILIES",
            _reads_one(read_resampled_table),
            details=table_details,
            figures="table",
        ),
        _kind(
            "relative_sinusoid",
            "sinusoids of query-key distances that the attention projects (XLNet, both streams): no limit",
            "none",
            RelativeSinusoid,
            "relative_sinusoids.RELATIVE_SINUSOID_FAMILIES",
            lambda row, ctx: [relative_sinusoid_from_dict(row, ctx.config, ctx.text, ctx.config_path)],
        ),
        _kind(
            "segment_bias",
            "a learned bias per head: T5 buckets of distance within a segment, one row per segment pair "
            "across segments (CPM-Ant): no limit",
            "none",
            SegmentBias,
            "segment_bias.SEGMENT_BIAS_FAMILIES",
            _reads_one(read_segment_bias),
        ),
        # SAM/ViTDet's per-layer rel_pos_h / rel_pos_w tables
        _kind(
            "decomposed_rel_pos",
            "SAM/ViTDet decomposed relative positions: per layer, learned rel_pos_h / rel_pos_w tables of "
            "2 S - 1 offsets, resampled linearly to any size (get_rel_pos): no limit",
            "none",
            DecomposedRelPosSource,
            "decomposed_rel_pos.DECOMPOSED_REL_POS_FAMILIES",
            lambda row, ctx: read_decomposed_rel_pos(ctx.source, row, ctx.config, ctx.config_path),
            tower="vision",
            details=grid_details,
        ),
    )
)
