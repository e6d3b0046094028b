"""Reading any tensor of a Hugging Face checkpoint: the public reader, numpy only.

:func:`open_checkpoint` resolves a checkpoint directory, a weights file (``.safetensors``,
``.bin``, a sharded ``*.index.json``) or a Hub model id into a :class:`CheckpointReader`:
``config`` (``config.json`` as a dict), ``names`` (every tensor name), ``info(name)`` (dtype and
shape from the header, nothing read) and ``tensor(name)`` (that one tensor as a numpy array,
read on demand). It is what :func:`~flax_posenc.conversion.load_position_table` and the whole
models of ``examples/models`` read with, and it keeps their rules:

- only files inside the checkpoint are read: a weights file, ``config.json`` or shard reached
  through a link leading out of the checkpoint directory is refused, and a shard index may name
  only plain file names beside it (never ``..``, an absolute path or another index);
- safetensors headers are checked as ``safetensors`` checks them, and only the requested
  tensor's bytes are read; a ``.bin`` is read with ``torch.load(weights_only=True)`` (torch is
  imported only then); a sharded checkpoint opens a shard when one of its tensors is read;
- every failure is one :class:`~flax_posenc.errors.CheckpointError` line naming the file, what
  was expected and what was found.

Example (a checkpoint written with ``safetensors.numpy``)::

    >>> import json, pathlib, tempfile
    >>> import numpy as np
    >>> from safetensors.numpy import save_file
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 4}))
    >>> save_file({"wpe.weight": np.arange(8, dtype=np.float32).reshape(4, 2)}, str(d / "model.safetensors"))
    >>> from flax_posenc.conversion import open_checkpoint
    >>> with open_checkpoint(d) as ckpt:
    ...     ckpt.config["n_positions"], ckpt.names, ckpt.info("wpe.weight")
    ...     ckpt.tensor("wpe.weight")[3]
    (4, ('wpe.weight',), ('F32', (4, 2)))
    array([6., 7.], dtype=float32)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from flax_posenc.conversion import sources
from flax_posenc.conversion.readers import TensorReader, fail, nearest_keys

__all__ = ["CheckpointReader", "open_checkpoint"]


class CheckpointReader:
    """A checkpoint's ``config.json`` and its tensors, read one at a time (see :func:`open_checkpoint`).

    Attributes:
      source: the SOURCE as given (for messages).
      config: ``config.json`` as a dict (``{}`` for a bare weights file with no ``config.json``
        beside it).
      config_path: the ``config.json`` read, or ``None``.
      weights_path: the weights file read (for a sharded checkpoint: its ``*.index.json``).

    Usable as a context manager: leaving the ``with`` block (or :meth:`close`) drops the open
    readers (a ``.bin`` state dict stays memory-mapped until then); a closed reader refuses
    :meth:`tensor` with one line.
    """

    def __init__(self, checkpoint: sources.Checkpoint):
        self.source = checkpoint.source
        self.config: dict[str, Any] = checkpoint.config
        self.config_path: Path | None = checkpoint.config_path
        self.weights_path: Path = checkpoint.weights_path
        self._reader: TensorReader | None = checkpoint.reader
        self._names = tuple(checkpoint.reader.keys())
        self._known = frozenset(self._names)

    @property
    def names(self) -> tuple[str, ...]:
        """Every tensor name, in the order the file (or shard index) lists them."""
        return self._names

    def keys(self) -> list[str]:
        """Every tensor name (a list, like ``dict.keys`` of a state dict)."""
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._known

    def __len__(self) -> int:
        return len(self._names)

    def _open_reader(self, name: object) -> TensorReader:
        if self._reader is None:
            raise fail(self.weights_path, "an open checkpoint reader", "one already closed")
        if not isinstance(name, str):
            raise fail(f"{self.weights_path}: tensor name", "a str", f"{type(name).__name__} {name!r:.60}")
        if name not in self._known:
            close = nearest_keys(name, self._names, n=3)
            hint = f"; close: {', '.join(close)}" if close else ""
            raise fail(
                self.weights_path,
                f"tensor {name!r} (one of its {len(self._names)} tensors{hint})",
                "no such tensor",
            )
        return self._reader

    def info(self, name: str) -> tuple[str, tuple[int, ...]]:
        """``(dtype, shape)`` of tensor ``name`` from the header alone, with safetensors dtype
        names (``"F32"``, ``"BF16"``, ``"I64"``, ...); no tensor data is read.

        Raises:
          CheckpointError: no such tensor (the line names the file, the name and close names).
        """
        return self._open_reader(name).info(name)

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a numpy array of its stored shape.

        Float tensors come back in their stored dtype (float16, float32, float64) except
        bfloat16, which numpy cannot hold and which comes back as float32 (exactly: a bfloat16
        is the top half of a float32); integer and bool tensors as stored. Values are returned
        as stored (NaN and Inf included: checking them is the caller's business).

        Raises:
          CheckpointError: no such tensor (the line names the file, the name and close names),
            a dtype numpy cannot hold (float8), a truncated file, a reader already closed.
        """
        return self._open_reader(name).read(name)

    def close(self) -> None:
        """Drop the open readers; :meth:`tensor` and :meth:`info` then refuse with one line."""
        self._reader = None

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CheckpointReader({self.source!r}, {len(self._names)} tensors, weights={self.weights_path.name!r})"


def open_checkpoint(source: str | os.PathLike, *, require_config: bool = True) -> CheckpointReader:
    """Open SOURCE for reading its ``config.json`` and any of its tensors, numpy only.

    Args:
      source: a checkpoint directory in Hugging Face layout (``config.json`` plus
        ``model.safetensors``, ``model.safetensors.index.json``, ``pytorch_model.bin`` or
        ``pytorch_model.bin.index.json``, in that order of preference), a weights file (a
        ``config.json`` beside it is read when present), or a Hub model id (local cache first;
        only ``config.json`` and the weights are fetched, shards on first use).
      require_config: a directory without ``config.json`` is an error (default); ``False``
        reads its weights with ``config == {}``.

    Returns:
      A :class:`CheckpointReader`: ``config``, ``names``/``keys()``, ``info(name)``,
      ``tensor(name)``; a context manager.

    Raises:
      CheckpointError: one line naming SOURCE (or the file at fault), what was expected and what
        was found: no such path, a directory without weights or ``config.json``, a file that is
        not a checkpoint, a link or shard leading out of the checkpoint, a ``sinusoidal:``
        source (it holds no tensors: :func:`~flax_posenc.conversion.load_position_table` computes it).

    >>> open_checkpoint("sinusoidal:8:4")
    Traceback (most recent call last):
    ...
    flax_posenc.errors.CheckpointError: sinusoidal:8:4: expected a checkpoint directory, a weights file or a Hub model id, found a computed sinusoid (no tensors to read; load_position_table computes it)
    """
    text = sources.source_text(source)
    if text.startswith(sources.SINUSOIDAL_PREFIX):
        raise fail(
            text[:80],
            "a checkpoint directory, a weights file or a Hub model id",
            "a computed sinusoid (no tensors to read; load_position_table computes it)",
        )
    return CheckpointReader(sources.open_checkpoint(source, require_config=require_config))
