"""The one sentence that names a position limit, and the host-side check that raises it.

No jax import: the conversion layer and the command line describe limits with the same words
as the on-device guard (:mod:`flax_posenc.overflow`), whose run-time errors call
:func:`check_positions` on the host too, so a static error, a run-time error and the CLI's
verdict all read alike::

    gpt2 position table (wpe.weight) holds 1024 positions (0..1023); asked for position 1024, 1 past the end

Every "holds" phrase is built here: :func:`describe_limit` (N positions), :func:`limit_name`
(what holds them and why: :func:`rope_limit_reason`, :data:`ALIBI_LIMIT_REASON`),
:func:`describe_grid` (a grid of patches) and :func:`describe_seconds` (seconds of audio). A
record names the config field its limit comes from (``max_position_embeddings``, or a GGUF
file's ``llama.context_length``) through ``length_field``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from flax_posenc.errors import PositionLimitError

__all__ = [
    "ALIBI_LIMIT_REASON",
    "OVERFLOW_POLICIES",
    "NoLimit",
    "OverflowPolicy",
    "check_policy",
    "check_positions",
    "describe_grid",
    "describe_limit",
    "describe_seconds",
    "grid_phrase",
    "limit_name",
    "length_verdict",
    "lowest_position",
    "prefix_text",
    "rope_limit_reason",
    "verdict_line",
]

#: what a position past the limit does when it is known only at run time (see :mod:`flax_posenc.overflow`,
#: which re-exports these names): ``"error"`` fails the call, ``"clip"`` clamps, ``"fill"`` gives NaN.
OverflowPolicy = Literal["error", "clip", "fill"]
OVERFLOW_POLICIES: tuple[str, ...] = ("error", "clip", "fill")


def check_policy(on_overflow: str) -> None:
    """``ValueError`` unless ``on_overflow`` is one of :data:`OVERFLOW_POLICIES`.

    >>> check_policy("clamp")
    Traceback (most recent call last):
    ...
    ValueError: on_overflow: expected one of ('error', 'clip', 'fill'), got 'clamp'
    """
    if on_overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"on_overflow: expected one of {OVERFLOW_POLICIES}, got {on_overflow!r}")


def describe_limit(name: str, rows: int, offset: int = 0, *, unit: str = "position") -> str:
    """``"<name> holds 1024 positions (0..1023)"``, with reserved rows mentioned.

    Args:
      name: the table's name (family, key), as it should appear to a user.
      rows: stored rows, reserved rows included.
      offset: reserved leading rows (RoBERTa/OPT's 2), reached only by negative positions.
      unit: what a row is called (singular): ``"position"``, ``"type"`` (token types),
        ``"id"`` (word ids).

    >>> describe_limit("roberta position table", 514, 2)
    'roberta position table holds 512 positions (0..511) after 2 reserved rows'
    >>> describe_limit("token type table", 2, unit="type")
    'token type table holds 2 types (0..1)'
    """
    usable = rows - offset
    reserved = f" after {offset} reserved rows" if offset else ""
    return f"{name} holds {usable} {unit}{'' if usable == 1 else 's'} (0..{usable - 1}){reserved}"


#: Why an ALiBi model has the limit it has: its config sets one (ALiBi's bias has none).
ALIBI_LIMIT_REASON = "configured limit; ALiBi itself has none"


def limit_name(what: str, reason: str = "", *, of: str | None = None) -> str:
    """What holds the positions, why, and of which SOURCE: the subject of every limit sentence.

    >>> limit_name("llama3 RoPE", "max_position_embeddings 8192")
    'llama3 RoPE (max_position_embeddings 8192)'
    >>> limit_name("llama llama3 RoPE", "max_position_embeddings 8192", of="path/to/llama")
    'llama llama3 RoPE (max_position_embeddings 8192) of path/to/llama'
    """
    name = f"{what} ({reason})" if reason else what
    return f"{name} of {of}" if of else name


def larger_of(parts: Sequence[str]) -> str:
    """``""``, the one part, or ``"the larger of A and B"``."""
    return (parts[0] if len(parts) == 1 else f"the larger of {' and '.join(parts)}") if parts else ""


def rope_limit_reason(
    max_position_embeddings: int | None,
    scaled_limit: int | None = None,
    factor: float | None = None,
    trained_length: int | None = None,
    *,
    length_field: str = "max_position_embeddings",
) -> str:
    """Why a RoPE model holds the positions it holds: its declared length and its scaled one.

    >>> rope_limit_reason(8192, 65536, 8.0, 8192)
    'the larger of max_position_embeddings 8192 and scaled 8 x 8192 = 65536'
    >>> rope_limit_reason(4096, length_field="llama.context_length")
    'llama.context_length 4096'
    """
    parts = [f"{length_field} {max_position_embeddings}"] if max_position_embeddings else []
    if scaled_limit is not None:
        parts.append(f"scaled {factor:g} x {trained_length} = {scaled_limit}")
    return larger_of(parts)


def prefix_text(n: int) -> str:
    """``" + 1 class token"``, ``" + class and distillation tokens"``, ``""`` or ``" + n prefix tokens"``."""
    return {0: "", 1: " + 1 class token", 2: " + class and distillation tokens"}.get(n, f" + {n} prefix tokens")


def grid_phrase(grid: tuple[int, int], prefix_tokens: int = 0, detail: str = "") -> str:
    """``"a 14 x 14 grid of patches + 1 class token (197 positions)"``: what a position grid holds;
    ``detail`` (the image and patch sizes) goes in the parentheses.

    >>> grid_phrase((14, 14), 1, "224 px / 16")
    'a 14 x 14 grid of patches + 1 class token (197 positions; 224 px / 16)'
    """
    gh, gw = grid
    more = f"; {detail}" if detail else ""
    return f"a {gh} x {gw} grid of patches{prefix_text(prefix_tokens)} ({prefix_tokens + gh * gw} positions{more})"


def describe_grid(name: str, grid: tuple[int, int], prefix_tokens: int = 0, detail: str = "") -> str:
    """``"<name> holds a 14 x 14 grid of patches + 1 class token (197 positions)"`` (:func:`grid_phrase`).

    >>> describe_grid("position grid", (2, 2))
    'position grid holds a 2 x 2 grid of patches (4 positions)'
    """
    return f"{name} holds {grid_phrase(grid, prefix_tokens, detail)}"


def describe_seconds(name: str, seconds: str, positions: int, per_second: float) -> str:
    """``"<name> holds 30 s of audio (1500 positions at 50 per second)"``."""
    return f"{name} holds {seconds} of audio ({positions} positions at {per_second:g} per second)"


def check_positions(
    lowest: int, highest: int, *, rows: int, offset: int = 0, name: str = "position table", unit: str = "position"
) -> None:
    """Raise :class:`PositionLimitError` unless rows ``offset + lowest .. offset + highest`` exist.

    Position ``-1`` reaches the padding row ``offset - 1`` of a table with reserved rows (the
    convention of RoBERTa/MPNet/OPT); anything below it, or past the table, raises, naming the
    table, its limit and the worst position asked for. Python integers of any size are compared
    exactly (no cast).

    >>> check_positions(0, 1023, rows=1024)          # fits: returns None
    >>> check_positions(0, 1024, rows=1024, name="gpt2 position table (wpe.weight)")
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: gpt2 position table (wpe.weight) holds 1024 positions (0..1023); asked for position 1024, 1 past the end
    """
    holds = describe_limit(name, rows, offset, unit=unit)
    if lowest < lowest_position(offset):
        where = "below the padding row (position -1)" if offset else "below the first row"
        raise PositionLimitError(f"{holds}; asked for {unit} {lowest}, {where}")
    if offset + highest >= rows:
        excess = offset + highest - rows + 1
        raise PositionLimitError(f"{holds}; asked for {unit} {highest}, {excess} past the end")


def lowest_position(offset: int) -> int:
    """The lowest valid position: ``-1`` (the padding row) with reserved rows, else ``0``.

    >>> lowest_position(2), lowest_position(0)  # RoBERTa reserves 2 rows; GPT-2 none
    (-1, 0)
    """
    return -1 if offset else 0


def length_verdict(length: int, *, rows: int, offset: int = 0, name: str = "position table") -> tuple[bool, str]:
    """Whether ``length`` positions (``0 .. length - 1``) fit, and one line saying so.

    The command line's ``check`` prints this line.

    >>> length_verdict(513, rows=512, name="bert position table")
    (False, 'bert position table holds 512 positions (0..511); asked for 513 positions (0..512): 1 past the limit')
    """
    return verdict_line(length, rows - offset, describe_limit(name, rows, offset))


class NoLimit:
    """A source record whose mechanism refuses no length: ``limit`` is ``None`` and
    ``check_length(n)`` always fits, saying why in the record's own ``describe_limit()``.

    (NoPE layers, models without positions, DeBERTa's relative positions, computed sinusoids.)
    """

    @property
    def limit(self) -> None:
        return None

    def check_length(self, length: int) -> tuple[bool, str]:
        return verdict_line(length, None, self.describe_limit())  # type: ignore[attr-defined]


def verdict_line(length: int, limit: int | None, holds: str) -> tuple[bool, str]:
    """The verdict sentence for any source: ``holds`` is its limit phrase, ``limit`` ``None`` for none.

    Tables (:func:`length_verdict`), RoPE/ALiBi configs and relative-bias sources all say "fits" and
    "past the limit" with these words.

    >>> verdict_line(10, None, "bloom ALiBi has no configured limit")
    (True, 'ok: 10 positions fit; bloom ALiBi has no configured limit')
    >>> verdict_line(10, 8, "x holds 8 positions (0..7)")[1]
    'x holds 8 positions (0..7); asked for 10 positions (0..9): 2 past the limit'
    """
    if limit is None or length <= limit:
        spare = "" if limit is None else f" ({limit - length} to spare)"
        return True, f"ok: {length} positions fit; {holds}{spare}"
    return False, f"{holds}; asked for {length} positions (0..{length - 1}): {length - limit} past the limit"


def describe_receptive_field(name: str, frames: int, frame_seconds: float, detail: str = "") -> str:
    """``"<name> has no position limit: each output frame sees 128 frames = 2.56 s of audio"``:
    the sentence of a convolutional position embedding (wav2vec2), whose reach, not a length, is
    what it has (``frame_seconds``: one frame of the feature encoder, wav2vec2's 0.02 s).

    >>> describe_receptive_field("wav2vec2 position convolution", 128, 0.02)
    'wav2vec2 position convolution has no position limit: each output frame sees 128 frames = 2.56 s of audio'
    """
    return (
        f"{name} has no position limit: each output frame sees {frames} frame{'' if frames == 1 else 's'}"
        f" = {frames * frame_seconds:g} s of audio{detail}"
    )
