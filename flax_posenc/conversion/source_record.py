"""One question, one answer: what does this SOURCE hold, and how long a sequence fits it?

:func:`inspect_source` reads any SOURCE (a learned table, a RoPE/ALiBi config, a T5/MPNet
relative bias, ``sinusoidal:L:D``) and returns a record implementing :class:`SourceRecord`:

- ``limit``: usable positions (``int``), or ``None`` when nothing refuses a length;
- ``describe_limit()``: the one limit sentence (:mod:`flax_posenc.limits` for tables);
- ``check_length(n) -> (ok, line)``: the verdict the CLI's ``check`` prints;
- ``to_dict()``: strict-JSON-able report (what ``inspect --json`` prints);
- ``str(record)``: the text report (what ``inspect`` prints).

Every kind of mechanism has its record types (a row of
:data:`~flax_posenc.conversion.mechanisms.MECHANISMS` lists them: :class:`LearnedTableSource`
wraps a :class:`~flax_posenc.conversion.table.PositionTable`,
:class:`~flax_posenc.conversion.relative_config.RelativeConfig` is RoPE/ALiBi,
:class:`~flax_posenc.conversion.relative_bias.RelativeBiasSource` T5/MPNet buckets, ...).
:func:`which_family` answers "which family is this ``model_type``" for every kind, with one
``-``/``_`` normalisation. numpy only (``sinusoidal:`` sources too).

>>> rec = inspect_source("sinusoidal:16:8")
>>> rec.limit, rec.describe_limit()
(16, 'sinusoidal position table (sinusoidal) of sinusoidal:16:8 holds 16 positions (0..15)')
>>> rec.check_length(17)[0], isinstance(rec, SourceRecord)
(False, True)
>>> which_family("xlm_roberta").kind, which_family("qwen2-moe").name, which_family("t5").kind
('learned', 'qwen2', 'relative_bias')
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from flax_posenc.conversion.converted_file import is_converted_file, position_table, read_converted
from flax_posenc.conversion.gguf_source import (
    GGUFFile,
    gguf_message,
    hf_config,
    is_gguf_source,
    open_gguf,
    table_of,
    tensors_sentence,
)
from flax_posenc.conversion.learned_source import LearnedTableSource
from flax_posenc.conversion.load import load_position_table
from flax_posenc.conversion.mechanisms import MECHANISMS
from flax_posenc.conversion.models import Mechanism, ModelRecord, is_refused, read_model, refusal
from flax_posenc.conversion.orbax_file import is_orbax_checkpoint, read_orbax_origin, read_orbax_params
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.relative_config import RelativeConfig, relative_configs_from_dict
from flax_posenc.conversion.sources import config_json_path, read_config
from flax_posenc.errors import CheckpointError

if TYPE_CHECKING:
    from pathlib import Path

    from flax_posenc.mrope_config import MRopeConfig

__all__ = [
    "FamilyMatch",
    "LearnedTableSource",
    "SourceRecord",
    "inspect_gguf",
    "load_mrope_config",
    "inspect_source",
    "verdict",
    "which_family",
]


@runtime_checkable
class SourceRecord(Protocol):
    """What every SOURCE record answers (see the module docstring)."""

    # read-only (properties or frozen fields) in every record
    @property
    def source(self) -> str: ...

    @property
    def family(self) -> str: ...

    @property
    def scheme(self) -> str: ...

    @property
    def key(self) -> str | None: ...

    @property
    def limit(self) -> int | None: ...

    def describe_limit(self) -> str: ...

    def check_length(self, length: int) -> tuple[bool, str]: ...

    def to_dict(self) -> dict[str, Any]: ...


class FamilyMatch(NamedTuple):
    """Which registry row a ``model_type`` names: ``kind`` is its mechanism kind (a row of
    :data:`~flax_posenc.conversion.mechanisms.MECHANISMS`: ``"learned"``, ``"rope"``,
    ``"relative_bias"``, ...); ``row`` the registry's data row."""

    kind: str
    row: Any

    @property
    def name(self) -> str:
        return self.row.name


def which_family(model_type: str) -> FamilyMatch | None:
    """The family a ``config.json`` ``model_type`` names, in any registry of any mechanism kind, else ``None``.

    Derived from :data:`~flax_posenc.conversion.mechanisms.MECHANISMS`, so it covers every
    registry, with the same ``-``/``_`` normalisation
    (:func:`~flax_posenc.conversion.families.model_type_spellings`). A model type with several
    mechanisms names its last one in reading order, the most specific (MPNet: its relative bias,
    not its learned table; CLIP: its vision grid); ``MODEL_MECHANISMS`` lists them all.
    """
    plan = MECHANISMS.plan(model_type)
    if not plan:
        return None
    kind, row = plan[-1]
    return FamilyMatch(kind.name, row)


def inspect_gguf(source: str | os.PathLike, *, family: str | None = None) -> ModelRecord:
    """Every position mechanism of a GGUF file as a :class:`~flax_posenc.conversion.models.ModelRecord`
    (what ``flax-posenc inspect/check/plot`` print): one learned table, or one RoPE config.

    Raises:
      CheckpointError: as :func:`open_gguf`, :func:`hf_config` and :func:`gguf_position_table`;
        ``family=`` on a RoPE file.
    """
    return gguf_record(source, open_gguf(source), family=family)


def gguf_record(
    source: str | os.PathLike, g: GGUFFile, *, family: str | None = None, config: dict[str, Any] | None = None
) -> ModelRecord:
    """:func:`inspect_gguf` of an opened GGUF file ``g``; ``config``: its :func:`hf_config` when
    the caller has it already (each file read once)."""
    text = os.fspath(source)
    if g.architecture.kind == "learned":
        records: tuple[Any, ...] = (LearnedTableSource(table_of(g, family=family, key=None)),)
    else:
        if family is not None:
            raise fail(g.path, "no family= for a RoPE GGUF file (family= names a learned table)", repr(family))
        arch = g.architecture.arch
        try:
            read = relative_configs_from_dict(hf_config(g) if config is None else config, source=text, path=g.path)
        except CheckpointError as exc:  # a refusal of the translated fields names the file's keys
            message, where = str(exc), f"{g.path}: "
            head, rest = (where, message[len(where) :]) if message.startswith(where) else ("", message)
            raise CheckpointError(head + gguf_message(rest, arch)) from None
        field = f"{arch}.context_length"  # the limit sentence names the file's key, not config.json's
        records = tuple(
            dataclasses.replace(
                r,
                tensors=tensors_sentence(arch, r.rope.layout),
                length_field=field,
                rope=dataclasses.replace(r.rope, length_field=field),
            )
            if isinstance(r, RelativeConfig) and r.rope is not None
            else r
            for r in read
        )
    return ModelRecord(text, g.architecture.model_type, tuple(Mechanism.of(r) for r in records))


def load_mrope_config(source: str | os.PathLike) -> MRopeConfig:
    """The :class:`~flax_posenc.MRopeConfig` of a Qwen2-VL / Qwen2.5-VL / Qwen3-VL / GLM-4V checkpoint
    directory or ``config.json`` (numpy only), for :func:`flax_posenc.mrope_positions`.

    Reads ``text_config`` (or the flat 4.x fields), ``rope_parameters.mrope_section`` (4.x:
    ``rope_scaling``), ``image_token_id``/``video_token_id`` and ``vision_config``'s
    ``spatial_merge_size`` and ``tokens_per_second``.

    Raises:
      CheckpointError: SOURCE cannot be read, or its model type has no M-RoPE (one line).
    """
    record = inspect_source(source)
    found = [m.record.mrope for m in record.mechanisms if m.kind == "mrope"]
    if not found:
        kinds = ", ".join(m.kind for m in record.mechanisms)
        raise fail(source, "a checkpoint with multimodal RoPE (mrope_section)", f"{record.model_type}: {kinds}")
    return found[0]


def inspect_source(source: str | os.PathLike, *, family: str | None = None) -> ModelRecord:
    """Every position mechanism of SOURCE, as a :class:`~flax_posenc.conversion.models.ModelRecord`.

    A checkpoint (or ``config.json``) whose ``model_type`` is in the model registry
    (:data:`~flax_posenc.conversion.models.MODEL_MECHANISMS`) gets each of its mechanisms read:
    learned tables, RoPE per layer type and NoPE layers, ALiBi, relative biases. Anything else
    (weights files, Hub ids, ``sinusoidal:L:D``, a converted file or an orbax directory written by
    ``flax-posenc convert``, a checkpoint of an unknown type whose keys name a learned-table family) is
    read as one learned table. A ``.gguf`` file is read by :func:`inspect_gguf` (its RoPE metadata, or
    GPT-2's table). ``family`` forces a learned-table family.

    ``.limit`` is the smallest limit among the mechanisms; ``.check_length(n)`` fails when any
    refuses; ``.mechanisms`` lists them.

    Raises:
      CheckpointError: SOURCE cannot be read, or its model type's mechanisms are not read (one
        line naming the file, the model type and the mechanism).
    """
    one = functools.partial(_one, source)
    if is_gguf_source(source):  # llama.cpp's format: metadata (RoPE) or position_embd.weight (GPT-2)
        return inspect_gguf(source, family=family)
    if is_converted_file(source):  # written by `flax-posenc convert` (numpy only, every version)
        converted = read_converted(source)
        return one(LearnedTableSource(position_table(converted.spec, converted.params, source, converted.origin)))
    if is_orbax_checkpoint(source):  # `flax-posenc convert --format orbax`: restoring it imports orbax
        spec, params = read_orbax_params(source)
        return one(LearnedTableSource(position_table(spec, params, source, read_orbax_origin(source))))
    if family is not None:
        return one(LearnedTableSource(load_position_table(source, family=family)))
    path = config_json_path(source)  # a directory's, a .json path, or a Hub id's (config.json only)
    if path is None:
        return one(LearnedTableSource(load_position_table(source)))
    return config_record(source, path, read_config(path))


def config_record(source: str | os.PathLike, path: Path, config: dict[str, Any]) -> ModelRecord:
    """:func:`inspect_source` of a checkpoint whose ``config.json`` (``path``) the caller has read
    (``config``): the file is read once."""
    record = read_model(source, config, path)
    if record is not None:
        return record
    if is_refused(config.get("model_type")):  # a mechanism known not to be read: never guess a table
        raise fail(path, "a model type whose position mechanisms are read", refusal(config.get("model_type")))
    try:  # an unknown model type whose tensors name a learned-table family
        return _one(source, LearnedTableSource(load_position_table(source)))
    except CheckpointError:
        raise fail(path, "a model type whose position mechanisms are read", refusal(config.get("model_type"))) from None


def _one(source: str | os.PathLike, record: Any) -> ModelRecord:
    """The :class:`ModelRecord` of one mechanism's record."""
    return ModelRecord(os.fspath(source), getattr(record, "model_type", None), (Mechanism.of(record),))


def verdict(record: SourceRecord, length: int) -> dict[str, Any]:
    """The ``check --json`` object of ``record`` for ``length`` positions.

    >>> verdict(inspect_source("sinusoidal:8:4"), 10)["excess"]
    2
    """
    fits, line = record.check_length(length)
    limit = record.limit
    return {
        "source": record.source,
        "family": record.family,
        "scheme": record.scheme,
        "key": record.key,
        "length": length,
        "num_positions": limit,
        "max_length": limit,  # deprecated key (the former name of num_positions), goes in 0.3
        "fits": fits,
        "excess": 0 if fits or limit is None else length - limit,
        "message": line,
    }
