"""Containment and bounded parsing: what every path and every JSON blob goes through.

Checkpoints are untrusted input. Three rules, each one function here:

- :func:`regular_file`: only regular files are read (a FIFO, a device such as ``/dev/zero``, a
  socket or a directory is a one-line :class:`~flax_posenc.errors.CheckpointError`, named as
  what it is, never "no such file").
- :func:`contained`: a path derived from a checkpoint (a shard named by an index, a Hub cache
  entry, a file met while copying) must resolve -- symlinks followed -- inside the checkpoint's
  root, else it is refused *before* it is opened or even probed.
- :func:`load_json`: JSON (``config.json``, shard indexes, safetensors headers) is parsed with a
  size cap, at most :data:`MAX_JSON_DEPTH` levels of nesting, integers of at most
  :data:`MAX_INT_DIGITS` digits, and (where asked) no ``NaN``/``Infinity`` constants.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "a.json").write_text('{"x": [1, 2]}')
>>> load_json(d / "a.json", what="a test file")
{'x': [1, 2]}
>>> try:
...     contained(d, d / ".." / "elsewhere", what="a shard")
... except CheckpointError as e:
...     print(str(e).split(", found ")[1])
a path outside it (refused, not read)
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from flax_posenc.errors import CheckpointError, one_line

#: nesting levels allowed in any JSON we read (Hugging Face configs use fewer than 6).
MAX_JSON_DEPTH = 64
#: digits allowed in a JSON integer (a 64-bit offset has 20).
MAX_INT_DIGITS = 32
#: bytes allowed in a config.json or a shard index (real ones are below 1 MB).
MAX_JSON_BYTES = 64 << 20


def _one_line(text: object) -> str:
    return one_line(text)


def _fail(where: object, expected: str, found: str) -> CheckpointError:
    return CheckpointError(_one_line(f"{where}: expected {expected}, found {found}"))


def kind_of(mode: int) -> str:
    """``"a directory"``, ``"a FIFO"``, ``"a character device"``, ... for an ``st_mode``."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def kind_of_output(path: os.PathLike | str, *, directory: str = "a directory") -> str:
    """What stands at an output ``path`` that flax-posenc did not write, for a refusal: ``"a symbolic
    link"``, ``directory``, ``"a file not written by flax-posenc"``, ``"a FIFO (named pipe)"``, ..."""
    if os.path.islink(path):
        return "a symbolic link"
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "an unreadable path"
    if stat.S_ISDIR(mode):
        return directory
    if stat.S_ISREG(mode):
        return "a file not written by flax-posenc"
    return kind_of(mode)


def regular_file(path: str | os.PathLike, *, what: str) -> os.stat_result:
    """``os.stat(path)`` (symlinks followed) when it is a regular file, else CheckpointError.

    The error names what the path is (a directory, a FIFO, a device, a dangling link, nothing).
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        found = "a dangling symbolic link" if path.is_symlink() else "no such file"
        raise _fail(path, what, found) from None
    except OSError as e:
        raise _fail(path, what, f"{type(e).__name__}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _fail(path, f"{what} (a regular file)", kind_of(st.st_mode))
    return st


def is_inside(path: Path, root: Path) -> bool:
    """Whether ``path`` resolves (symlinks followed) to ``root`` or somewhere below it."""
    try:
        real = Path(os.path.realpath(path))
        base = Path(os.path.realpath(root))
    except (OSError, ValueError):
        return False
    return real == base or base in real.parents


def contained(root: str | os.PathLike, path: str | os.PathLike, *, what: str) -> Path:
    """``path`` itself (not resolved: its name still tells its format), when it resolves inside
    ``root`` (both resolved), else CheckpointError.

    Nothing is opened or probed outside ``root``: the check uses ``realpath`` only.
    """
    path, root = Path(path), Path(root)
    if not is_inside(path, root):
        raise _fail(path, f"{what} inside {root}", "a path outside it (refused, not read)")
    return path


def checkpoint_boundary(directory: str | os.PathLike) -> Path:
    """The folder a checkpoint directory's files must resolve into.

    The directory itself; for a Hugging Face cache snapshot (``models--org--name/snapshots/REV``,
    whose files are links into ``../../blobs``), the repository folder ``models--org--name``.
    """
    directory = Path(directory)
    real = Path(os.path.realpath(directory))
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith(("models--", "datasets--")):
        return real.parent.parent
    return directory


def safe_member_name(name: object, *, where: object, what: str) -> str:
    """A file name from an index: relative, no ``..`` component, no NUL; else CheckpointError."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise _fail(where, f"{what} as a relative file name", repr(name)[:120])
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or os.path.isabs(name) or ".." in parts or (len(name) > 1 and name[1] == ":"):
        raise _fail(where, f"{what} as a file name inside the checkpoint", f"{name[:120]!r} (refused, not read)")
    return name


def _bad_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _JsonLimit(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


#: a run of more digits than any accepted integer has; without one, no integer can break the bound,
#: so the per-integer Python hook is skipped (same decisions, the C parser's speed).
_LONG_DIGITS = re.compile("[0-9]{" + str(MAX_INT_DIGITS + 1) + "}")
#: bytes.translate table: ASCII digits -> b"0", every other byte -> b" " (UTF-8 multi-byte
#: characters never contain the bytes 0x30-0x39, so a digit run in the bytes is one in the text).
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * (MAX_INT_DIGITS + 1)


def _has_long_digit_run(raw: bytes | str) -> bool:
    """Whether ``raw`` holds more than :data:`MAX_INT_DIGITS` ASCII digits in a row.

    ``_LONG_DIGITS.search`` decides the same; for bytes, one ``translate`` and one substring
    search in C are ~10x faster than the regular expression, which tries every position.
    """
    if isinstance(raw, (bytes, bytearray)):
        return _LONG_RUN in raw.translate(_DIGITS_TO_ZERO)
    return _LONG_DIGITS.search(raw) is not None


def _no_constant(text: str) -> Any:
    raise _JsonLimit(f"the non-JSON constant {text}")


class _JsonLimit(ValueError):
    pass


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, level by level (no recursion; stops past the bound).

    Each level is one list comprehension over the containers' children that keeps only the
    containers: a header's thousands of leaves cost one ``isinstance`` each, in C loops.
    """
    if not isinstance(value, _CONTAINERS):
        return 0
    level, nodes = 1, [value]
    while level <= MAX_JSON_DEPTH:
        nodes = [
            child
            for node in nodes
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, _CONTAINERS)
        ]
        if not nodes:
            return level
        level += 1
    return level


_CONTAINERS = (dict, list)


def parse_json(raw: bytes | str, *, where: object, what: str, allow_constants: bool = False) -> Any:
    """Parse JSON text with the bounds above; any failure is one CheckpointError line."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        hooks: dict[str, Any] = {"parse_int": _bad_int} if _has_long_digit_run(raw) else {}
        if not allow_constants:
            hooks["parse_constant"] = _no_constant
        value = json.loads(text, **hooks)
    except _JsonLimit as e:
        raise _fail(where, f"{what} (bounded JSON)", str(e)) from None
    except RecursionError:
        raise _fail(where, f"{what} (JSON nested at most {MAX_JSON_DEPTH} deep)", "deeper nesting") from None
    except UnicodeDecodeError as e:
        raise _fail(where, f"{what} (UTF-8 JSON)", f"undecodable bytes ({e.reason} at byte {e.start})") from None
    except ValueError as e:  # JSONDecodeError and int-conversion limits
        raise _fail(where, f"{what} (JSON)", f"{type(e).__name__}: {str(e)[:160]}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise _fail(where, f"{what} (JSON nested at most {MAX_JSON_DEPTH} deep)", "deeper nesting")
    return value


def load_json(
    path: str | os.PathLike, *, what: str, max_bytes: int = MAX_JSON_BYTES, allow_constants: bool = False
) -> Any:
    """Read and parse a JSON *regular file* of at most ``max_bytes`` bytes (see :func:`parse_json`)."""
    path = Path(path)
    st = regular_file(path, what=what)
    if st.st_size > max_bytes:
        raise _fail(path, f"{what} of at most {max_bytes} bytes", f"{st.st_size} bytes")
    try:
        with open(path, "rb") as f:
            raw = f.read(st.st_size + 1)  # never a max_bytes buffer for a small file
    except OSError as e:
        raise _fail(path, f"a readable {what}", f"{type(e).__name__}: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise _fail(path, f"{what} of at most {max_bytes} bytes", "more (the file grew while read)")
    return parse_json(raw, where=path, what=what, allow_constants=allow_constants)


__all__ = [
    "MAX_INT_DIGITS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "checkpoint_boundary",
    "contained",
    "is_inside",
    "kind_of",
    "kind_of_output",
    "load_json",
    "parse_json",
    "regular_file",
    "safe_member_name",
]
