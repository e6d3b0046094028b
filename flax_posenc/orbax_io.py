"""Input blocks as orbax checkpoints: the parameters through ``orbax.checkpoint``, the spec as JSON.

:func:`save_orbax` writes a converted input block (an NNX ``TransformerInput``, a Linen one with
its variables, or an :class:`~flax_posenc.block.InputSpec` with a parameter dict) as an orbax
checkpoint directory of two items (orbax's ``CompositeCheckpointHandler``)::

    OUT/
      params/        PyTreeSave of the parameters (nested dict, named as in flax_posenc.block)
      flax_posenc/   JsonSave of the metadata: {"format": "flax-posenc/orbax-input-block",
                     "version": 1, "spec": InputSpec.to_dict(),
                     "params": {"word_embeddings": {"shape": [..], "dtype": "float32",
                                                    "sha256": ...}, ...},
                     "origin": {"family": ..., "key": ..., "source": ...}}   [optional]

so plain orbax reads it too (``ocp.args.Composite(params=ocp.args.PyTreeRestore(),
flax_posenc=ocp.args.JsonRestore())``). :func:`load_orbax` restores it, on one device or
directly sharded onto a mesh by the parameters' logical axis names (``docs/sharding.md``), and
checks it first: the metadata is read with the bounded JSON reader, the spec must be valid,
the spec, the metadata and orbax's own array metadata must agree on every shape, and every
restored array must hash to the SHA-256 recorded at save time (orbax restores a corrupted data
chunk silently). Anything else is one :class:`~flax_posenc.errors.CheckpointError` line
naming the directory.

``load_pretrained``, both shells' ``from_pretrained`` and the CLI's ``inspect``/``check``/
``convert`` accept such a directory as a SOURCE (:func:`is_orbax_checkpoint`).

This module is the jax side: saving, and restoring onto devices (sharded onto a mesh). The
format itself -- the constants, :func:`is_orbax_checkpoint`, :func:`read_orbax_metadata`,
:func:`read_orbax_origin` and a numpy restore, ``read_orbax_params`` -- lives on conversion's
numpy floor, :mod:`flax_posenc.conversion.orbax_file`, and is re-exported here. Like that
module, this one imports only the standard library and numpy at import time; saving and
loading import jax, flax and orbax.

Example::

    import flax_posenc as fp
    block = fp.nnx.TransformerInput.from_pretrained("path/to/bert")
    fp.save_orbax("bert-orbax", block)
    spec, params = fp.load_orbax("bert-orbax")            # one device
    block = fp.nnx.TransformerInput.from_pretrained("bert-orbax", mesh=mesh, rules=rules)  # sharded
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flax_posenc.conversion import atomic
from flax_posenc.conversion.converted_file import Origin
from flax_posenc.conversion.orbax_file import (
    FLOAT_DTYPES,
    MAX_ARRAY_ELEMENTS,
    MAX_METADATA_BYTES,
    METADATA_FILE,
    METADATA_ITEM,
    ORBAX_FORMAT,
    ORBAX_VERSION,
    PARAMS_ITEM,
    READABLE_ORBAX_VERSIONS,
    array_sha256,
    flat_params,
    is_orbax_checkpoint,
    orbax_checkpointer,
    read_orbax_metadata,
    read_orbax_origin,
    read_orbax_params,
)
from flax_posenc.conversion.outputs import check_output, protected_paths
from flax_posenc.conversion.readers import fail
from flax_posenc.spec import AXES, InputSpec

# --------------------------------------------------------------------------- save


def _spec_and_params(block, variables) -> tuple[Any, dict[str, Any]]:
    """``(spec, params)`` of an NNX block, a Linen block with its variables, or a spec with params."""
    if isinstance(block, InputSpec):
        if not isinstance(variables, Mapping):
            raise TypeError(f"save_orbax: expected a params dict with an InputSpec, got {type(variables).__name__}")
        return block, dict(variables)
    spec = getattr(block, "spec", None)
    if not isinstance(spec, InputSpec):
        raise TypeError(
            "save_orbax: expected a TransformerInput (NNX, or Linen with its variables) or an InputSpec, "
            f"got {type(block).__name__}"
        )
    if variables is None:
        params = getattr(block, "params", None)
        if not callable(params):
            raise TypeError(f"save_orbax: a Linen {type(block).__name__} needs its variables")
        return spec, params()
    from flax import linen as nn

    unboxed = nn.unbox(variables)
    if not isinstance(unboxed, Mapping) or "params" not in unboxed:
        raise TypeError("save_orbax: expected Linen variables {'params': ...}")
    return spec, dict(unboxed["params"])


def _host_params(params: Mapping) -> dict[str, Any]:
    """``params`` as a nested dict of numpy arrays (a sharded array gathered whole)."""
    return {k: _host_params(v) if isinstance(v, Mapping) else _on_host(v) for k, v in params.items()}


def _check_params(out: Path, spec, host: Mapping) -> None:
    """Refuse parameters unlike ``spec``'s: other names or shapes, not floating, NaN/Inf values."""
    import jax.numpy as jnp

    expected = {k: tuple(v) for k, v in flat_params(spec.param_shapes()).items()}
    found = {k: tuple(v.shape) for k, v in flat_params(host).items()}
    if expected != found:
        raise fail(out, f"parameters of the spec's shapes {expected}", f"{found}")
    for name, value in flat_params(host).items():
        if not jnp.issubdtype(value.dtype, jnp.floating):
            raise fail(out, f"{name} as a float array", str(value.dtype))
        if not np.isfinite(value.astype(np.float32)).all():
            raise fail(out, f"finite values in {name}", "NaN/Inf values")


#: names an orbax directory may not take: the suffixes of files (a converted file's, a checkpoint's)
FILE_SUFFIXES = (".msgpack", ".safetensors", ".bin", ".gguf", ".json")


def save_orbax(
    out: str | os.PathLike,
    block,
    variables=None,
    *,
    overwrite: bool = False,
    origin: Origin | None = None,
    source: str | os.PathLike | None = None,
) -> Path:
    """Write an input block as an orbax checkpoint directory ``out`` (layout: this module's docstring).

    Args:
      out: the new directory (its parent must exist; a name ending in a file suffix, ``.msgpack``,
        ``.safetensors``, ``.bin``, ``.gguf`` or ``.json``, is refused).
      block: an NNX :class:`~flax_posenc.nnx.TransformerInput`; a Linen
        :class:`~flax_posenc.linen.TransformerInput` (then ``variables`` are its variables,
        ``{"params": ...}``, boxed or not); or an :class:`~flax_posenc.block.InputSpec` (then
        ``variables`` is the nested parameter dict of :func:`~flax_posenc.pretrained.load_pretrained`).
      overwrite: replace an existing ``out``, only when it is an output of flax-posenc (an orbax
        block or an extended checkpoint; :func:`~flax_posenc.conversion.outputs.check_output`).
      origin: where the position table came from (family, tensor name, SOURCE), stored as
        ``origin`` (what ``flax-posenc convert`` passes; :func:`read_orbax_origin` reads it back).
      source: the SOURCE the block was read from, if any: ``out`` may not be it, lie inside it or
        contain it (what ``save_converted`` passes).

    Atomic and exclusive, like every export (:mod:`flax_posenc.conversion.atomic`): orbax writes
    into a hidden temporary sibling of ``out`` that is renamed into place only when complete; an
    existing ``out`` is refused unless ``overwrite``; nothing is left behind on failure or SIGTERM.

    Returns ``out``. Raises CheckpointError (one line naming ``out``) for what cannot be written
    or parameters that do not match the spec (names, shapes, float dtype, finite values), and
    TypeError for a ``block`` of another kind.

    >>> import tempfile, numpy as np
    >>> import flax_posenc as fp
    >>> from flax_posenc.block import InputSpec
    >>> spec = InputSpec.of(10, 4, num_positions=8)
    >>> params = {"word_embeddings": np.ones((10, 4), np.float32), "position_embeddings": np.zeros((8, 4), np.float32)}
    >>> out = fp.save_orbax(tempfile.mkdtemp() + "/block", spec, params)
    >>> spec2, params2 = fp.load_orbax(out)
    >>> spec2 == spec, params2["position_embeddings"].shape
    (True, (8, 4))
    """
    out = Path(out).absolute()
    file_suffix = next((x for x in FILE_SUFFIXES if out.name.lower().endswith(x)), None)
    if file_suffix is not None:  # a directory named like a converted file: `check x.msgpack` could not read it
        raise fail(out, "a directory name for an orbax checkpoint", f"the file suffix {file_suffix!r}")
    if os.path.lexists(out) and not overwrite:
        raise fail(out, "a new path", "an existing file or directory (pass overwrite=True / --overwrite)")
    check_output(
        out, kind="directory", sources=protected_paths(source) if source is not None else (), overwrite=overwrite
    )
    if not out.parent.is_dir():
        raise fail(out, "an existing parent directory", f"none at {out.parent}")
    spec, params = _spec_and_params(block, variables)
    host = _host_params(params)
    _check_params(out, spec, host)
    metadata = {
        "format": ORBAX_FORMAT,
        "version": ORBAX_VERSION,
        "spec": spec.to_dict(),
        "params": {
            name: {"shape": list(v.shape), "dtype": v.dtype.name, "sha256": array_sha256(v)}
            for name, v in flat_params(host).items()
        },
    }
    if origin is not None:
        metadata["origin"] = dict(origin._asdict())
    import orbax.checkpoint as ocp

    tmp: Path | None = None
    try:
        with atomic.cleanup_on_signal():
            try:
                tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
                staged = tmp / "checkpoint"
                with orbax_checkpointer() as checkpointer:
                    checkpointer.save(
                        staged,
                        ocp.args.Composite(
                            **{
                                PARAMS_ITEM: ocp.args.PyTreeSave(host),
                                METADATA_ITEM: ocp.args.JsonSave(metadata),
                            }
                        ),
                    )
                atomic.publish_dir(staged, out, overwrite=overwrite)
            finally:
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise fail(out, "a writable output directory", f"{type(e).__name__}: {e.strerror or e}") from None
    return out


# --------------------------------------------------------------------------- load


def param_shardings(spec, mesh, rules=None) -> dict[str, Any]:
    """The ``NamedSharding`` of every parameter of ``spec`` on ``mesh``, by its logical axes.

    ``rules``: ``(logical name, mesh axis or None)`` pairs (``docs/sharding.md``); ``None``: flax's
    current rules (``nn.logical_axis_rules``). Nested like the parameters.
    """
    from flax import linen as nn
    from jax.sharding import PartitionSpec

    logical = {
        k: {n: PartitionSpec(*AXES[k]) for n in v} if isinstance(v, dict) else PartitionSpec(*AXES[k])
        for k, v in spec.param_shapes().items()
    }
    return nn.logical_to_mesh_sharding(logical, mesh, rules)


def _on_host(array) -> np.ndarray:
    """The whole array on this host (gathered from every process when a mesh spans several)."""
    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def load_orbax(path: str | os.PathLike, *, mesh=None, rules=None) -> tuple[Any, dict[str, Any]]:
    """``(spec, params)`` of an orbax checkpoint written by :func:`save_orbax`.

    Args:
      path: the checkpoint directory.
      mesh: a ``jax.sharding.Mesh``: every array is restored directly sharded on it, by the
        logical axis names of its parameter (:func:`param_shardings`); ``None``: on the default
        device.
      rules: logical-to-mesh axis rules (with ``mesh``), e.g. ``(("vocab", None), ("embed", "model"))``.

    Returns:
      The :class:`~flax_posenc.block.InputSpec` and a nested dict of ``jax.Array`` (the stored
      dtype), ready for ``TransformerInput(spec)`` or the shells' ``from_pretrained``.

    Raises:
      CheckpointError: one line naming the directory: missing or corrupted metadata, a spec
        that does not match the stored arrays, missing or unreadable array files, or array
        contents that differ from the SHA-256 recorded at save time.
    """
    import jax

    if mesh is None:  # the numpy restore (conversion/orbax_file.py), then onto the default device
        spec, host = read_orbax_params(path)
        device = jax.devices()[0]
        return spec, jax.tree.map(lambda a: jax.device_put(a, device), host)
    import orbax.checkpoint as ocp

    spec, _ = read_orbax_metadata(Path(path).absolute())  # the spec names each array's sharding before any is read
    shardings = flat_params(param_shardings(spec, mesh, rules))

    def sharded(name: str, shape: tuple[int, ...], dtype: str):
        return ocp.ArrayRestoreArgs(sharding=shardings[name], global_shape=shape, dtype=np.dtype(dtype))

    return read_orbax_params(path, restore_args=sharded, to_host=_on_host)


__all__ = [  # the format's names (conversion/orbax_file.py) re-exported: no public path changed
    "FLOAT_DTYPES",
    "MAX_ARRAY_ELEMENTS",
    "MAX_METADATA_BYTES",
    "METADATA_FILE",
    "METADATA_ITEM",
    "ORBAX_FORMAT",
    "ORBAX_VERSION",
    "PARAMS_ITEM",
    "READABLE_ORBAX_VERSIONS",
    "is_orbax_checkpoint",
    "load_orbax",
    "param_shardings",
    "read_orbax_metadata",
    "read_orbax_origin",
    "read_orbax_params",
    "save_orbax",
]
