"""The library's own error types (no jax or numpy import: usable from any layer)."""

from __future__ import annotations


class PositionLimitError(ValueError):
    """A position lies outside the table it indexes.

    Raised instead of JAX's silent behaviour (``x[i]`` clamps, ``jnp.take`` fills with NaN).
    The message names the table, its limit and the position or length asked for, e.g.::

        PositionLimitError: gpt2 position table (wpe) holds 1024 positions (0..1023);
        asked for 1025 positions (0..1024)
    """


class CheckpointError(ValueError):
    """A checkpoint (file, directory, hub id or config) cannot be read as asked.

    Every message is one line: which file, what was expected, what was found.
    """
