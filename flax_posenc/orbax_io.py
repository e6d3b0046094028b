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

This module imports only the standard library and numpy at import time (``inspect_source``
asks :func:`is_orbax_checkpoint` without loading jax); saving and loading import jax, flax and
orbax.

Example::

    import flax_posenc as fp
    block = fp.nnx.TransformerInput.from_pretrained("path/to/bert")
    fp.save_orbax("bert-orbax", block)
    spec, params = fp.load_orbax("bert-orbax")            # one device
    block = fp.nnx.TransformerInput.from_pretrained("bert-orbax", mesh=mesh, rules=rules)  # sharded
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flax_posenc.conversion import atomic
from flax_posenc.conversion.converted_file import Origin, origin_from_name
from flax_posenc.conversion.safety import load_json
from flax_posenc.errors import CheckpointError
from flax_posenc.spec import AXES, InputSpec

#: the ``format`` field of the metadata item, the version written and the versions read.
ORBAX_FORMAT = "flax-posenc/orbax-input-block"
ORBAX_VERSION = 1
READABLE_ORBAX_VERSIONS = (1,)
#: the orbax item names: the parameters and the metadata (a JSON file ``flax_posenc/metadata``).
PARAMS_ITEM = "params"
METADATA_ITEM = "flax_posenc"
METADATA_FILE = f"{METADATA_ITEM}/metadata"
#: bytes allowed in the metadata JSON (a spec and a few shapes: well under 4 KB).
MAX_METADATA_BYTES = 1 << 20
#: elements allowed in one stored array (2**34: 64 GiB of float32, four times a 256k x 16384 word
#: table), checked on the declared shapes before orbax allocates anything.
MAX_ARRAY_ELEMENTS = 1 << 34
#: the dtypes a stored parameter may have.
FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")
#: what marks a directory as an orbax checkpoint (any one of them; a Hugging Face directory has config.json).
_MARKERS = ("_CHECKPOINT_METADATA", METADATA_ITEM, f"{PARAMS_ITEM}/_METADATA", f"{PARAMS_ITEM}/manifest.ocdbt")


def is_orbax_checkpoint(source: object) -> bool:
    """Whether ``source`` names a directory that looks like an orbax checkpoint (no ``config.json``).

    A partial one counts (so its missing pieces are named): any of orbax's
    ``_CHECKPOINT_METADATA``, the ``flax_posenc`` metadata item or a ``params`` item's files.

    >>> is_orbax_checkpoint("sinusoidal:16:8")
    False
    """
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source):
        return False
    root = Path(source)
    if (root / "config.json").exists():
        return False
    return any(os.path.lexists(root / marker) for marker in _MARKERS)


def _fail(path: object, expected: str, found: str) -> CheckpointError:
    return CheckpointError(" ".join(f"{path}: expected {expected}, found {found}".split()))


def _flat(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"layer_norm/scale": leaf, ...}`` of a nested dict."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


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

    expected = {k: tuple(v) for k, v in _flat(spec.param_shapes()).items()}
    found = {k: tuple(v.shape) for k, v in _flat(host).items()}
    if expected != found:
        raise _fail(out, f"parameters of the spec's shapes {expected}", f"{found}")
    for name, value in _flat(host).items():
        if not jnp.issubdtype(value.dtype, jnp.floating):
            raise _fail(out, f"{name} as a float array", str(value.dtype))
        if not np.isfinite(value.astype(np.float32)).all():
            raise _fail(out, f"finite values in {name}", "NaN/Inf values")


def save_orbax(
    out: str | os.PathLike, block, variables=None, *, overwrite: bool = False, origin: Origin | None = None
) -> Path:
    """Write an input block as an orbax checkpoint directory ``out`` (layout: this module's docstring).

    Args:
      out: the new directory (its parent must exist).
      block: an NNX :class:`~flax_posenc.nnx.TransformerInput`; a Linen
        :class:`~flax_posenc.linen.TransformerInput` (then ``variables`` are its variables,
        ``{"params": ...}``, boxed or not); or an :class:`~flax_posenc.block.InputSpec` (then
        ``variables`` is the nested parameter dict of :func:`~flax_posenc.pretrained.load_pretrained`).
      overwrite: replace an existing ``out``.
      origin: where the position table came from (family, tensor name, SOURCE), stored as
        ``origin`` (what ``flax-posenc convert`` passes; :func:`read_orbax_origin` reads it back).

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
    if os.path.lexists(out) and not overwrite:
        raise _fail(out, "a new path", "an existing file or directory (pass overwrite=True / --overwrite)")
    if not out.parent.is_dir():
        raise _fail(out, "an existing parent directory", f"none at {out.parent}")
    spec, params = _spec_and_params(block, variables)
    host = _host_params(params)
    _check_params(out, spec, host)
    metadata = {
        "format": ORBAX_FORMAT,
        "version": ORBAX_VERSION,
        "spec": spec.to_dict(),
        "params": {
            name: {"shape": list(v.shape), "dtype": v.dtype.name, "sha256": _digest(v)}
            for name, v in _flat(host).items()
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
                with _checkpointer() as checkpointer:
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
        raise _fail(out, "a writable output directory", f"{type(e).__name__}: {e.strerror or e}") from None
    return out


# --------------------------------------------------------------------------- load


def read_orbax_metadata(path: str | os.PathLike):
    """``(spec, declared)`` from an orbax checkpoint's metadata item, before any array is read.

    ``declared`` maps ``"layer_norm/scale"``-style names to ``{"shape", "dtype", "sha256"}``;
    its names and shapes equal ``spec.param_shapes()``.

    Raises:
      CheckpointError: the metadata is missing, not JSON, of another format or version, holds
        an invalid spec, or declares parameters the spec does not have.
    """

    root = Path(path)
    if not root.is_dir():
        raise _fail(root, "an orbax checkpoint directory", "no directory")
    file = root / METADATA_FILE
    if not os.path.lexists(file):
        raise _fail(root, f"an orbax checkpoint written by flax-posenc, with its metadata in {METADATA_FILE}", "none")
    blob = load_json(file, what="flax-posenc orbax metadata (JSON)", max_bytes=MAX_METADATA_BYTES)
    if not isinstance(blob, dict) or blob.get("format") != ORBAX_FORMAT:
        found = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise _fail(file, f"format {ORBAX_FORMAT!r}", repr(found)[:100])
    version = blob.get("version")
    if isinstance(version, bool) or version not in READABLE_ORBAX_VERSIONS:
        raise _fail(file, f"version {' or '.join(map(str, READABLE_ORBAX_VERSIONS))}", repr(version)[:100])
    stored = blob.get("spec")
    if not isinstance(stored, dict):
        raise _fail(file, "a 'spec' dict", type(stored).__name__)
    try:
        spec = InputSpec.from_dict(stored)
    except (TypeError, ValueError) as exc:
        raise _fail(file, "a valid 'spec'", (str(exc).splitlines() or [type(exc).__name__])[0][:200]) from None
    declared = blob.get("params")
    expected = {k: list(v) for k, v in _flat(spec.param_shapes()).items()}
    if not isinstance(declared, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("dtype"), str)
        for v in declared.values()
    ):
        raise _fail(file, "a 'params' dict of {shape, dtype, sha256} per parameter", repr(declared)[:100])
    found = {k: v.get("shape") for k, v in declared.items()}
    if found != expected:
        raise _fail(file, f"parameters of the spec's shapes {expected}", f"{found}"[:300])
    for name, entry in declared.items():
        if entry["dtype"] not in FLOAT_DTYPES:
            raise _fail(file, f"{name} of a float dtype ({', '.join(FLOAT_DTYPES)})", repr(entry["dtype"])[:50])
    for name, shape in expected.items():
        if math.prod(shape) > MAX_ARRAY_ELEMENTS:
            raise _fail(file, f"at most {MAX_ARRAY_ELEMENTS} elements in {name}", f"shape {tuple(shape)}")
    return spec, declared


def read_orbax_origin(path: str | os.PathLike) -> Origin | None:
    """Where an orbax checkpoint's position table came from, if its metadata says (``origin``).

    Directories written without one (by ``save_orbax`` without ``origin``, or before it was
    stored) give the family and key in the table's name when it is the converter's
    (``"bert position table (key)"``), else ``None``.

    Raises:
      CheckpointError: as :func:`read_orbax_metadata`, or an ``origin`` that is not
        ``{"family": str, "key": str, "source": str or null}``.
    """
    spec, _ = read_orbax_metadata(path)
    file = Path(path) / METADATA_FILE
    stored = load_json(file, what="flax-posenc orbax metadata (JSON)", max_bytes=MAX_METADATA_BYTES).get("origin")
    if stored is None:
        return origin_from_name(spec.position.name)
    if (
        not isinstance(stored, dict)
        or set(stored) != {"family", "key", "source"}
        or not (isinstance(stored["family"], str) and isinstance(stored["key"], str))
        or not isinstance(stored["source"], (str, type(None)))
    ):
        raise _fail(file, 'an origin {"family": str, "key": str, "source": str or null}', repr(stored)[:120])
    return Origin(stored["family"], stored["key"], stored["source"])


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


def _checkpointer():
    """orbax's ``Checkpointer`` of the two items (their handlers named: a fresh one can restore)."""
    import orbax.checkpoint as ocp

    handler = ocp.CompositeCheckpointHandler(
        **{PARAMS_ITEM: ocp.PyTreeCheckpointHandler(), METADATA_ITEM: ocp.JsonCheckpointHandler()}
    )
    return ocp.Checkpointer(handler)


def _on_host(array) -> np.ndarray:
    """The whole array on this host (gathered from every process when a mesh spans several)."""
    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def _one_line_error(exc: BaseException) -> str:
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {' '.join(first.split())[:200]}"


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
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    root = Path(path).absolute()
    spec, declared = read_orbax_metadata(root)
    if not (root / PARAMS_ITEM).is_dir():
        raise _fail(root, f"the parameters in {PARAMS_ITEM}/ (an orbax item)", "no such directory")
    checkpointer = _checkpointer()
    try:
        stored = checkpointer.metadata(root).item_metadata[PARAMS_ITEM]
        stored = {k: (tuple(v.shape), jnp.dtype(v.dtype).name) for k, v in _flat(dict(stored.tree)).items()}
    except Exception as exc:  # orbax and tensorstore raise many types for a damaged directory
        raise _fail(root / PARAMS_ITEM, "orbax array metadata", f"unreadable ({_one_line_error(exc)})") from None
    wanted = {k: (tuple(v["shape"]), v["dtype"]) for k, v in declared.items()}
    if stored != wanted:
        raise _fail(root, f"stored arrays of the metadata's shapes and dtypes {wanted}", f"{stored}"[:300])
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        shardings = {k: device for k in declared}
    else:
        shardings = _flat(param_shardings(spec, mesh, rules))
    params: dict[str, Any] = {}
    # One array at a time: a failure names it, and leaves no other read of orbax's still running.
    for name, (shape, dtype) in wanted.items():
        *parents, leaf = name.split("/")
        target = jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=shardings[name])
        item: dict[str, Any] = {leaf: target}
        for p in reversed(parents):
            item = {p: item}
        restore_args = jax.tree.map(
            lambda t: ocp.ArrayRestoreArgs(sharding=t.sharding, global_shape=t.shape, dtype=t.dtype), item
        )
        try:
            restored = checkpointer.restore(
                root,
                ocp.args.Composite(
                    **{PARAMS_ITEM: ocp.args.PyTreeRestore(item=item, restore_args=restore_args, partial_restore=True)}
                ),
            )[PARAMS_ITEM]
            value = restored
            for key in (*parents, leaf):
                value = value[key]
        except Exception as exc:  # orbax wraps tensorstore's error (NOT_FOUND, DATA_LOSS, ...) as its cause
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            raise _fail(root / PARAMS_ITEM, f"readable orbax array files ({name})", _one_line_error(cause)) from None
        if _digest(_on_host(value)) != declared[name]["sha256"]:
            raise _fail(root / PARAMS_ITEM, f"{name} as saved (its SHA-256 in {METADATA_FILE})", "different contents")
        target_dict = params
        for p in parents:
            target_dict = target_dict.setdefault(p, {})
        target_dict[leaf] = value
    return spec, params


__all__ = [
    "MAX_ARRAY_ELEMENTS",
    "METADATA_FILE",
    "ORBAX_FORMAT",
    "ORBAX_VERSION",
    "is_orbax_checkpoint",
    "load_orbax",
    "param_shardings",
    "read_orbax_metadata",
    "read_orbax_origin",
    "save_orbax",
]
