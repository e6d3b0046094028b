"""From checkpoints to module arguments: what ``from_pretrained`` and ``flax-posenc convert`` share.

:func:`module_arguments` turns a SOURCE into ``TransformerInput`` constructor arguments and its
parameters (a nested dict of numpy arrays, named as in :mod:`flax_posenc.block`). A SOURCE is a
Hugging Face checkpoint (see :mod:`flax_posenc.conversion`) or a ``.msgpack`` file written by
:func:`save_converted` (``flax-posenc convert``): Flax's own serialization of
``{"config": kwargs, "params": params}``.

Example::

    import flax_posenc as fp
    kwargs, params = module_arguments("path/to/bert")
    block = fp.linen.TransformerInput(**kwargs)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from flax_posenc.errors import CheckpointError

CONVERTED_SUFFIX = ".msgpack"


def arguments_from_weights(weights) -> tuple[dict[str, Any], dict[str, Any]]:
    """Constructor arguments and nested parameters for an ``InputBlockWeights``.

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
    kwargs = dict(
        vocab_size=int(words.shape[0]),
        dim=int(words.shape[1]),
        num_positions=int(table.max_length),
        position="learned",
        position_offset=int(table.offset),
        positions_from=weights.positions_from,
        pad_token_id=None if weights.pad_token_id is None else int(weights.pad_token_id),
        embed_scale=float(weights.embed_scale),
        type_vocab_size=0 if types is None else int(types.shape[0]),
        layer_norm=weights.layer_norm_scale is not None,
        layer_norm_eps=float(weights.layer_norm_eps),
        position_name=f"{table.family} position table ({table.key})",
    )
    params: dict[str, Any] = {"word_embeddings": words, "position_embeddings": table.weights}
    if types is not None:
        params["token_type_embeddings"] = types
    if weights.layer_norm_scale is not None:
        params["layer_norm"] = {"scale": weights.layer_norm_scale, "bias": weights.layer_norm_bias}
    return kwargs, params


def _is_converted(source) -> bool:
    return isinstance(source, (str, os.PathLike)) and str(source).endswith(CONVERTED_SUFFIX)


#: parameters every converted file holds, and those it may hold.
_REQUIRED_PARAMS = ("word_embeddings", "position_embeddings")
_OPTIONAL_PARAMS = ("token_type_embeddings", "layer_norm")


def _check_converted(path: Path, kwargs: dict[str, Any], params: Any) -> None:
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
    for key in ("vocab_size", "dim", "num_positions"):
        if not isinstance(kwargs.get(key), int) or isinstance(kwargs.get(key), bool) or kwargs[key] < 1:
            raise bad(f"config {key} as a positive integer", repr(kwargs.get(key))[:80])
    rows = params["position_embeddings"].shape[0]
    if (
        kwargs["dim"] != dim
        or kwargs["vocab_size"] != params["word_embeddings"].shape[0]
        or kwargs["num_positions"] + int(kwargs.get("position_offset") or 0) != rows
    ):
        raise bad("config sizes that match the parameters", f"config {kwargs!r}"[:200])


def _load_converted(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from flax import serialization

    from flax_posenc.conversion.safety import regular_file

    regular_file(path, what="a file written by 'flax-posenc convert'")
    try:
        blob = serialization.msgpack_restore(path.read_bytes())
        kwargs, params = dict(blob["config"]), blob["params"]
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CheckpointError(
            f"{path}: expected a flax-posenc msgpack with 'config' and 'params', found unreadable data ({type(exc).__name__})"
        ) from None
    _check_converted(path, kwargs, params)
    return kwargs, params


def converted_position_table(path: str | os.PathLike):
    """The position table inside a file written by ``flax-posenc convert`` (``inspect``/``check`` read it).

    The family and key come from the stored table name (``"bert position table
    (embeddings.position_embeddings.weight)"``); reading the file imports flax.

    Raises:
      CheckpointError: the file is not a valid converted file (one line naming it).
    """
    import re

    from flax_posenc.conversion.table import PositionTable

    kwargs, params = _load_converted(Path(path))
    name = str(kwargs.get("position_name", ""))
    match = re.fullmatch(r"(\S+) position table \((.+)\)", name)
    family, key = match.groups() if match else ("converted", "position_embeddings")
    return PositionTable(
        np.asarray(params["position_embeddings"]),
        family=family,
        key=key,
        offset=int(kwargs.get("position_offset", 0)),
        source=str(path),
        config=dict(kwargs),
    )


def module_arguments(source, *, family: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(kwargs, params)`` for ``TransformerInput`` from a checkpoint or a converted file."""
    if _is_converted(source):
        return _load_converted(Path(source))
    from flax_posenc.conversion import load_input_block

    return arguments_from_weights(load_input_block(source, family=family))


def save_converted(source, out, *, family: str | None = None, overwrite: bool = False) -> Path:
    """Write the Flax parameters and arguments of SOURCE's input block to ``out`` (``.msgpack``).

    Atomic and exclusive: written to a temporary file beside ``out`` and linked into place only if
    nothing is there (``os.link``; with ``overwrite``, renamed over it); SIGTERM/SIGINT remove the
    temporary file. Refuses an existing ``out`` unless ``overwrite``, and a directory always.
    Raises only CheckpointError (naming the file) for what cannot be read or written. Restore with ``TransformerInput.from_pretrained(out)`` (NNX or Linen)
    or ``flax.serialization.msgpack_restore``.
    """
    from flax import serialization

    out = Path(out)
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
    kwargs, params = module_arguments(source, family=family)
    blob = serialization.msgpack_serialize({"config": kwargs, "params": _numpy_tree(params)})
    from flax_posenc.conversion.atomic import cleanup_on_signal, publish_file

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


__all__ = ["arguments_from_weights", "module_arguments", "save_converted"]
