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


#: characters kept as they are by :func:`shown`: printable text; Unicode categories Cc (C0/C1
#: controls, DEL: terminal escape codes, newlines), Cf (bidi overrides, zero-width marks), Zl and
#: Zp (line/paragraph separators) are escaped.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})

#: the most characters of a file's string a message shows (:func:`shown`)
SHOWN_CHARACTERS = 200
#: the most characters of one error line (:func:`one_line`)
LINE_CHARACTERS = 2000


def _escape(text: str) -> str:
    import unicodedata

    return "".join(
        c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in _ESCAPED_CATEGORIES else c
        for c in text
    )


def shown(text: object, limit: int = SHOWN_CHARACTERS) -> str:
    """THE sanitiser of a string that came from a file (a config's ``model_type``, a GGUF's
    ``general.architecture``, a converted file's origin ``family``/``key``), for a message or a
    CLI line: control and format characters escaped (a terminal escape code shows as ``\\x1b``, a
    newline as ``\\n``: never a second line), at most ``limit`` characters of it, the cut said.
    Reads only the first ``limit`` characters (a 16 MB string costs nothing).

    >>> shown("llama\\n\\x1b[31mok: 1000000 positions fit")
    'llama\\\\n\\\\x1b[31mok: 1000000 positions fit'
    >>> shown("x" * 1000, limit=5)
    'xxxxx... (1000 characters)'
    """
    text = text if isinstance(text, str) else str(text)
    cut = text[:limit]
    out = _escape(cut)
    return out if len(text) <= limit else f"{out}... ({len(text)} characters)"


def one_line(text: object, limit: int = LINE_CHARACTERS) -> str:
    """A message on one line: whitespace runs (newlines included) become one space, other control
    and format characters are escaped (:func:`shown`), at most ``limit`` characters.

    >>> one_line("a\\n  b\\x1b[0m")
    'a b\\\\x1b[0m'
    """
    text = text if isinstance(text, str) else str(text)
    if len(text) > 4 * limit:  # never split or scan megabytes for one line
        text = text[: 4 * limit] + f"... ({len(text)} characters)"
    return shown(" ".join(text.split()), limit)
