"""From checkpoints to input-block specs: what ``from_pretrained`` and ``flax-posenc convert`` share.

:func:`load_pretrained` turns a SOURCE into the :class:`~flax_posenc.block.InputSpec` of its
``TransformerInput`` and its parameters (a nested dict of numpy arrays, named as in
:mod:`flax_posenc.block`); both shells' ``from_pretrained`` go through it. A SOURCE is a Hugging
Face checkpoint (see :mod:`flax_posenc.conversion`) or a ``.msgpack`` file written by
:func:`save_converted` (``flax-posenc convert``): Flax's own serialization of ::

    {"format": "flax-posenc/input-spec", "version": 2, "spec": InputSpec.to_dict(), "params": params}

Files of version 1 (written before the spec was stored: ``{"config": flat constructor
arguments, "params": params}``, no ``format`` or ``version``) still load. An ``on_overflow`` such
files hold (older writers kept the run-time policy in the spec) is ignored: the policy is the
loading module's ``on_overflow`` argument (default ``"error"``).

Example::

    import flax_posenc as fp
    spec, params = load_pretrained("path/to/bert")
    block = fp.linen.TransformerInput(spec)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from flax_posenc.block import InputSpec, PositionSpec
from flax_posenc.errors import CheckpointError

CONVERTED_SUFFIX = ".msgpack"
#: the ``format`` field of a converted file, the version written, and the versions read.
CONVERTED_FORMAT = "flax-posenc/input-spec"
CONVERTED_VERSION = 2
READABLE_VERSIONS = (1, 2)


def spec_from_weights(weights) -> tuple[InputSpec, dict[str, Any]]:
    """The :class:`~flax_posenc.block.InputSpec` and nested parameters of an ``InputBlockWeights``.

    Raises:
      ValueError: the position table and the word embeddings differ in width.
    """
    table = weights.position
    words = weights.word_embeddings
    if table.dim != words.shape[1]:
        raise ValueError(
            f"{table.source}: position table {table.key} has dim {table.dim}, but the word "
            f"embeddings have dim {words.shape[1]}"
        )
    types = weights.token_type_embeddings
    position = PositionSpec(
        "learned",
        int(words.shape[1]),
        int(table.num_positions),
        offset=int(table.offset),
        name=f"{table.family} position table ({table.key})",
    )
    spec = InputSpec(
        int(words.shape[0]),
        position,
        positions_from=weights.positions_from,
        pad_token_id=None if weights.pad_token_id is None else int(weights.pad_token_id),
        embed_scale=float(weights.embed_scale),
        type_vocab_size=0 if types is None else int(types.shape[0]),
        layer_norm=weights.layer_norm_scale is not None,
        layer_norm_eps=float(weights.layer_norm_eps),
    )
    params: dict[str, Any] = {"word_embeddings": words, "position_embeddings": table.weights}
    if types is not None:
        params["token_type_embeddings"] = types
    if weights.layer_norm_scale is not None:
        params["layer_norm"] = {"scale": weights.layer_norm_scale, "bias": weights.layer_norm_bias}
    return spec, params


def _is_converted(source) -> bool:
    return isinstance(source, (str, os.PathLike)) and str(source).endswith(CONVERTED_SUFFIX)


#: parameters every converted file holds, and those it may hold.
_REQUIRED_PARAMS = ("word_embeddings", "position_embeddings")
_OPTIONAL_PARAMS = ("token_type_embeddings", "layer_norm")


def _check_converted(path: Path, spec: InputSpec, params: Any) -> None:
    """Refuse a converted file with missing/extra parameters, wrong shapes or NaN/Inf values."""

    def bad(expected: str, found: str) -> CheckpointError:
        return CheckpointError(f"{path}: expected {expected}, found {found}")

    if not isinstance(params, dict):
        raise bad("a params dict", type(params).__name__)
    missing = [k for k in _REQUIRED_PARAMS if k not in params]
    extra = sorted(set(params) - set(_REQUIRED_PARAMS) - set(_OPTIONAL_PARAMS))
    if missing or extra:
        raise bad(
            f"params {list(_REQUIRED_PARAMS)} (+ {list(_OPTIONAL_PARAMS)})", f"missing {missing}, unknown {extra}"
        )
    leaves = {k: v for k, v in params.items() if k != "layer_norm"}
    if "layer_norm" in params:
        ln = params["layer_norm"]
        if not isinstance(ln, dict) or set(ln) != {"scale", "bias"}:
            raise bad("layer_norm {scale, bias}", repr(list(ln) if isinstance(ln, dict) else type(ln).__name__))
        leaves.update({f"layer_norm.{k}": v for k, v in ln.items()})
    for name, value in leaves.items():
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            raise bad(
                f"{name} as a float array",
                type(value).__name__ if not isinstance(value, np.ndarray) else str(value.dtype),
            )
        want = 1 if name.startswith("layer_norm.") else 2
        if value.ndim != want or value.size == 0:
            raise bad(f"{name} as a non-empty {want}-D array", f"shape {value.shape}")
        if not np.isfinite(value).all():
            raise bad(f"finite values in {name}", f"{int((~np.isfinite(value)).sum())} NaN/Inf values")
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


def _spec_of(path: Path, blob: dict) -> InputSpec:
    """The spec stored in a converted file's ``blob``, by version (see this module's docstring)."""
    version = blob.get("version", 1)  # version 1 files carry no version field
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"{path}: expected a flax-posenc msgpack of version {' or '.join(map(str, READABLE_VERSIONS))}, "
            f"found version {version!r}"
        )
    field = "config" if version == 1 else "spec"
    if version == 2 and blob.get("format") != CONVERTED_FORMAT:
        raise CheckpointError(f"{path}: expected format {CONVERTED_FORMAT!r}, found {blob.get('format')!r}")
    stored = blob.get(field)
    if not isinstance(stored, dict):
        raise CheckpointError(f"{path}: expected a {field!r} dict (version {version}), found {type(stored).__name__}")
    try:  # version 1 stored the flat constructor arguments; InputSpec is the one place that reads them
        if version == 1:  # its on_overflow, a run-time policy, is ignored (as version 2's, in from_dict)
            return InputSpec.from_arguments(**{k: v for k, v in stored.items() if k != "on_overflow"})
        return InputSpec.from_dict(stored)
    except (TypeError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(
            f"{path}: expected a valid {field!r} (version {version}), found {message}"[:300]
        ) from None


def _load_converted(path: Path) -> tuple[InputSpec, dict[str, Any]]:
    from flax import serialization

    from flax_posenc.conversion.safety import regular_file

    regular_file(path, what="a file written by 'flax-posenc convert'")
    try:
        blob = serialization.msgpack_restore(path.read_bytes())
        params = blob["params"]
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CheckpointError(
            f"{path}: expected a flax-posenc msgpack with 'params' and a 'spec' (or, version 1, 'config'), "
            f"found unreadable data ({type(exc).__name__})"
        ) from None
    spec = _spec_of(path, blob)
    _check_converted(path, spec, params)
    return spec, params


def position_table_of(spec: InputSpec, params: dict[str, Any], source: str | os.PathLike):
    """The learned position table of a converted block ``(spec, params)`` (what ``inspect``/``check`` read).

    The family and key come from the stored table name (``"bert position table
    (embeddings.position_embeddings.weight)"``).

    Raises:
      CheckpointError: the spec has no learned table (naming ``source``).
    """
    import re

    from flax_posenc.conversion.table import PositionTable

    if spec.position.kind != "learned" or "position_embeddings" not in params:
        raise CheckpointError(
            f"{source}: expected an input block with a learned position table, found {spec.position.kind!r} positions"
        )
    match = re.fullmatch(r"(\S+) position table \((.+)\)", spec.position.name)
    family, key = match.groups() if match else ("converted", "position_embeddings")
    return PositionTable(
        np.asarray(params["position_embeddings"]),
        family=family,
        key=key,
        offset=spec.position.offset,
        source=str(source),
        config=spec.to_dict(),
    )


def converted_position_table(path: str | os.PathLike):
    """The position table inside what ``flax-posenc convert`` writes (``inspect``/``check`` read it).

    Reads every ``.msgpack`` version :func:`load_pretrained` reads, and orbax checkpoint
    directories (:mod:`flax_posenc.orbax_io`); reading it imports flax.

    Raises:
      CheckpointError: not a valid converted file or directory (one line naming it).
    """
    from flax_posenc.orbax_io import is_orbax_checkpoint, load_orbax

    spec, params = load_orbax(path) if is_orbax_checkpoint(path) else _load_converted(Path(path))
    return position_table_of(spec, params, path)


def load_pretrained(source, *, family: str | None = None, mesh=None, rules=None) -> tuple[InputSpec, dict[str, Any]]:
    """``(spec, params)`` of SOURCE's input block: a checkpoint, a converted ``.msgpack`` or an orbax directory.

    ``TransformerInput(spec)`` (NNX with ``rngs``, or Linen) holding ``params`` reproduces the
    checkpoint's embedding output; both shells' ``from_pretrained`` call this.

    With ``mesh`` (a ``jax.sharding.Mesh``) and ``rules`` (logical-to-mesh axis rules, see
    ``docs/sharding.md``) the parameters come back as ``jax.Array`` sharded by their logical axis
    names: an orbax checkpoint (:func:`~flax_posenc.orbax_io.load_orbax`) is restored directly
    onto the mesh, any other SOURCE is read on the host and placed with ``jax.device_put``.

    Raises:
      CheckpointError: SOURCE cannot be read (one line naming it, expected and found).
    """
    from flax_posenc.orbax_io import is_orbax_checkpoint, load_orbax, param_shardings

    if is_orbax_checkpoint(source):
        return load_orbax(source, mesh=mesh, rules=rules)
    if _is_converted(source):
        spec, params = _load_converted(Path(source))
    else:
        from flax_posenc.conversion import load_input_block

        spec, params = spec_from_weights(load_input_block(source, family=family))
    if mesh is not None:
        import jax

        params = jax.device_put(params, param_shardings(spec, mesh, rules))
    return spec, params


#: what ``save_converted`` (``flax-posenc convert --format``) writes.
CONVERTED_FORMATS = ("msgpack", "orbax")


def save_converted(
    source, out, *, family: str | None = None, overwrite: bool = False, format: str = "msgpack", progress=None
) -> Path:
    """Write the spec and Flax parameters of SOURCE's input block to ``out`` (``.msgpack``, version 2).

    ``format="orbax"`` writes an orbax checkpoint directory instead (any name; see
    :func:`flax_posenc.orbax_io.save_orbax`, which this calls). ``progress``: a
    :class:`~flax_posenc.progress.Progress` shown the two steps, reading and writing.

    Atomic and exclusive: written to a temporary file beside ``out`` and linked into place only if
    nothing is there (``os.link``; with ``overwrite``, renamed over it); SIGTERM/SIGINT remove the
    temporary file. Refuses an existing ``out`` unless ``overwrite``, and a directory always.
    Raises only CheckpointError (naming the file) for what cannot be read or written. Restore with ``TransformerInput.from_pretrained(out)`` (NNX or Linen)
    or ``flax.serialization.msgpack_restore``.
    """
    from flax_posenc.progress import Progress

    bar = progress if progress is not None else Progress(2, enabled=False)
    out = Path(out)
    if format not in CONVERTED_FORMATS:
        raise ValueError(f"format: expected one of {', '.join(CONVERTED_FORMATS)}, got {format!r}")
    if format == "orbax":
        from flax_posenc.orbax_io import save_orbax

        if os.path.lexists(out) and not overwrite:
            raise CheckpointError(
                f"{out}: expected a new path, found an existing one (pass overwrite=True / --overwrite)"
            )
        if not out.absolute().parent.is_dir():
            raise CheckpointError(f"{out}: expected an existing parent directory, found none at {out.parent}")
        spec, params = bar.run("reading", lambda: load_pretrained(source, family=family))
        return bar.run("writing (orbax)", lambda: save_orbax(out, spec, params, overwrite=overwrite))
    if out.suffix != CONVERTED_SUFFIX:
        raise CheckpointError(
            f"{out}: expected an output file name ending in {CONVERTED_SUFFIX}, found {out.suffix or 'no suffix'!r}"
        )
    if out.exists() and not overwrite:
        raise CheckpointError(f"{out}: expected a new path, found an existing file (pass overwrite=True / --overwrite)")
    if not out.parent.is_dir():
        raise CheckpointError(f"{out}: expected an existing parent directory, found none at {out.parent}")
    if os.path.isdir(out):
        raise CheckpointError(f"{out}: expected a file path for the converted parameters, found a directory")
    spec, params = bar.run("reading", lambda: load_pretrained(source, family=family))
    return bar.run("writing", lambda: _write_msgpack(out, spec, params, overwrite=overwrite))


def _write_msgpack(out: Path, spec: InputSpec, params: dict[str, Any], *, overwrite: bool) -> Path:
    """The version-2 ``.msgpack`` of ``(spec, params)`` at ``out``, atomically (see :func:`save_converted`)."""
    from flax import serialization

    from flax_posenc.conversion.atomic import cleanup_on_signal, publish_file

    blob = serialization.msgpack_serialize(
        {
            "format": CONVERTED_FORMAT,
            "version": CONVERTED_VERSION,
            "spec": spec.to_dict(),
            "params": _numpy_tree(params),
        }
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
        raise CheckpointError(
            f"{out}: expected a writable output file, found {type(e).__name__}: {e.strerror or e}"
        ) from None
    return out


def _numpy_tree(params):
    if isinstance(params, dict):
        return {k: _numpy_tree(v) for k, v in params.items()}
    return np.asarray(params)


__all__ = [
    "CONVERTED_FORMAT",
    "CONVERTED_FORMATS",
    "CONVERTED_VERSION",
    "READABLE_VERSIONS",
    "converted_position_table",
    "load_pretrained",
    "position_table_of",
    "save_converted",
    "spec_from_weights",
]
