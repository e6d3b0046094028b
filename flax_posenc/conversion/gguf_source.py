"""GGUF files (llama.cpp's format): their position mechanisms, read with the ``gguf`` package.

A ``.gguf`` SOURCE is read with ``gguf.GGUFReader`` (llama.cpp's own Python reader) after a
bounded scan of its header (:func:`scan_header`), and quantized tables are dequantized by
``gguf.quants.dequantize``. ``gguf`` is an optional extra imported only when a ``.gguf`` is read
(``pip install 'flax-posenc[gguf]'``); without it, a ``.gguf`` SOURCE is one
:class:`~flax_posenc.errors.CheckpointError` line naming the extra. numpy only otherwise.

What is read, per architecture (:data:`GGUF_ARCHITECTURES`, one row each):

- RoPE (``llama``, ``qwen2``): ``{arch}.context_length`` (the limit), ``{arch}.rope.freq_base``
  (llama.cpp's default 10000 when absent), ``{arch}.rope.dimension_count`` (the rotated dims;
  default the head dim), ``{arch}.attention.key_length`` (the head dim; default
  ``embedding_length / head_count``) and ``{arch}.rope.scaling.*`` (``type`` ``none``/``linear``/
  ``yarn``, ``factor``, ``original_context_length``, ``yarn_beta_fast``, ``yarn_beta_slow``; the
  older ``{arch}.rope.scale_linear`` stands for ``factor`` when that is absent, as in llama.cpp),
  turned into the Hugging Face config fields a :class:`~flax_posenc.RopeConfig` is read from;
  Llama 3.x's ``llama3`` scaling, which llama.cpp stores as the tensor ``rope_freqs.weight``,
  is read back from it (:func:`llama3_from_rope_freqs`).
- A learned table (``gpt2``): the ``position_embd.weight`` tensor (F32/F16/F64 as stored, every
  other storage -- BF16, Q8_0, Q4_0, K-quants, ... -- dequantized to float32), whose rows must
  equal ``{arch}.context_length``.

Scaling: transformers 5.24.0's GGUF loader drops ``{arch}.rope.scaling.*`` for every
architecture but ``gpt-oss``; llama.cpp applies it. This reader follows the file (llama.cpp):
for a file without scaling both agree; for one with scaling, the config here is what
transformers derives when it is given the file's scaling (``tests/test_gguf.py`` checks both).

Hostile files: the header is walked before ``GGUFReader`` sees it, with every count checked
against the bytes left (a truncated file, a tensor or key count larger than the file holds, an
array declaring 2**60 items: one line, no allocation), at most :data:`MAX_METADATA_ITEMS` array
items in all, strings of at most :data:`MAX_STRING_BYTES`, tensors of at most 4 dims whose data
lies inside the file. Only the given file is read.

>>> from flax_posenc.conversion.gguf_source import GGUF_ARCHITECTURES
>>> GGUF_ARCHITECTURES["gpt2"].kind, GGUF_ARCHITECTURES["llama"].model_type
('learned', 'llama')
"""

from __future__ import annotations

import dataclasses
import functools
import mmap
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from flax_posenc.conversion.readers import fail, one_line
from flax_posenc.conversion.safety import regular_file
from flax_posenc.conversion.table import PositionTable
from flax_posenc.errors import CheckpointError, shown
from flax_posenc.rope_config import RopeConfig, rope_inverse_frequencies

GGUF_EXTRA_HINT = "pip install 'flax-posenc[gguf]'"
GGUF_SUFFIX = ".gguf"
#: GGUF versions ``gguf.GGUFReader`` reads.
GGUF_VERSIONS: tuple[int, ...] = (2, 3)
#: array items allowed in a file's metadata, all arrays together (a 262k-token vocabulary with
#: its scores, types and merges holds about 1.1 million): ``GGUFReader`` keeps a numpy view per item.
MAX_METADATA_ITEMS = 1 << 22
#: bytes allowed in one metadata string (chat templates are tens of kB).
MAX_STRING_BYTES = 1 << 26
#: bytes allowed in a key or tensor name.
MAX_NAME_BYTES = 1 << 16
#: ggml's GGML_MAX_DIMS.
MAX_TENSOR_DIMS = 4
#: nesting of arrays in arrays allowed.
MAX_ARRAY_DEPTH = 3

# GGUF value types -> (struct code, size) for fixed-size scalars
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
_STRING, _ARRAY = 8, 9
_INT_TYPES = (0, 1, 2, 3, 4, 5, 10, 11)
_FLOAT_TYPES = (6, 12)


@dataclasses.dataclass(frozen=True)
class GGUFArchitecture:
    """One ``general.architecture`` read, as data.

    Attributes:
      arch: the GGUF architecture name (the ``{arch}`` of its keys).
      model_type: the Hugging Face ``model_type`` it becomes (transformers' GGUF loader's choice).
      kind: ``"rope"`` (read from metadata) or ``"learned"`` (a position tensor).
      table: the position tensor of a ``learned`` architecture.
    """

    arch: str
    model_type: str
    kind: Literal["rope", "learned"]
    table: str | None = None


#: The architectures read, one row each; any other is a one-line refusal naming these.
GGUF_ARCHITECTURES: Mapping[str, GGUFArchitecture] = MappingProxyType(
    {
        a.arch: a
        for a in (
            GGUFArchitecture("llama", "llama", "rope"),
            GGUFArchitecture("qwen2", "qwen2", "rope"),
            GGUFArchitecture("gpt2", "gpt2", "learned", table="position_embd.weight"),
        )
    }
)

#: The layout llama.cpp rotates a file's own ``attn_q``/``attn_k`` tensors in, per architecture:
#: its converter permutes Llama's Q/K rows for its interleaved (NORM) rotation and transformers'
#: GGUF loader un-permutes them (``LlamaTensorProcessor``); Qwen2's are stored as in Hugging Face.
GGUF_OWN_TENSOR_LAYOUT: Mapping[str, str] = MappingProxyType({"llama": "interleaved", "qwen2": "half"})


def tensors_sentence(arch: str, layout: str) -> str:
    """Which tensors a GGUF record's RoPE ``layout`` refers to (the record's ``tensors`` field).

    >>> tensors_sentence("llama", "half")[:60]
    'layout half is for the Hugging Face q_proj/k_proj that trans'
    """
    own = GGUF_OWN_TENSOR_LAYOUT.get(arch, layout)
    theirs = f"layout {layout} is for the Hugging Face q_proj/k_proj that transformers makes on load"
    if own == layout:
        return f"{theirs}; the file's own attn_q/attn_k are stored the same way"
    return f"{theirs}; the file's own attn_q/attn_k are stored permuted for llama.cpp: rotate them in layout {own}"


#: The Hugging Face config field :func:`hf_config` fills -> the GGUF key (``{arch}.`` + suffix) it
#: came from: a refusal of the translated config names the key the file holds (:func:`gguf_message`).
GGUF_KEY_OF_FIELD: Mapping[str, str] = MappingProxyType(
    {
        "max_position_embeddings": "context_length",
        "n_positions": "context_length",
        "rope_theta": "rope.freq_base",
        "num_attention_heads": "attention.head_count",
        "n_head": "attention.head_count",
        "hidden_size": "embedding_length",
        "n_embd": "embedding_length",
        "head_dim": "attention.key_length",
        "num_key_value_heads": "attention.head_count_kv",
        "num_hidden_layers": "block_count",
        "partial_rotary_factor": "rope.dimension_count",
        "original_max_position_embeddings": "rope.scaling.original_context_length",
        "beta_fast": "rope.scaling.yarn_beta_fast",
        "beta_slow": "rope.scaling.yarn_beta_slow",
        "rope_scaling": "rope.scaling.*",
    }
)


def gguf_message(message: str, arch: str) -> str:
    """``message`` about :func:`hf_config`'s translated fields, naming the GGUF keys instead.

    >>> gguf_message("expected max_position_embeddings at most 1099511627776 positions", "llama")
    'expected llama.context_length at most 1099511627776 positions'
    """
    import re

    pattern = r"\b(" + "|".join(sorted(GGUF_KEY_OF_FIELD, key=len, reverse=True)) + r")\b"
    return re.sub(pattern, lambda m: f"{arch}.{GGUF_KEY_OF_FIELD[m.group(1)]}", message)


#: ``{arch}.rope.scaling.type`` -> Hugging Face ``rope_type`` (``none``: no scaling).
SCALING_TYPES: Mapping[str, str | None] = MappingProxyType({"none": None, "linear": "linear", "yarn": "yarn"})
#: ``{arch}.rope.scaling.<suffix>`` -> the ``rope_scaling`` key it becomes.
SCALING_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "factor": "factor",
        "original_context_length": "original_max_position_embeddings",
        "yarn_beta_fast": "beta_fast",
        "yarn_beta_slow": "beta_slow",
    }
)
#: ``rope.scaling`` keys accepted only at llama.cpp's neutral value (anything else changes the
#: rotation or its magnitude in ways no RopeConfig field holds): suffix -> neutral values.
SCALING_NEUTRAL: Mapping[str, tuple[float, ...]] = MappingProxyType(
    {"attn_factor": (1.0,), "yarn_attn_factor": (1.0,), "yarn_ext_factor": (-1.0, 1.0), "yarn_log_multiplier": (0.0,)}
)
#: Tensors holding per-dimension RoPE frequency factors (llama.cpp's ``LLM_TENSOR_ROPE_FREQS``,
#: ``ROPE_FACTORS_LONG/SHORT``): a file with one is refused, never read as unscaled.
ROPE_FREQS = "rope_freqs.weight"
FREQUENCY_FACTOR_TENSORS: tuple[str, ...] = (
    "rope_freqs.weight",
    "rope_factors_long.weight",
    "rope_factors_short.weight",
)
#: llama.cpp's older ``{arch}.<key>`` for the scaling factor, which it still applies when
#: ``rope.scaling.factor`` is absent (linear unless ``rope.scaling.type`` says otherwise).
LEGACY_SCALE_LINEAR = "rope.scale_linear"
#: ``rope.scaling`` keys that do not change the rotation.
SCALING_IGNORED: tuple[str, ...] = ("finetuned",)


def import_gguf(path: object):
    """``import gguf`` or a one-line CheckpointError naming the extra to install."""
    try:
        import gguf
    except ImportError:
        raise fail(
            path, f"the gguf package to read a GGUF file (install it: {GGUF_EXTRA_HINT})", "gguf is not installed"
        ) from None
    return gguf


def is_gguf_source(source: object) -> bool:
    """Whether SOURCE names a GGUF file (by its ``.gguf`` suffix; it need not exist)."""
    return isinstance(source, (str, os.PathLike)) and os.fspath(source).lower().endswith(GGUF_SUFFIX)


# ----------------------------------------------------------------------------- bounded header scan


class _Scan:
    """A cursor over the file's bytes: every read checked against the end of the file."""

    def __init__(self, buf: Any, size: int, path: Path, endian: str):
        self.buf, self.size, self.path, self.e = buf, size, path, endian
        self.pos = 0
        self.items = 0

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise fail(
                self.path,
                f"{what} ({n} bytes) inside the file (truncated or not a GGUF file?)",
                f"{self.size - self.pos} bytes left at byte {self.pos}",
            )

    def unpack(self, code: str, size: int, what: str) -> Any:
        self.need(size, what)
        (value,) = struct.unpack_from(self.e + code, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str, cap: int) -> bytes:
        n = self.unpack("Q", 8, f"the length of {what}")
        if n > cap:
            raise fail(self.path, f"{what} of at most {cap} bytes", f"a declared length of {n} at byte {self.pos - 8}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw

    def skip_strings(self, count: int, what: str) -> None:
        """Step over ``count`` strings (an array's items) without reading their bytes: one length
        prefix per item, each checked against :data:`MAX_STRING_BYTES` and the bytes left."""
        length = struct.Struct(self.e + "Q").unpack_from
        buf, pos, end, cap = self.buf, self.pos, self.size, MAX_STRING_BYTES
        for i in range(count):
            if pos + 8 > end:
                self.pos = pos
                self.need(8, f"the length of {what}[{i}]")
            (n,) = length(buf, pos)
            if n > cap:
                raise fail(self.path, f"{what}[{i}] of at most {cap} bytes", f"a declared length of {n} at byte {pos}")
            pos += 8 + n
            if pos > end:
                self.pos = pos - n
                self.need(n, f"{what}[{i}]")
        self.pos = pos

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        """One value; arrays are skipped (``("array", item type, count)``) except short ones."""
        if vtype in _SCALARS:
            code, size = _SCALARS[vtype]
            return self.unpack(code, size, what)
        if vtype == _STRING:
            raw = self.string(what, MAX_STRING_BYTES)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise fail(self.path, f"{what} as UTF-8 text", "undecodable bytes") from None
        if vtype == _ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise fail(self.path, f"{what}: arrays nested at most {MAX_ARRAY_DEPTH} deep", "deeper nesting")
            itype = self.unpack("I", 4, f"the item type of {what}")
            count = self.unpack("Q", 8, f"the length of {what}")
            smallest = _SCALARS[itype][1] if itype in _SCALARS else 8 if itype in (_STRING, _ARRAY) else None
            if smallest is None:
                raise fail(self.path, f"{what}: a known GGUF value type (0..12)", f"array item type {itype}")
            if count * smallest > self.size - self.pos:
                raise fail(
                    self.path,
                    f"{what} to fit in the file (truncated, or a lying array length?)",
                    f"{count} items of at least {smallest} bytes with {self.size - self.pos} bytes left",
                )
            self.items += count
            if self.items > MAX_METADATA_ITEMS:
                raise fail(
                    self.path, f"at most {MAX_METADATA_ITEMS} metadata array items in all", f"{self.items} at {what}"
                )
            if itype in _SCALARS:
                self.pos += count * smallest
                return ("array", itype, count)
            if itype == _STRING:  # skipped, not parsed: walk the length prefixes only
                self.skip_strings(count, what)
                return ("array", itype, count)
            for i in range(count):
                self.value(itype, f"{what}[{i}]", depth + 1)
            return ("array", itype, count)
        raise fail(self.path, f"{what}: a known GGUF value type (0..12)", f"type {vtype}")


@dataclasses.dataclass(frozen=True)
class ScannedHeader:
    """What :func:`scan_header` found: scalar metadata (arrays as ``("array", type, count)``),
    each key's GGUF value type, and each tensor's ``(ggml type, numpy shape, byte offset)``."""

    version: int
    metadata: Mapping[str, Any]
    types: Mapping[str, int]
    tensors: Mapping[str, tuple[int, tuple[int, ...], int]]
    data_start: int
    big_endian: bool = False


def scan_header(path: str | os.PathLike, quant_sizes: Mapping[int, tuple[int, int]]) -> ScannedHeader:
    """Walk a GGUF header with every length checked against the bytes left; nothing large allocated.

    Args:
      path: the file (a regular file).
      quant_sizes: ggml type -> ``(block size, bytes per block)`` (``gguf.GGML_QUANT_SIZES``).

    Raises:
      CheckpointError: one line: not a GGUF file, an unsupported version, a truncated file, counts
        or lengths past the end of the file or past the caps above, unknown value or tensor
        types, duplicate keys or tensors, tensor data outside the file.
    """
    path = Path(path)
    st = regular_file(path, what="a GGUF file")
    size = st.st_size
    if size < 24:
        raise fail(path, "a GGUF file (magic, version, counts: at least 24 bytes)", f"{size} bytes")
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _scan(buf, min(size, len(buf)), path, quant_sizes)
    except CheckpointError:
        raise
    except (OSError, ValueError) as e:  # mmap of an emptied file and the like
        raise fail(path, "a readable GGUF file", f"{type(e).__name__}: {one_line(e)[:160]}") from None


def _scan(buf: Any, size: int, path: Path, quant_sizes: Mapping[int, tuple[int, int]]) -> ScannedHeader:
    if bytes(buf[:4]) != b"GGUF":
        raise fail(path, "a GGUF file (magic bytes 'GGUF')", repr(bytes(buf[:4])))
    (version,) = struct.unpack_from("<I", buf, 4)
    endian = "<"
    if version & 0xFFFF == 0:  # written for the other byte order, as GGUFReader detects it
        endian = ">"
        (version,) = struct.unpack_from(">I", buf, 4)
    if version not in GGUF_VERSIONS:
        raise fail(path, f"a GGUF version {' or '.join(map(str, GGUF_VERSIONS))}", f"version {version}")
    s = _Scan(buf, size, path, endian)
    s.pos = 8
    n_tensors = s.unpack("Q", 8, "the tensor count")
    n_kv = s.unpack("Q", 8, "the metadata count")
    # each key/value holds at least 8 + 4 + 1 bytes, each tensor info at least 8 + 4 + 4 + 8
    if n_kv * 13 + n_tensors * 24 > size - s.pos:
        raise fail(
            path,
            "tensor and metadata counts that fit in the file (truncated, or a lying count?)",
            f"{n_tensors} tensors and {n_kv} metadata entries with {size - s.pos} bytes left",
        )
    metadata: dict[str, Any] = {}
    types: dict[str, int] = {}
    for _ in range(n_kv):
        raw = s.string("a metadata key", MAX_NAME_BYTES)
        key = raw.decode("utf-8", errors="replace")
        vtype = s.unpack("I", 4, f"the type of {key!r}")
        if key in metadata:
            raise fail(path, "each metadata key once", f"{key!r} twice")
        metadata[key] = s.value(vtype, repr(key))
        types[key] = vtype
    alignment = metadata.get("general.alignment", 32)
    if "general.alignment" in types and (
        types["general.alignment"] != 4 or alignment < 1 or alignment & (alignment - 1)
    ):
        raise fail(path, "general.alignment as a uint32 power of two", repr(alignment))
    infos: list[tuple[str, int, tuple[int, ...], int]] = []
    for i in range(n_tensors):
        name = s.string(f"the name of tensor {i}", MAX_NAME_BYTES).decode("utf-8", errors="replace")
        n_dims = s.unpack("I", 4, f"the dims of {name!r}")
        if not 1 <= n_dims <= MAX_TENSOR_DIMS:
            raise fail(path, f"{name!r} of 1 to {MAX_TENSOR_DIMS} dims", f"{n_dims} dims")
        s.need(8 * n_dims, f"the shape of {name!r}")
        dims = struct.unpack_from(f"{endian}{n_dims}Q", buf, s.pos)
        s.pos += 8 * n_dims
        ggml_type = s.unpack("I", 4, f"the type of {name!r}")
        offset = s.unpack("Q", 8, f"the offset of {name!r}")
        infos.append((name, ggml_type, tuple(reversed(dims)), offset))
    data_start = -(-s.pos // alignment) * alignment
    tensors: dict[str, tuple[int, tuple[int, ...], int]] = {}
    for name, ggml_type, shape, offset in infos:
        if name in tensors:
            raise fail(path, "each tensor name once", f"{name!r} twice")
        if ggml_type not in quant_sizes:
            raise fail(path, f"{name!r} of a known ggml type", f"type {ggml_type}")
        block, block_bytes = quant_sizes[ggml_type]
        count = 1
        for d in shape:
            count *= d
        if shape[-1] % block:
            raise fail(path, f"{name!r}: rows of whole {block}-value blocks", f"shape {shape}")
        nbytes = count // block * block_bytes
        if offset % alignment or data_start + offset + nbytes > size:
            raise fail(
                path,
                f"{name!r} ({nbytes} bytes, {alignment}-aligned) inside the {max(size - data_start, 0)} data bytes "
                "(truncated file?)",
                f"offset {offset}",
            )
        tensors[name] = (ggml_type, shape, offset)
    return ScannedHeader(
        version,
        MappingProxyType(metadata),
        MappingProxyType(types),
        MappingProxyType(tensors),
        data_start,
        endian == ">",
    )


# ----------------------------------------------------------------------------- the file


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    """An opened GGUF file: its checked header and its architecture row.

    Metadata values are read from the bounded scan (:func:`scan_header`), which keeps every scalar
    and string and skips the arrays (a tokenizer's 128k tokens and 280k merges are stepped over,
    never parsed). Tensors are read from the scanned offsets (:func:`read_tensor`);
    ``gguf.GGUFReader`` over the file (``reader``) is opened only when asked for.
    """

    path: Path
    source: str
    header: ScannedHeader
    architecture: GGUFArchitecture

    @functools.cached_property
    def reader(self) -> Any:
        """``gguf.GGUFReader`` over the file (parses every metadata array: slow on a large tokenizer)."""
        gguf = import_gguf(self.path)
        try:
            return gguf.GGUFReader(self.path)
        except Exception as e:  # the header passed our checks; anything gguf still refuses: one line
            raise fail(
                self.path, "a GGUF file gguf.GGUFReader reads", f"{type(e).__name__}: {one_line(e)[:160]}"
            ) from None

    def field(self, suffix: str, kind: Literal["int", "float", "str"], *, required: bool = False) -> Any:
        """``{arch}.<suffix>`` as a Python value of ``kind`` (``None`` when absent and not required)."""
        key = f"{self.architecture.arch}.{suffix}"
        return header_value(self.header, key, kind, self.path, required=required)

    def keys(self) -> list[str]:
        """Every metadata key of the file."""
        return list(self.header.metadata)


def header_value(
    header: ScannedHeader, key: str, kind: Literal["int", "float", "str"], where: object, *, required: bool
) -> Any:
    """One scalar metadata value of a scanned header of the expected kind (as :func:`metadata_value`
    reads it from ``GGUFReader``: the same values, the same one-line errors)."""
    if key not in header.metadata:
        if required:
            raise fail(where, f"the GGUF metadata key {key}", "no such key")
        return None
    vtype, value = header.types[key], header.metadata[key]
    ok = {
        "int": vtype in _INT_TYPES,
        "float": vtype in _FLOAT_TYPES or vtype in _INT_TYPES,
        "str": vtype == _STRING,
    }[kind]
    if not ok:
        shown = f"an array of {value[2]} items" if vtype == _ARRAY else f"{value!r} (GGUF type {vtype})"
        raise fail(where, f"{key} as {'an' if kind == 'int' else 'a'} {kind}", shown[:120])
    return float(value) if kind == "float" else value


def metadata_value(
    fields: Mapping[str, Any], key: str, kind: Literal["int", "float", "str"], where: object, *, required: bool
) -> Any:
    """One scalar metadata value of ``gguf.GGUFReader``'s ``fields`` of the expected kind (an
    integer type for ``"int"``, a float or integer type for ``"float"``, a string for ``"str"``),
    else one CheckpointError line; ``None`` when absent and not ``required``."""
    field = fields.get(key)
    if field is None:
        if required:
            raise fail(where, f"the GGUF metadata key {key}", "no such key")
        return None
    vtype = int(field.types[0]) if field.types else -1
    ok = {
        "int": vtype in _INT_TYPES,
        "float": vtype in _FLOAT_TYPES or vtype in _INT_TYPES,
        "str": vtype == _STRING,
    }[kind]
    if not ok:
        shown = (
            f"an array of {len(field.data)} items" if vtype == _ARRAY else f"{field.contents()!r} (GGUF type {vtype})"
        )
        raise fail(where, f"{key} as {'an' if kind == 'int' else 'a'} {kind}", shown[:120])
    value = field.contents()
    return float(value) if kind == "float" else value


def open_gguf(source: str | os.PathLike) -> GGUFFile:
    """Open a ``.gguf`` SOURCE: import ``gguf``, scan the header (bounded), find the row.

    Raises:
      CheckpointError: gguf not installed (naming the extra), no such file or not a regular
        file, a hostile or malformed header (see :func:`scan_header`), no
        ``general.architecture`` or one not in :data:`GGUF_ARCHITECTURES`.
    """
    text = os.fspath(source)
    path = Path(text).expanduser()
    gguf = import_gguf(path)
    sizes = {int(k): (int(b), int(n)) for k, (b, n) in gguf.GGML_QUANT_SIZES.items()}
    header = scan_header(path, sizes)
    arch = header_value(header, "general.architecture", "str", path, required=True)
    row = GGUF_ARCHITECTURES.get(arch)
    if row is None:
        raise fail(
            path,
            f"a GGUF architecture whose positions are read ({', '.join(GGUF_ARCHITECTURES)})",
            f"general.architecture='{shown(arch)}'",
        )
    return GGUFFile(path, text, header, row)


# ----------------------------------------------------------------------------- RoPE


def rope_scaling(g: GGUFFile) -> dict[str, Any] | None:
    """The Hugging Face ``rope_scaling`` dict the file's ``{arch}.rope.scaling.*`` keys mean, or ``None``.

    Raises:
      CheckpointError: an unknown scaling type (``longrope`` included: its factors live in
        tensors this reader does not read), a key without a RopeConfig counterpart set to a
        non-neutral value, a key of the wrong type.
    """
    prefix = f"{g.architecture.arch}.rope.scaling."
    present = sorted(k[len(prefix) :] for k in g.keys() if k.startswith(prefix))
    # llama.cpp's older key: read when rope.scaling.factor is absent, 0 meaning none (llama-model.cpp)
    legacy = g.field(LEGACY_SCALE_LINEAR, "float")
    legacy = None if legacy == 0.0 or "factor" in present else legacy
    if not present and legacy is None:
        return None
    kind = g.field("rope.scaling.type", "str")
    if kind is None:  # llama.cpp: a factor alone means linear
        kind = "linear" if "factor" in present or legacy is not None else "none"
    if kind not in SCALING_TYPES:
        raise fail(g.path, f"{prefix}type one of {', '.join(SCALING_TYPES)}", repr(kind))
    out: dict[str, Any] = {}
    for suffix in present:
        if suffix == "type" or suffix in SCALING_IGNORED:
            continue
        if suffix in SCALING_NEUTRAL:
            value = g.field(f"rope.scaling.{suffix}", "float")
            if value not in SCALING_NEUTRAL[suffix]:
                raise fail(
                    g.path,
                    f"{prefix}{suffix} at its neutral value {SCALING_NEUTRAL[suffix][0]:g} (other values are not read)",
                    f"{value!r}",
                )
            continue
        if suffix not in SCALING_KEYS:
            raise fail(g.path, f"{prefix}* keys that are read ({', '.join(SCALING_KEYS)})", f"{prefix}{suffix}")
        out[SCALING_KEYS[suffix]] = g.field(
            f"rope.scaling.{suffix}", "int" if suffix == "original_context_length" else "float"
        )
    if legacy is not None:
        out["factor"] = legacy
    rope_type = SCALING_TYPES[kind]
    if rope_type is None:
        return None
    factor = out.get("factor")
    if factor is None:
        raise fail(g.path, f"{prefix}factor for {kind} scaling", "no such key")
    if factor == 1.0 and rope_type == "linear":
        return None
    if rope_type == "linear":
        return {"rope_type": "linear", "factor": factor}
    return {"rope_type": rope_type, **out}


def hf_config(g: GGUFFile) -> dict[str, Any]:
    """The Hugging Face ``config.json`` fields the file's metadata means (what transformers'
    GGUF loader fills, plus ``head_dim``/``partial_rotary_factor`` from llama.cpp's keys and the
    ``rope_scaling`` it drops).

    Raises:
      CheckpointError: a required key missing (``context_length``, ``embedding_length``,
        ``attention.head_count``), a key of the wrong type, rotated dims that are not an even
        number at most the head dim.
    """
    row = g.architecture
    context = g.field("context_length", "int", required=True)
    if row.kind == "learned":
        out: dict[str, Any] = {"model_type": row.model_type, "n_positions": context, "n_ctx": context}
        for suffix, name in (("embedding_length", "n_embd"), ("attention.head_count", "n_head")):
            value = g.field(suffix, "int")
            if value is not None:
                out[name] = value
        return out
    hidden = g.field("embedding_length", "int", required=True)
    heads = g.field("attention.head_count", "int", required=True)
    if heads < 1 or hidden < 1:
        raise fail(g.path, f"positive {row.arch}.embedding_length and attention.head_count", f"{hidden} and {heads}")
    head_dim = g.field("attention.key_length", "int")
    if head_dim is None:
        head_dim = hidden // heads
    config: dict[str, Any] = {
        "model_type": row.model_type,
        "max_position_embeddings": context,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "head_dim": head_dim,
    }
    for suffix, name in (("block_count", "num_hidden_layers"), ("attention.head_count_kv", "num_key_value_heads")):
        value = g.field(suffix, "int")
        if value is not None and value < 1:  # never read as "no count" (rope_for_layer's range)
            raise fail(g.path, f"{row.arch}.{suffix} as a positive integer", str(value))
        if value is not None:
            config[name] = value
    theta = g.field("rope.freq_base", "float")
    config["rope_theta"] = 10000.0 if theta is None else theta
    rotated = g.field("rope.dimension_count", "int")
    if rotated is not None and rotated != head_dim:
        if not 0 < rotated <= head_dim or rotated % 2:
            raise fail(
                g.path,
                f"{row.arch}.rope.dimension_count an even number of dims at most the head dim {head_dim}",
                str(rotated),
            )
        config["partial_rotary_factor"] = rotated / head_dim
    scaling = rope_scaling(g)
    factors = next((name for name in FREQUENCY_FACTOR_TENSORS if name in g.header.tensors), None)
    if factors is not None:  # llama.cpp divides each frequency by these: no metadata key states them
        if factors != ROPE_FREQS or scaling is not None:
            raise fail(
                g.path,
                "RoPE frequencies stated by metadata, or by rope_freqs.weight alone (Llama 3's llama3 scaling)",
                f"the tensor {factors}"
                + (f" and {row.arch}.rope.scaling.*" if scaling is not None else "")
                + " (not read)",
            )
        scaling = llama3_from_rope_freqs(g, config)
    if scaling is not None:
        config["rope_scaling"] = scaling
    return config


def llama3_from_rope_freqs(g: GGUFFile, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``llama3`` scaling that ``rope_freqs.weight`` holds (how llama.cpp stores Llama 3.1/3.2's).

    llama.cpp's converter writes ``f_i = 1`` for high frequencies, ``factor`` for low ones and
    ``1 / ((1 - s_i) / factor + s_i)`` between, with ``s_i = (L / wavelen_i - low) / (high -
    low)``; it divides frequency ``i`` by ``f_i``. ``factor`` is the largest ``f_i``; the
    frequencies depend on ``L``, ``low`` and ``high`` only through their ratios, so
    ``low_freq_factor`` is taken as 1 (every Llama 3.x has it) and ``high_freq_factor`` and
    ``original_max_position_embeddings`` are fitted to the medium dims (at least two needed).
    The fit is accepted only when the :class:`~flax_posenc.RopeConfig` it makes divides every
    frequency by ``f_i`` to within 1e-5 (float32 storage); all-ones factors are no scaling.

    Raises:
      CheckpointError: factors that are not ``rotary_dim / 2`` finite numbers >= 1, fewer than two
        medium dims, or factors that no ``llama3`` scaling gives (one line each).
    """
    where = f"{g.path}:{ROPE_FREQS}"
    f = read_tensor(g, ROPE_FREQS).astype(np.float64).reshape(-1)
    head_dim = int(config["head_dim"])
    rotary = int(round(head_dim * config.get("partial_rotary_factor", 1.0)))
    if f.shape[0] != rotary // 2 or not np.isfinite(f).all() or f.min() < 1 - 1e-6:
        raise fail(where, f"{rotary // 2} finite frequency factors >= 1 (rotary_dim / 2)", f"{f.shape[0]} values")
    factor = float(f.max())
    if factor <= 1 + 1e-6:
        return None
    theta = float(config["rope_theta"])
    inv = theta ** (-np.arange(0, rotary, 2, dtype=np.float64) / rotary)
    x = inv / (2 * np.pi)  # 1 / wavelength
    medium = (f > 1 + 1e-5) & (f < factor * (1 - 1e-5))
    not_llama3 = f"factors no llama3 scaling gives ({np.array2string(f[:6], precision=4)}...)"
    if int(medium.sum()) < 2:
        raise fail(where, "llama3 factors with at least two dims between 1 and the largest (to fit them)", not_llama3)
    s = (1 / f[medium] - 1 / factor) / (1 - 1 / factor)  # = (L x - 1) / (high - 1) = a x - b
    design = np.stack([x[medium], -np.ones(int(medium.sum()))], 1)
    if not (np.isfinite(design).all() and np.isfinite(s).all()):  # a rope_theta of 0, inf or nan in the header
        raise fail(where, "llama3 frequency factors under a finite rope_theta", not_llama3)
    try:
        (a, b), *_ = np.linalg.lstsq(design, s, rcond=None)
    except np.linalg.LinAlgError:
        raise fail(where, "llama3 frequency factors", not_llama3) from None
    if not (a > 0 and b > 0 and np.isfinite(a / b)):
        raise fail(where, "llama3 frequency factors", not_llama3)
    params: dict[str, Any] = {
        "rope_type": "llama3",
        "factor": float(f"{factor:.7g}"),
        "low_freq_factor": 1.0,
        "high_freq_factor": float(f"{1 + 1 / b:.6g}"),
        "original_max_position_embeddings": int(round(a / b)),
    }
    try:
        candidate = RopeConfig(
            head_dim=rotary,
            rope_theta=theta,
            **{k: v for k, v in params.items() if k != "rope_type"},
            rope_type="llama3",
        )
        got = rope_inverse_frequencies(candidate)[0]
    except (ValueError, TypeError, ArithmeticError):
        raise fail(where, "llama3 frequency factors", not_llama3) from None
    if not np.allclose(got, inv / f, rtol=1e-5, atol=0):
        raise fail(where, "llama3 frequency factors", not_llama3)
    return params


# ----------------------------------------------------------------------------- learned tables


def read_tensor(g: GGUFFile, name: str) -> np.ndarray:
    """Tensor ``name`` as numpy ``(rows, dim)`` order, read at its scanned offset (only its bytes):
    F16/F32/F64 as stored, any other ggml type dequantized to float32 by ``gguf.quants.dequantize``
    (the same values as ``gguf.GGUFReader``'s tensor, without parsing the metadata).

    Raises:
      CheckpointError: no such tensor (naming the file's split when it is one of several), a
        non-float type, a storage ``gguf`` cannot dequantize.
    """
    import gguf

    found = g.header.tensors.get(name)
    if found is None:
        split = header_value(g.header, "split.count", "int", g.path, required=False)
        hint = f" (this file is one of {split} splits: pass the one holding it)" if split else ""
        near = [t for t in g.header.tensors if "position" in t or "pos" in t][:5]
        raise fail(g.path, f"the tensor {name!r}", f"no such tensor{hint}; position-like tensors: {near or 'none'}")
    ggml_type, shape, offset = found
    kind = gguf.GGMLQuantizationType(ggml_type)
    where = f"{g.path}:{name}"
    block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    rows = shape[:-1]
    row_bytes = shape[-1] // block * block_bytes
    start = g.header.data_start + offset  # inside the file: checked by the scan
    floats = {
        gguf.GGMLQuantizationType.F32: np.float32,
        gguf.GGMLQuantizationType.F16: np.float16,
        gguf.GGMLQuantizationType.F64: np.float64,
    }
    with open(g.path, "rb") as f:
        f.seek(start)
        raw = f.read(int(np.prod(rows, dtype=np.int64)) * row_bytes)
    if len(raw) != int(np.prod(rows, dtype=np.int64)) * row_bytes:
        raise fail(where, f"{row_bytes} bytes per row inside the file", f"{len(raw)} bytes (the file changed?)")
    if kind in floats:
        stored = np.dtype(floats[kind]).newbyteorder(">" if g.header.big_endian else "<")
        return np.frombuffer(raw, stored).astype(floats[kind]).reshape(shape)
    if kind.name.startswith("I"):
        raise fail(where, "a float or quantized float table", f"ggml type {kind.name}")
    try:
        data = np.frombuffer(raw, np.uint8).reshape(*rows, row_bytes)
        return np.asarray(gguf.quants.dequantize(data, kind))
    except Exception as e:
        raise fail(
            where, f"a storage gguf dequantizes ({kind.name})", f"{type(e).__name__}: {one_line(e)[:120]}"
        ) from None


def gguf_position_table(
    source: str | os.PathLike, *, family: str | None = None, key: str | None = None
) -> PositionTable:
    """The learned position table of a GGUF file (GPT-2: ``position_embd.weight``).

    Args:
      source: a ``.gguf`` path.
      family: must be ``None`` or the architecture's model type (``"gpt2"``).
      key: the tensor's GGUF name (default: the architecture's row).

    Returns:
      :class:`~flax_posenc.conversion.PositionTable` with ``weights`` ``(rows, dim)`` (float16/32/64
      as stored; quantized storage dequantized to float32), ``key`` the GGUF tensor name,
      ``offset`` 0, ``config`` the Hugging Face fields of :func:`hf_config`.

    Raises:
      CheckpointError: as :func:`open_gguf`; a RoPE architecture (no table); a family other than
        the file's; a missing tensor; a 1-D/3-D or empty table; NaN/Inf values;
        ``context_length`` other than the table's rows.
    """
    return table_of(open_gguf(source), family=family, key=key)


def table_of(g: GGUFFile, *, family: str | None, key: str | None) -> PositionTable:
    """The learned position table of an opened GPT-2-style GGUF file (one-line CheckpointError otherwise)."""
    row = g.architecture
    if row.kind != "learned":
        raise fail(g.path, "a GGUF architecture with a learned position table (gpt2)", f"{row.arch} (RoPE: no table)")
    if family is not None and family != row.model_type:
        raise fail(g.path, f"family={row.model_type!r} (general.architecture={row.arch!r})", f"family={family!r}")
    config = hf_config(g)
    name = key or str(row.table)
    weights = read_tensor(g, name)
    where = f"{g.path}:{name}"
    if weights.ndim != 2 or 0 in weights.shape:
        raise fail(where, "a non-empty 2-D position table (rows, dim)", f"shape {weights.shape}")
    bad = int(np.count_nonzero(~np.isfinite(weights)))
    if bad:
        raise fail(where, "finite values in the position table", f"{bad} NaN/Inf values")
    if config["n_positions"] != weights.shape[0]:
        raise fail(
            g.path,
            f"{row.arch}.context_length={weights.shape[0]} to match {name} ({weights.shape[0]} rows)",
            f"{row.arch}.context_length={config['n_positions']}",
        )
    return PositionTable(weights=weights, family=row.model_type, key=name, offset=0, source=g.source, config=config)


# ----------------------------------------------------------------------------- one record


__all__ = [
    "GGUF_ARCHITECTURES",
    "GGUF_EXTRA_HINT",
    "GGUF_KEY_OF_FIELD",
    "GGUF_OWN_TENSOR_LAYOUT",
    "GGUFArchitecture",
    "GGUFFile",
    "MAX_METADATA_ITEMS",
    "ScannedHeader",
    "gguf_message",
    "gguf_position_table",
    "header_value",
    "hf_config",
    "import_gguf",
    "table_of",
    "is_gguf_source",
    "llama3_from_rope_freqs",
    "open_gguf",
    "rope_scaling",
    "scan_header",
    "tensors_sentence",
]
