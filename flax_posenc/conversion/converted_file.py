"""The file ``flax-posenc convert`` writes: an input block's spec and parameters (numpy only).

Version 3 (written to a ``.safetensors`` name) is a safetensors file. Its tensors are the
block's parameters under flat names (:data:`PARAM_NAMES`; the nested ``layer_norm`` dict is
joined with ``/``)::

    word_embeddings          (vocab_size, dim)
    position_embeddings      (offset + num_positions, dim)
    token_type_embeddings    (type_vocab_size, dim)     [if any]
    layer_norm/scale         (dim,)                     [if any]
    layer_norm/bias          (dim,)                     [if any]

and its safetensors metadata (string to string) holds::

    format   "flax-posenc/input-spec"
    version  "3"
    spec     JSON of InputSpec.to_dict()
    origin   JSON {"family": ..., "key": ..., "source": ...}: where the position table came from
             (the family, the tensor's name in the checkpoint, the SOURCE converted); optional

Any safetensors reader opens it (``safetensors.numpy.load_file``), and reading it needs neither
flax nor jax.

Versions 1 and 2 (``.msgpack``, Flax's ``flax.serialization`` encoding) still load, decoded here
with ``msgpack`` alone: version 2 is ``{"format", "version": 2, "spec": InputSpec.to_dict(),
"params": nested params}``; version 1 (no ``format`` or ``version``) is ``{"config": flat
constructor arguments, "params": ...}``. They store no origin: the family and key are read back
from the table's name (``"bert position table (embeddings.position_embeddings.weight)"``), for
those versions only. A ``.msgpack`` output name still gets version 2 (:func:`write_converted`).
An ``on_overflow`` older files hold is ignored (the policy is the loading module's).

Every file read is checked (:func:`read_converted`): the parameters named and shaped as the spec
says, float and finite; anything else is one :class:`~flax_posenc.errors.CheckpointError` line
naming the file, what was expected and what was found.

>>> import tempfile, pathlib
>>> from flax_posenc.spec import InputSpec, PositionSpec
>>> spec = InputSpec(3, PositionSpec(dim=2, num_positions=4))
>>> params = {"word_embeddings": np.zeros((3, 2), np.float32), "position_embeddings": np.ones((4, 2), np.float32)}
>>> out = write_converted(pathlib.Path(tempfile.mkdtemp()) / "block.safetensors", spec, params)
>>> back = read_converted(out)
>>> back.version, back.spec == spec, back.params["position_embeddings"].shape
(3, True, (4, 2))
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import numpy as np
from safetensors.numpy import save as safetensors_bytes

from flax_posenc.conversion.atomic import cleanup_on_signal, publish_file
from flax_posenc.conversion.readers import SafetensorsReader, read_safetensors_header
from flax_posenc.conversion.safety import kind_of_output, parse_json, regular_file
from flax_posenc.conversion.table import PositionTable
from flax_posenc.errors import CheckpointError, one_line, shown
from flax_posenc.spec import InputSpec

__all__ = [
    "FORMAT",
    "MSGPACK_SUFFIX",
    "PARAM_NAMES",
    "READABLE_VERSIONS",
    "SUFFIX",
    "VERSION",
    "Converted",
    "Origin",
    "flat_params",
    "is_converted_file",
    "is_own_converted_file",
    "nested_params",
    "origin_from_name",
    "position_table",
    "read_converted",
    "write_converted",
]

#: the ``format`` field of a converted file, the version written, and the versions read.
FORMAT = "flax-posenc/input-spec"
VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
#: the output name of version 3 (safetensors), and of versions 1-2 (msgpack; still written on request).
SUFFIX = ".safetensors"
MSGPACK_SUFFIX = ".msgpack"
#: the flat parameter names of version 3, required first.
PARAM_NAMES = ("word_embeddings", "position_embeddings", "token_type_embeddings", "layer_norm/scale", "layer_norm/bias")
_REQUIRED = PARAM_NAMES[:2]
_MSGPACK_VERSIONS = (1, 2)
#: Flax's msgpack extension codes (flax.serialization._MsgpackExtType) and its chunk size.
_EXT_NDARRAY, _EXT_COMPLEX, _EXT_SCALAR = 1, 2, 3
_MAX_CHUNK_BYTES = 2**30
_FLOAT_NAMES = ("float16", "float32", "float64", "bfloat16")


class Origin(NamedTuple):
    """Where a converted position table came from: its family, its tensor's name, the SOURCE."""

    family: str
    key: str
    source: str | None = None


class Converted(NamedTuple):
    """What :func:`read_converted` returns: the spec, the nested numpy parameters, the table's
    origin (``None`` when the file does not say) and the file's version."""

    spec: InputSpec
    params: dict[str, Any]
    origin: Origin | None
    version: int


def _fail(path: object, expected: str, found: str) -> CheckpointError:
    return CheckpointError(one_line(f"{path}: expected {expected}, found {found}", 400))


def flat_params(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Nested parameters -> ``{"layer_norm/scale": ..., ...}`` (numpy arrays), the file's names.

    >>> sorted(flat_params({"word_embeddings": np.zeros((2, 1)), "layer_norm": {"scale": np.ones(1)}}))
    ['layer_norm/scale', 'word_embeddings']
    """
    out: dict[str, np.ndarray] = {}
    for name, value in params.items():
        if isinstance(value, Mapping):
            out.update({f"{name}/{k}": np.asarray(v) for k, v in value.items()})
        else:
            out[name] = np.asarray(value)
    return out


def nested_params(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flat_params`.

    >>> nested_params({"layer_norm/scale": 1, "word_embeddings": 2})
    {'layer_norm': {'scale': 1}, 'word_embeddings': 2}
    """
    out: dict[str, Any] = {}
    for name, value in flat.items():
        outer, _, inner = name.partition("/")
        if inner:
            out.setdefault(outer, {})[inner] = value
        else:
            out[name] = value
    return out


def is_converted_file(source: object) -> bool:
    """Whether SOURCE names a converted file: a ``.msgpack`` name, or a ``.safetensors`` file whose
    metadata says ``format: flax-posenc/input-spec`` (a checkpoint's ``model.safetensors`` is not)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    text = os.fspath(source)
    if isinstance(text, bytes):
        return False
    if text.endswith(MSGPACK_SUFFIX):
        return True
    if not text.endswith(SUFFIX) or not os.path.isfile(text):
        return False
    try:
        header, _ = read_safetensors_header(Path(text))
    except CheckpointError:
        return False  # not readable as safetensors at all: the checkpoint readers say why
    meta = header.get("__metadata__")
    return isinstance(meta, dict) and meta.get("format") == FORMAT


#: bytes of a ``.msgpack``'s first keys buffered when recognising one (its values are skipped).
_SNIFF_BYTES = 1 << 20


def _msgpack_is_ours(path: Path) -> bool:
    """Whether a ``.msgpack`` starts as a converted file does (version 2: ``format`` first; version 1:
    only ``config`` and ``params``), reading its first keys only (values skipped, memory bounded)."""
    try:
        with open(path, "rb") as f:
            unpacker = msgpack.Unpacker(f, raw=False, max_buffer_size=_SNIFF_BYTES, strict_map_key=False)
            keys = set()
            for _ in range(min(unpacker.read_map_header(), 8)):
                key = unpacker.unpack()
                if key == "format":
                    return unpacker.unpack() == FORMAT
                keys.add(key)
                unpacker.skip()
            return keys == {"config", "params"}
    except Exception:  # garbage, a value too large to skip within the bound: not recognised
        return False


def is_own_converted_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file (not a link) that flax-posenc wrote as a converted file:
    what ``overwrite`` may replace (:mod:`~flax_posenc.conversion.outputs`)."""
    path = Path(path)
    if os.path.islink(path) or not path.is_file():
        return False
    if path.name.endswith(MSGPACK_SUFFIX):
        return _msgpack_is_ours(path)
    return is_converted_file(str(path))


# ----------------------------------------------------------------------------- reading


def read_converted(path: str | os.PathLike) -> Converted:
    """The spec, parameters and origin stored in a converted file of any version (see the module docstring).

    Raises:
      CheckpointError: not a regular file, unreadable, an unknown format or version, a spec that
        is not valid, or parameters that do not match it (one line naming the file).
    """
    path = Path(path)
    regular_file(path, what="a file written by 'flax-posenc convert'")
    if path.name.endswith(MSGPACK_SUFFIX):
        converted = _read_msgpack(path)
    else:
        converted = _read_safetensors(path)
    _check_params(path, converted.spec, converted.params)
    return converted


def _spec(path: Path, stored: object, field: str, version: int) -> InputSpec:
    if not isinstance(stored, dict):
        raise _fail(path, f"a {field!r} dict (version {version})", type(stored).__name__)
    try:  # version 1 stored the flat constructor arguments; InputSpec is the one place that reads them
        if version == 1:  # its on_overflow, a run-time policy, is ignored (as later versions', in from_dict)
            return file_spec(InputSpec.from_arguments(**{k: v for k, v in stored.items() if k != "on_overflow"}))
        return file_spec(InputSpec.from_dict(stored))
    except (TypeError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _fail(path, f"a valid {field!r} (version {version})", message) from None


def _read_safetensors(path: Path) -> Converted:
    header, _ = read_safetensors_header(path)
    meta = header.get("__metadata__") or {}
    if meta.get("format") != FORMAT:
        raise _fail(path, f"a safetensors file with metadata format {FORMAT!r}", f"format {meta.get('format')!r}")
    if meta.get("version") != str(VERSION):
        raise _fail(
            path,
            f"a flax-posenc safetensors file of version {VERSION} (versions 1-2 are .msgpack)",
            f"version {meta.get('version')!r}",
        )
    where = f"{path} (metadata)"
    spec = _spec(path, parse_json(meta.get("spec", "null"), where=where, what="the 'spec' JSON"), "spec", VERSION)
    origin = None
    if "origin" in meta:
        stored = parse_json(meta["origin"], where=where, what="the 'origin' JSON")
        fields = ("family", "key", "source")
        if (
            not isinstance(stored, dict)
            or set(stored) != set(fields)
            or not all(isinstance(stored[k], str) for k in fields[:2])
            or not isinstance(stored["source"], (str, type(None)))
        ):
            raise _fail(path, 'an origin {"family": str, "key": str, "source": str or null}', str(stored)[:120])
        origin = file_origin(stored["family"], stored["key"], stored["source"])
    reader = SafetensorsReader(path)
    unknown = sorted(set(reader.keys()) - set(PARAM_NAMES))
    if unknown:
        raise _fail(path, f"tensors among {list(PARAM_NAMES)}", f"unknown {unknown}"[:200])
    import ml_dtypes  # 0.7 s on first import: only when a file is read, not at import time

    flat = {}
    for name in reader.keys():
        raw = reader.read_raw(name)  # bfloat16 as its bits: kept bfloat16, not upcast
        flat[name] = raw.view(ml_dtypes.bfloat16) if reader.info(name)[0] == "BF16" else raw
    return Converted(spec, nested_params(flat), origin, VERSION)


def _ndarray(data: bytes) -> np.ndarray:
    """One array of Flax's msgpack encoding: ``packb((shape, dtype name, C-order bytes))``."""
    shape, name, buffer = msgpack.unpackb(data, raw=True)
    name = name.decode() if isinstance(name, bytes) else name
    import ml_dtypes  # only when a file is read

    dtype = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    if dtype.hasobject:
        raise ValueError(f"an object dtype {name!r}")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _ext_hook(code: int, data: bytes):
    if code == _EXT_NDARRAY:
        return _ndarray(data)
    if code == _EXT_SCALAR:
        return _ndarray(data)[()]
    if code == _EXT_COMPLEX:
        real, imag = msgpack.unpackb(data)
        return complex(real, imag)
    return msgpack.ExtType(code, data)


def _unchunk(tree):
    """Flax splits arrays over 1 GiB into ``{"__msgpack_chunked_array__", "shape", "chunks"}``."""
    if not isinstance(tree, dict):
        return tree
    if "__msgpack_chunked_array__" in tree:
        shape = tuple(tree["shape"][str(i)] for i in range(len(tree["shape"])))
        chunks = [tree["chunks"][str(i)] for i in range(len(tree["chunks"]))]
        return np.concatenate(chunks).reshape(shape)
    return {k: _unchunk(v) for k, v in tree.items()}


def _read_msgpack(path: Path) -> Converted:
    try:
        blob = _unchunk(msgpack.unpackb(path.read_bytes(), ext_hook=_ext_hook, raw=False, strict_map_key=False))
        params = blob["params"]
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise _fail(
            path,
            "a flax-posenc msgpack with 'params' and a 'spec' (or, version 1, 'config')",
            f"unreadable data ({type(exc).__name__})",
        ) from None
    version = blob.get("version", 1)  # version 1 files carry no version field
    if isinstance(version, bool) or version not in _MSGPACK_VERSIONS:
        raise _fail(path, "a flax-posenc msgpack of version 1 or 2", f"version {version!r}")
    if version == 2 and blob.get("format") != FORMAT:
        raise _fail(path, f"format {FORMAT!r}", repr(blob.get("format")))
    field = "config" if version == 1 else "spec"
    spec = _spec(path, blob.get(field), field, version)
    return Converted(spec, params, origin_from_name(spec.position.name), version)


def file_origin(family: str, key: str, source: str | None) -> Origin:
    """An :class:`Origin` read from a file, its strings through :func:`~flax_posenc.errors.shown`
    (escape codes and newlines escaped, length capped): they reach ``check``'s and ``inspect``'s lines.

    >>> print(file_origin("bert", "k" + chr(10) + "ok: 1000000 positions fit", None).key)
    k\\nok: 1000000 positions fit
    """
    return Origin(shown(family), shown(key), None if source is None else shown(source, 1000))


def file_spec(spec: InputSpec) -> InputSpec:
    """A spec read from a file, its table's ``name`` (which every limit message shows) through
    :func:`~flax_posenc.errors.shown`."""
    name = spec.position.name
    if name is None or shown(name) == name:
        return spec
    return dataclasses.replace(spec, position=dataclasses.replace(spec.position, name=shown(name)))


def origin_from_name(name: str) -> Origin | None:
    """Files that store no origin only (versions 1-2, orbax directories): the family and key in
    ``"bert position table (key)"``, the name the converter gave the table; version 3 stores them.

    >>> origin_from_name("bert position table (embeddings.position_embeddings.weight)")
    Origin(family='bert', key='embeddings.position_embeddings.weight', source=None)
    """
    match = re.fullmatch(r"(\S+) position table \((.+)\)", name)
    return Origin(*match.groups()) if match else None


def _check_params(path: Path, spec: InputSpec, params: Any) -> None:
    """Refuse missing/extra parameters, wrong shapes, non-float or NaN/Inf values."""

    def bad(expected: str, found: str) -> CheckpointError:
        return _fail(path, expected, found)

    if not isinstance(params, dict):
        raise bad("a params dict", type(params).__name__)
    optional = ("token_type_embeddings", "layer_norm")
    missing = [k for k in _REQUIRED if k not in params]
    extra = sorted(set(params) - set(_REQUIRED) - set(optional))
    if missing or extra:
        raise bad(f"params {list(_REQUIRED)} (+ {list(optional)})", f"missing {missing}, unknown {extra}")
    leaves = {k: v for k, v in params.items() if k != "layer_norm"}
    if "layer_norm" in params:
        ln = params["layer_norm"]
        if not isinstance(ln, dict) or set(ln) != {"scale", "bias"}:
            raise bad("layer_norm {scale, bias}", repr(list(ln) if isinstance(ln, dict) else type(ln).__name__))
        leaves.update({f"layer_norm.{k}": v for k, v in ln.items()})
    for name, value in leaves.items():
        if not isinstance(value, np.ndarray) or value.dtype.name not in _FLOAT_NAMES:
            raise bad(
                f"{name} as a float array",
                type(value).__name__ if not isinstance(value, np.ndarray) else str(value.dtype),
            )
        want = 1 if name.startswith("layer_norm.") else 2
        if value.ndim != want or value.size == 0:
            raise bad(f"{name} as a non-empty {want}-D array", f"shape {value.shape}")
        finite = np.isfinite(value if value.dtype.kind == "f" else value.astype(np.float32))  # bfloat16: exact
        if not finite.all():
            raise bad(f"finite values in {name}", f"{int((~finite).sum())} NaN/Inf values")
    dim = params["word_embeddings"].shape[1]
    if any(v.shape[-1] != dim for v in leaves.values()):
        raise bad(f"every parameter of width {dim}", str({k: v.shape for k, v in leaves.items()}))
    expected = spec.param_shapes() if spec.position.kind == "learned" else None
    found = {k: {n: w.shape for n, w in v.items()} if isinstance(v, dict) else v.shape for k, v in params.items()}
    if expected != found:
        raise bad(
            f"a spec that matches the parameters (a learned table; parameter shapes {expected})",
            f"parameter shapes {found}"[:300],
        )


def position_table(
    spec: InputSpec, params: Mapping[str, Any], path: str | os.PathLike, origin: Origin | None = None
) -> PositionTable:
    """The learned position table of a converted block (what ``inspect``/``check`` read).

    Its family and key are ``origin``'s (``"converted"``, ``"position_embeddings"`` without
    one); its ``source`` is ``path``.

    Raises:
      CheckpointError: the spec has no learned table (naming ``path``).
    """
    if spec.position.kind != "learned" or "position_embeddings" not in params:
        raise CheckpointError(
            f"{path}: expected an input block with a learned position table, found {spec.position.kind!r} positions"
        )
    family, key = (origin.family, origin.key) if origin is not None else ("converted", "position_embeddings")
    return PositionTable(
        np.asarray(params["position_embeddings"]),
        family=family,
        key=key,
        offset=spec.position.offset,
        source=os.fspath(path),
        config=spec.to_dict(),
    )


# ----------------------------------------------------------------------------- writing


def _safetensors_blob(spec: InputSpec, params: Mapping[str, Any], origin: Origin | None) -> bytes:
    metadata = {"format": FORMAT, "version": str(VERSION), "spec": json.dumps(spec.to_dict(), sort_keys=True)}
    if origin is not None:
        metadata["origin"] = json.dumps(origin._asdict(), sort_keys=True)
    tensors = {k: np.ascontiguousarray(v) for k, v in flat_params(params).items()}
    return safetensors_bytes(tensors, metadata=metadata)


def _pack_array(value: np.ndarray) -> msgpack.ExtType:
    data = msgpack.packb((value.shape, value.dtype.name, value.tobytes("C")), use_bin_type=True)
    return msgpack.ExtType(_EXT_NDARRAY, data)


def _chunked(tree):
    """Arrays over 1 GiB split as Flax splits them (msgpack's 2 GiB limit per object), and every
    mapping's keys sorted (Flax's writer copies the tree with ``jax.tree.map``, which sorts them)."""
    if isinstance(tree, Mapping):
        return {k: _chunked(tree[k]) for k in sorted(tree)}
    if tree is None or isinstance(tree, (str, bool, int, float)):
        return tree
    value = np.asarray(tree)
    if value.nbytes <= _MAX_CHUNK_BYTES:
        return value
    size = max(1, _MAX_CHUNK_BYTES // value.dtype.itemsize)
    flat = value.reshape(-1)
    chunks = [flat[i : i + size] for i in range(0, flat.size, size)]
    return {
        "__msgpack_chunked_array__": True,
        "shape": {str(i): n for i, n in enumerate(value.shape)},
        "chunks": {str(i): c for i, c in enumerate(chunks)},
    }


def _msgpack_blob(spec: InputSpec, params: Mapping[str, Any]) -> bytes:
    """Version 2, byte for byte what ``flax.serialization.msgpack_serialize`` writes."""
    blob = _chunked({"format": FORMAT, "version": 2, "spec": spec.to_dict(), "params": params})

    def default(value):
        if isinstance(value, np.ndarray):
            return _pack_array(value)
        raise TypeError(f"cannot serialize {type(value).__name__}")

    return msgpack.packb(blob, default=default, strict_types=True)


def write_converted(
    out: str | os.PathLike,
    spec: InputSpec,
    params: Mapping[str, Any],
    *,
    origin: Origin | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``(spec, params)`` to ``out``: version 3 for a ``.safetensors`` name, version 2 for ``.msgpack``.

    Atomic and exclusive: written to a temporary file beside ``out`` and linked into place only
    if nothing is there (with ``overwrite``, renamed over it, and only over a converted file:
    :func:`~flax_posenc.conversion.outputs.check_output`); SIGTERM/SIGINT remove the
    temporary file (:mod:`~flax_posenc.conversion.atomic`). Nothing half-written is ever at ``out``.

    Raises:
      CheckpointError: another suffix, or ``out`` cannot be written (one line naming it).
    """
    out = Path(out)
    if out.name.endswith(SUFFIX):
        blob = _safetensors_blob(spec, params, origin)
    elif out.name.endswith(MSGPACK_SUFFIX):
        blob = _msgpack_blob(spec, params)
    else:
        raise _fail(out, f"an output file name ending in {SUFFIX} or {MSGPACK_SUFFIX}", repr(out.suffix or "no suffix"))
    if overwrite and os.path.lexists(out) and not is_own_converted_file(out):  # the overwrite rule (outputs.py)
        raise _fail(
            out, "a converted file written by flax-posenc to overwrite", f"{kind_of_output(out)} (left untouched)"
        )
    tmp: str | None = None
    try:
        with cleanup_on_signal():
            try:
                fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is not what a user expects
                publish_file(Path(tmp), out, overwrite=overwrite)
            finally:
                if tmp is not None:
                    Path(tmp).unlink(missing_ok=True)
    except OSError as e:
        raise _fail(out, "a writable output file", f"{type(e).__name__}: {e.strerror or e}") from None
    return out
