"""The orbax directory format of an input block, read with numpy: metadata, origin and arrays.

:func:`~flax_posenc.orbax_io.save_orbax` writes a converted input block as an orbax checkpoint
directory of two items (orbax's ``CompositeCheckpointHandler``)::

    OUT/
      params/        PyTreeSave of the parameters (nested dict, named as in flax_posenc.block)
      flax_posenc/   JsonSave of the metadata: {"format": "flax-posenc/orbax-input-block",
                     "version": 1, "spec": InputSpec.to_dict(),
                     "params": {"word_embeddings": {"shape": [..], "dtype": "float32",
                                                    "sha256": ...}, ...},
                     "origin": {"family": ..., "key": ..., "source": ...}}   [optional]

This module is that format on conversion's numpy floor: :func:`is_orbax_checkpoint`,
:func:`read_orbax_metadata` (the bounded JSON reader; the spec valid; names, shapes and float
dtypes that agree with it), :func:`read_orbax_origin`, :func:`array_sha256` (the digest stored
per array) and :func:`read_orbax_params`, which restores every array as a host numpy array and
checks it against the metadata: orbax's own array metadata must agree on every shape and dtype,
and every array must hash to the SHA-256 recorded at save time (orbax restores a corrupted data
chunk silently). Anything else is one :class:`~flax_posenc.errors.CheckpointError` line naming
the directory.

numpy, json and the standard library at import time; orbax (and with it jax) is imported only
to restore an orbax directory's arrays (:func:`read_orbax_params`), as torch is only to read a
``.bin``. Saving, and restoring sharded onto a mesh, are the jax side:
:mod:`flax_posenc.orbax_io` (which re-exports this module's names).

Example::

    from flax_posenc.conversion.orbax_file import read_orbax_params
    spec, params = read_orbax_params("bert-orbax")   # numpy arrays, checked against their SHA-256
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flax_posenc.conversion.converted_file import Origin, file_origin, file_spec, origin_from_name
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.safety import load_json
from flax_posenc.spec import InputSpec

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


def flat_params(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"layer_norm/scale": leaf, ...}`` of a nested parameter dict.

    >>> flat_params({"word_embeddings": 1, "layer_norm": {"scale": 2, "bias": 3}})
    {'word_embeddings': 1, 'layer_norm/scale': 2, 'layer_norm/bias': 3}
    """
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, f"{name}/"))
        else:
            out[name] = value
    return out


def array_sha256(array: np.ndarray) -> str:
    """The SHA-256 (hex) stored per array: of its bytes in C order, in its own dtype.

    >>> array_sha256(np.zeros(2, np.float32)) == __import__("hashlib").sha256(bytes(8)).hexdigest()
    True
    """
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def check_no_links_out(root: str | os.PathLike) -> None:
    """Refuse an orbax directory holding a symbolic link (at any depth: ``flax_posenc/``,
    ``flax_posenc/metadata``, ``params/``, ``params/ocdbt.process_0``, ...) that resolves outside it.

    Only ``realpath`` is used: nothing outside is opened or probed. The directory itself may be a
    link (it is what the user named). A link that stays inside is allowed.

    Raises:
      CheckpointError: one line naming the link and where it points.
    """
    root = Path(root)
    base = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):  # links to folders are listed, not followed
        for name in dirnames + filenames:
            entry = Path(dirpath) / name
            if not os.path.islink(entry):
                continue
            real = os.path.realpath(entry)
            if real != base and os.path.commonpath([base, real]) != base:
                raise fail(
                    entry,
                    f"files that resolve inside the orbax checkpoint {root}",
                    f"a symbolic link to {real} (refused, not read)",
                )


def read_orbax_metadata(path: str | os.PathLike) -> tuple[InputSpec, dict[str, dict[str, Any]]]:
    """``(spec, declared)`` from an orbax checkpoint's metadata item, before any array is read.

    ``declared`` maps ``"layer_norm/scale"``-style names to ``{"shape", "dtype", "sha256"}``;
    its names and shapes equal ``spec.param_shapes()``.

    Raises:
      CheckpointError: the metadata is missing, not JSON, of another format or version, holds
        an invalid spec, or declares parameters the spec does not have; a symbolic link in the
        directory leads out of it (:func:`check_no_links_out`).
    """

    root = Path(path)
    if not root.is_dir():
        raise fail(root, "an orbax checkpoint directory", "no directory")
    check_no_links_out(root)
    file = root / METADATA_FILE
    if not os.path.lexists(file):
        raise fail(root, f"an orbax checkpoint written by flax-posenc, with its metadata in {METADATA_FILE}", "none")
    blob = load_json(file, what="flax-posenc orbax metadata (JSON)", max_bytes=MAX_METADATA_BYTES)
    if not isinstance(blob, dict) or blob.get("format") != ORBAX_FORMAT:
        found = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise fail(file, f"format {ORBAX_FORMAT!r}", repr(found)[:100])
    version = blob.get("version")
    if isinstance(version, bool) or version not in READABLE_ORBAX_VERSIONS:
        raise fail(file, f"version {' or '.join(map(str, READABLE_ORBAX_VERSIONS))}", repr(version)[:100])
    stored = blob.get("spec")
    if not isinstance(stored, dict):
        raise fail(file, "a 'spec' dict", type(stored).__name__)
    try:
        spec = file_spec(InputSpec.from_dict(stored))
    except (TypeError, ValueError) as exc:
        raise fail(file, "a valid 'spec'", (str(exc).splitlines() or [type(exc).__name__])[0][:200]) from None
    declared = blob.get("params")
    expected = {k: list(v) for k, v in flat_params(spec.param_shapes()).items()}
    if not isinstance(declared, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("dtype"), str)
        for v in declared.values()
    ):
        raise fail(file, "a 'params' dict of {shape, dtype, sha256} per parameter", repr(declared)[:100])
    found = {k: v.get("shape") for k, v in declared.items()}
    if found != expected:
        raise fail(file, f"parameters of the spec's shapes {expected}", f"{found}"[:300])
    for name, entry in declared.items():
        if entry["dtype"] not in FLOAT_DTYPES:
            raise fail(file, f"{name} of a float dtype ({', '.join(FLOAT_DTYPES)})", repr(entry["dtype"])[:50])
    for name, shape in expected.items():
        if math.prod(shape) > MAX_ARRAY_ELEMENTS:
            raise fail(file, f"at most {MAX_ARRAY_ELEMENTS} elements in {name}", f"shape {tuple(shape)}")
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
        raise fail(file, 'an origin {"family": str, "key": str, "source": str or null}', repr(stored)[:120])
    return file_origin(stored["family"], stored["key"], stored["source"])


def orbax_checkpointer():
    """orbax's ``Checkpointer`` of the two items (their handlers named: a fresh one can restore).

    Imports orbax (and with it jax).
    """
    import orbax.checkpoint as ocp

    handler = ocp.CompositeCheckpointHandler(
        **{PARAMS_ITEM: ocp.PyTreeCheckpointHandler(), METADATA_ITEM: ocp.JsonCheckpointHandler()}
    )
    return ocp.Checkpointer(handler)


def _one_line_error(exc: BaseException) -> str:
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {' '.join(first.split())[:200]}"


def _on_host_as_numpy(name: str, shape: tuple[int, ...], dtype: str):
    """orbax's restore arguments of a host numpy array (whatever type it was saved as)."""
    import orbax.checkpoint as ocp

    return ocp.RestoreArgs(restore_type=np.ndarray)


def read_orbax_params(
    path: str | os.PathLike,
    *,
    restore_args: Callable[[str, tuple[int, ...], str], Any] | None = None,
    to_host: Callable[[Any], np.ndarray] = np.asarray,
) -> tuple[InputSpec, dict[str, Any]]:
    """``(spec, params)`` of an orbax checkpoint written by ``save_orbax``: numpy arrays, checked.

    Args:
      path: the checkpoint directory.
      restore_args: ``(name, shape, dtype name) -> orbax RestoreArgs`` for each array; ``None``
        (the default): ``RestoreArgs(restore_type=np.ndarray)``, a host numpy array.
        :func:`flax_posenc.orbax_io.load_orbax` passes ``ArrayRestoreArgs`` to restore
        directly sharded onto a mesh.
      to_host: the whole restored array as numpy, for its SHA-256 (a sharded array gathered).

    Returns:
      The :class:`~flax_posenc.spec.InputSpec` and a nested dict of arrays (the stored dtype;
      ``bfloat16`` as ml_dtypes' numpy dtype), named as in :mod:`flax_posenc.block`.

    Raises:
      CheckpointError: one line naming the directory: missing or corrupted metadata, a spec
        that does not match the stored arrays, missing or unreadable array files, array
        contents that differ from the SHA-256 recorded at save time, NaN or Inf values (as
        ``save_orbax`` refuses them), or a symbolic link leading out of the directory.

    Imports orbax (and with it jax): the one exception to conversion's numpy-only floor, only
    while an orbax directory's arrays are restored. Arrays are restored one at a time, so a
    failure names the array.
    """
    root = Path(path).absolute()
    spec, declared = read_orbax_metadata(root)
    if not (root / PARAMS_ITEM).is_dir():
        raise fail(root, f"the parameters in {PARAMS_ITEM}/ (an orbax item)", "no such directory")
    import orbax.checkpoint as ocp

    checkpointer = orbax_checkpointer()
    try:
        stored = checkpointer.metadata(root).item_metadata[PARAMS_ITEM]
        stored = {k: (tuple(v.shape), np.dtype(v.dtype).name) for k, v in flat_params(dict(stored.tree)).items()}
    except Exception as exc:  # orbax and tensorstore raise many types for a damaged directory
        raise fail(root / PARAMS_ITEM, "orbax array metadata", f"unreadable ({_one_line_error(exc)})") from None
    wanted = {k: (tuple(v["shape"]), v["dtype"]) for k, v in declared.items()}
    if stored != wanted:
        raise fail(root, f"stored arrays of the metadata's shapes and dtypes {wanted}", f"{stored}"[:300])
    if restore_args is None:
        restore_args = _on_host_as_numpy
    params: dict[str, Any] = {}
    # One array at a time: a failure names it, and leaves no other read of orbax's still running.
    for name, (shape, dtype) in wanted.items():
        *parents, leaf = name.split("/")
        item: dict[str, Any] = {leaf: 0}  # a placeholder: the restore arguments say what to read
        args: dict[str, Any] = {leaf: restore_args(name, shape, dtype)}
        for p in reversed(parents):
            item, args = {p: item}, {p: args}
        try:
            value = checkpointer.restore(
                root,
                ocp.args.Composite(
                    **{PARAMS_ITEM: ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True)}
                ),
            )[PARAMS_ITEM]
            for key in (*parents, leaf):
                value = value[key]
        except Exception as exc:  # orbax wraps tensorstore's error (NOT_FOUND, DATA_LOSS, ...) as its cause
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            raise fail(root / PARAMS_ITEM, f"readable orbax array files ({name})", _one_line_error(cause)) from None
        host = to_host(value)
        if array_sha256(host) != declared[name]["sha256"]:
            raise fail(root / PARAMS_ITEM, f"{name} as saved (its SHA-256 in {METADATA_FILE})", "different contents")
        with np.errstate(over="ignore", invalid="ignore"):
            finite = bool(np.isfinite(np.asarray(host).astype(np.float32)).all())
        if not finite:  # save_orbax refuses them; a matching checksum does not make them right
            raise fail(root / PARAMS_ITEM, f"finite values in {name}", "NaN/Inf values")
        target = params
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    return spec, params


__all__ = [
    "FLOAT_DTYPES",
    "MAX_ARRAY_ELEMENTS",
    "MAX_METADATA_BYTES",
    "METADATA_FILE",
    "METADATA_ITEM",
    "ORBAX_FORMAT",
    "ORBAX_VERSION",
    "PARAMS_ITEM",
    "READABLE_ORBAX_VERSIONS",
    "array_sha256",
    "check_no_links_out",
    "flat_params",
    "is_orbax_checkpoint",
    "orbax_checkpointer",
    "read_orbax_metadata",
    "read_orbax_origin",
    "read_orbax_params",
]
