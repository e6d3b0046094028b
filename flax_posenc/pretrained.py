"""From checkpoints to input-block specs: what ``from_pretrained`` and ``flax-posenc convert`` share.

:func:`load_pretrained` turns a SOURCE into the :class:`~flax_posenc.spec.InputSpec` of its
``TransformerInput`` and its parameters (a nested dict of numpy arrays, named as in
:mod:`flax_posenc.block`); both shells' ``from_pretrained`` go through it. A SOURCE is a Hugging
Face checkpoint (see :mod:`flax_posenc.conversion`), an orbax directory
(:mod:`flax_posenc.orbax_io`) or a file written by :func:`save_converted` (``flax-posenc
convert``): version 3, a ``.safetensors`` file with the spec as JSON metadata, or a version 1-2
``.msgpack``; the format is :mod:`flax_posenc.conversion.converted_file`'s (numpy only), which
reads all three. An ``on_overflow`` older files hold (older writers kept the run-time policy in
the spec) is ignored: the policy is the loading module's ``on_overflow`` argument (default ``"error"``).

Example::

    import flax_posenc as fp
    spec, params = load_pretrained("path/to/bert")
    block = fp.linen.TransformerInput(spec)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax

from flax_posenc.conversion import load_input_block
from flax_posenc.conversion.converted_file import (
    FORMAT,
    MSGPACK_SUFFIX,
    READABLE_VERSIONS,
    SUFFIX,
    VERSION,
    Origin,
    is_converted_file,
    origin_from_name,
    position_table,
    read_converted,
    write_converted,
)
from flax_posenc.conversion.outputs import check_apart, check_output, protected_paths
from flax_posenc.errors import CheckpointError
from flax_posenc.orbax_io import is_orbax_checkpoint, load_orbax, param_shardings, read_orbax_origin, save_orbax
from flax_posenc.progress import Progress
from flax_posenc.spec import InputSpec, PositionSpec

#: XLA's CPU client takes a host buffer without copying when its address is a multiple of this
HOST_ALIGNMENT = 64


def device_array(value: Any, dtype: Any) -> jax.Array:
    """``jnp.asarray(value, dtype)``, faster for a large host array that is already ``dtype``.

    A numpy array whose data does not start on a :data:`HOST_ALIGNMENT`-byte boundary (as
    ``safetensors.numpy`` returns them) is copied by JAX element by element (on CPU ~4-5x the
    time of a numpy copy, issue 38 item 3); one numpy copy into an aligned buffer, which JAX then
    adopts without copying, gives the same values. Anything else goes to ``jnp.asarray`` as is.

    >>> import numpy as np, jax.numpy as jnp
    >>> device_array(np.arange(3, dtype=np.float32), jnp.float32).tolist()
    [0.0, 1.0, 2.0]
    """
    import jax.numpy as jnp
    import numpy as np

    if (
        isinstance(value, np.ndarray)
        and value.dtype == jnp.dtype(dtype)
        and value.nbytes >= 1 << 20
        and value.ctypes.data % HOST_ALIGNMENT
    ):
        buf = np.empty(value.nbytes + HOST_ALIGNMENT, np.uint8)
        start = -buf.ctypes.data % HOST_ALIGNMENT
        aligned = buf[start : start + value.nbytes].view(value.dtype).reshape(value.shape)
        np.copyto(aligned, value)
        value = aligned
    return jnp.asarray(value, dtype)


#: the ``format`` field of a converted file, the version written (to a ``.safetensors`` name),
#: and the versions read (see :mod:`flax_posenc.conversion.converted_file`).
CONVERTED_FORMAT = FORMAT
CONVERTED_VERSION = VERSION


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
        dim=int(words.shape[1]),
        num_positions=int(table.num_positions),
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


def position_table_of(spec: InputSpec, params: dict[str, Any], source: str | os.PathLike):
    """The learned position table of a converted block ``(spec, params)`` that stores no origin.

    The family and key come from the table name the converter gave it (``"bert position table
    (embeddings.position_embeddings.weight)"``); a version 3 file stores them
    (:func:`~flax_posenc.conversion.converted_file.position_table`).

    Raises:
      CheckpointError: the spec has no learned table (naming ``source``).
    """
    return position_table(spec, params, source, origin_from_name(spec.position.name))


def converted_position_table(path: str | os.PathLike):
    """The position table inside what ``flax-posenc convert`` writes (``inspect``/``check`` read it).

    Reads every converted-file version :func:`load_pretrained` reads, and orbax checkpoint
    directories (:mod:`flax_posenc.orbax_io`; reading those imports orbax).

    Raises:
      CheckpointError: not a valid converted file or directory (one line naming it).
    """
    if is_orbax_checkpoint(path):
        spec, params = load_orbax(path)
        return position_table(spec, params, path, read_orbax_origin(path))
    converted = read_converted(path)
    return position_table(converted.spec, converted.params, path, converted.origin)


def _read_source(source, family: str | None) -> tuple[InputSpec, dict[str, Any], Origin | None]:
    """``(spec, params, origin of the position table)`` of a converted file or a checkpoint."""
    if is_converted_file(source):
        converted = read_converted(source)
        return converted.spec, converted.params, converted.origin
    weights = load_input_block(source, family=family)
    spec, params = spec_from_weights(weights)
    table = weights.position
    return spec, params, Origin(table.family, table.key, table.source)


def load_pretrained(source, *, family: str | None = None, mesh=None, rules=None) -> tuple[InputSpec, dict[str, Any]]:
    """``(spec, params)`` of SOURCE's input block: a checkpoint, a converted file or an orbax directory.

    A converted file is a ``.safetensors`` file written by ``flax-posenc convert`` (its metadata
    says so; any other ``.safetensors`` file is a checkpoint) or a ``.msgpack``.
    ``TransformerInput(spec)`` (NNX with ``rngs``, or Linen) holding ``params`` reproduces the
    checkpoint's embedding output; both shells' ``from_pretrained`` call this.

    With ``mesh`` (a ``jax.sharding.Mesh``) and ``rules`` (logical-to-mesh axis rules, see
    ``docs/sharding.md``) the parameters come back as ``jax.Array`` sharded by their logical axis
    names: an orbax checkpoint (:func:`~flax_posenc.orbax_io.load_orbax`) is restored directly
    onto the mesh, any other SOURCE is read on the host and placed with ``jax.device_put``.

    Raises:
      CheckpointError: SOURCE cannot be read (one line naming it, expected and found).
    """
    if is_orbax_checkpoint(source):
        return load_orbax(source, mesh=mesh, rules=rules)
    spec, params, _ = _read_source(source, family)
    if mesh is not None:
        params = jax.device_put(params, param_shardings(spec, mesh, rules))
    return spec, params


def _read_any(source, family: str | None) -> tuple[InputSpec, dict[str, Any], Origin | None]:
    """:func:`_read_source`, or an orbax directory's ``(spec, params, origin)``."""
    if is_orbax_checkpoint(source):
        spec, params = load_orbax(source)
        return spec, params, read_orbax_origin(source)
    return _read_source(source, family)


#: what ``save_converted`` (``flax-posenc convert --format``) writes: a version 3 ``.safetensors``
#: file, a version 2 ``.msgpack`` file, or an orbax directory.
CONVERTED_FORMATS = ("safetensors", "msgpack", "orbax")
_SUFFIXES = {"safetensors": SUFFIX, "msgpack": MSGPACK_SUFFIX}


def save_converted(
    source, out, *, family: str | None = None, overwrite: bool = False, format: str | None = None, progress=None
) -> Path:
    """Write the spec and parameters of SOURCE's input block to ``out``.

    ``format``: ``None`` (default) follows ``out``'s name: ``.safetensors`` is version 3 (the
    spec, and where the position table came from, as JSON metadata; no flax needed to read it),
    ``.msgpack`` version 2 (as older releases wrote); see
    :mod:`flax_posenc.conversion.converted_file`. ``"safetensors"`` or ``"msgpack"`` insist on
    that format (and its suffix). ``"orbax"`` writes an orbax checkpoint directory instead (any
    name; see :func:`flax_posenc.orbax_io.save_orbax`, which this calls). ``progress``: a
    :class:`~flax_posenc.progress.Progress` shown the two steps, reading and writing.

    Atomic and exclusive: written to a temporary file beside ``out`` and linked into place only if
    nothing is there (``os.link``; with ``overwrite``, renamed over it); SIGTERM/SIGINT remove the
    temporary file. Refuses an existing ``out`` unless ``overwrite``, and a directory always;
    ``overwrite`` replaces only an output of flax-posenc of the same kind (a converted file; an
    orbax block or an extended checkpoint), and ``out`` may never be SOURCE, lie inside it or
    contain it, whatever its name (:func:`~flax_posenc.conversion.outputs.check_output`).
    Raises only CheckpointError (naming the file) for what cannot be read or written. Restore
    with ``TransformerInput.from_pretrained(out)`` (NNX or Linen) or
    :func:`~flax_posenc.conversion.converted_file.read_converted`.
    """
    bar = progress if progress is not None else Progress(2, enabled=False)
    out = Path(out)
    if format is not None and format not in CONVERTED_FORMATS:
        raise ValueError(f"format: expected one of {', '.join(CONVERTED_FORMATS)} or None, got {format!r}")
    if format == "orbax":
        if os.path.lexists(out) and not overwrite:
            raise CheckpointError(
                f"{out}: expected a new path, found an existing one (pass overwrite=True / --overwrite)"
            )
        check_output(out, kind="directory", sources=protected_paths(source), overwrite=overwrite)
        if not out.absolute().parent.is_dir():
            raise CheckpointError(f"{out}: expected an existing parent directory, found none at {out.parent}")
        spec, params, origin = bar.run("reading", lambda: _read_any(source, family))
        return bar.run(
            "writing (orbax)",
            lambda: save_orbax(out, spec, params, overwrite=overwrite, origin=origin, source=source),
        )
    suffixes = [_SUFFIXES[format]] if format is not None else list(_SUFFIXES.values())
    if not any(out.name.endswith(s) for s in suffixes):
        raise CheckpointError(
            f"{out}: expected an output file name ending in {' or '.join(suffixes)}, found {out.suffix or 'no suffix'!r}"
        )
    check_apart(out, protected_paths(source))  # the source rule speaks first, whatever is at out
    if out.exists() and not overwrite:
        raise CheckpointError(f"{out}: expected a new path, found an existing file (pass overwrite=True / --overwrite)")
    if not out.parent.is_dir():
        raise CheckpointError(f"{out}: expected an existing parent directory, found none at {out.parent}")
    if os.path.isdir(out):
        raise CheckpointError(f"{out}: expected a file path for the converted parameters, found a directory")
    check_output(out, kind="file", sources=protected_paths(source), overwrite=overwrite)
    spec, params, origin = bar.run("reading", lambda: _read_any(source, family))
    return bar.run("writing", lambda: write_converted(out, spec, params, origin=origin, overwrite=overwrite))


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
