"""THE overwrite rule: where an output of flax-posenc may be written, and what ``overwrite`` may replace.

Every output kind goes through :func:`check_output` before anything is read or written: an
extended checkpoint (``extend``, :func:`~flax_posenc.conversion.export_position_table`), an orbax
directory (``convert --format orbax``, ``save_orbax``), a converted file (``convert`` to
``.safetensors``/``.msgpack``, ``save_converted``, ``write_converted``). Two rules, whatever the
output's name or suffix:

1. **Apart from the source.** An output path that *is* the source, lies *inside* it or
   *contains* it (a parent folder of it) is refused, with or without ``overwrite``: writing
   there would replace or delete what is being read. Paths are compared after resolving
   symbolic links; a Hub id's source is its repository folder in the cache. ``plot --out``
   writes only its own figure files, never deletes, so it is refused only inside or at the
   source (:func:`check_apart`, ``containing_ok=True``).
2. **``overwrite`` replaces only an output flax-posenc wrote**, of the same kind, recognised by
   its marker: a directory holding :data:`EXPORT_MARKER` (an extended checkpoint) or a
   flax-posenc orbax metadata item (``flax_posenc/metadata``); a file that is a converted file
   (a ``.safetensors`` whose metadata says ``format: flax-posenc/input-spec``, a ``.msgpack`` whose
   first map holds ``format`` or ``config`` and ``params``). A symbolic link, a folder of other
   files, someone's checkpoint, a FIFO: refused, left untouched.

Each refusal is one :class:`~flax_posenc.errors.CheckpointError` line naming the output.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "src").mkdir()
>>> try:
...     check_output(d, kind="directory", sources=protected_paths(d / "src"), overwrite=True)
... except CheckpointError as e:
...     print(str(e).split(", found ")[1])
a path that contains the source (refused: nothing was written or deleted)
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from flax_posenc.conversion.converted_file import is_own_converted_file
from flax_posenc.conversion.orbax_file import read_orbax_metadata
from flax_posenc.conversion.safety import checkpoint_boundary, kind_of_output
from flax_posenc.conversion.sources import SINUSOIDAL_PREFIX, hub_cache_dir, looks_like_repo_id, repo_folder
from flax_posenc.errors import CheckpointError

#: the file an extended checkpoint (``extend``) holds, marking it as an output of flax-posenc.
EXPORT_MARKER = "flax_posenc_export.json"
#: its ``format`` field.
EXPORT_FORMAT = "flax-posenc/extended-checkpoint"
#: bytes read of a marker when recognising an output.
_SNIFF_BYTES = 1 << 16


def _one_line(text: str) -> str:
    return " ".join(text.split())


def protected_paths(source: object) -> list[Path]:
    """The resolved paths SOURCE is read from, which no output may be, be inside or contain.

    A local path: itself (resolved), the ``config.json`` read beside a weights file, and for a
    Hugging Face cache snapshot its repository folder (``models--org--name``, where its files'
    blobs are). A Hub model id that is no local path: its repository folder in the cache.
    ``sinusoidal:L:D`` and anything else: none.
    """
    if not isinstance(source, (str, os.PathLike)):
        return []
    text = os.fspath(source)
    if not isinstance(text, str) or "\x00" in text or text.startswith(SINUSOIDAL_PREFIX):
        return []
    path = Path(text).expanduser()
    if os.path.lexists(path):
        found = [Path(os.path.realpath(path))]
        folder = path if path.is_dir() else path.parent
        if not path.is_dir() and os.path.lexists(folder / "config.json"):
            found.append(Path(os.path.realpath(folder / "config.json")))
        boundary = checkpoint_boundary(folder)
        if Path(os.path.realpath(boundary)) != Path(os.path.realpath(folder)):  # a Hub snapshot
            found.append(Path(os.path.realpath(boundary)))
        return found
    if isinstance(source, str) and looks_like_repo_id(text):
        return [Path(os.path.realpath(repo_folder(text, hub_cache_dir())))]
    return []


def check_apart(out: str | os.PathLike, sources: Iterable[Path], *, containing_ok: bool = False) -> None:
    """Rule 1: refuse ``out`` when it is, lies inside or (unless ``containing_ok``) contains a source."""
    real = Path(os.path.realpath(out))
    for src in sources:
        if real == src:
            relation = "is the source"
        elif src in real.parents:
            relation = "is inside the source"
        elif real in src.parents and not containing_ok:
            relation = "contains the source"
        else:
            continue
        raise CheckpointError(
            _one_line(
                f"{out}: expected an output path apart from the source {src}, "
                f"found a path that {relation} (refused: nothing was written or deleted)"
            )
        )


def _small_json(path: Path) -> object:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _SNIFF_BYTES:
            return None
        with open(path, "rb") as f:
            return json.loads(f.read(_SNIFF_BYTES))
    except (OSError, ValueError, RecursionError):
        return None


def own_output(path: str | os.PathLike) -> str | None:
    """What output of flax-posenc ``path`` is (``"an extended checkpoint"``, ``"an orbax input
    block"``, ``"a converted file"``), or ``None`` when it is not one (a link, a folder of other
    files, someone's checkpoint). Reads only small markers."""
    path = Path(path)
    if os.path.islink(path):
        return None
    if path.is_dir():
        marker = _small_json(path / EXPORT_MARKER)
        if isinstance(marker, dict) and marker.get("format") == EXPORT_FORMAT:
            return "an extended checkpoint"
        try:
            read_orbax_metadata(path)
        except CheckpointError:
            return None
        return "an orbax input block"
    return "a converted file" if is_own_converted_file(path) else None


def check_output(out: str | os.PathLike, *, kind: str, sources: Iterable[Path], overwrite: bool) -> None:
    """Both rules for one output (see the module docstring); ``kind``: ``"directory"`` or ``"file"``.

    Raises:
      CheckpointError: ``out`` is, lies inside or contains a source; ``out`` exists and
        ``overwrite`` is false; or ``out`` exists and is not an output of flax-posenc of that kind.
    """
    out = Path(out)
    check_apart(out, sources)
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise CheckpointError(f"{out}: expected a new path, found an existing one (pass overwrite=True / --overwrite)")
    what = own_output(out)
    fits = what is not None and (what == "a converted file") == (kind == "file")
    if not fits:
        expected = (
            "an extended checkpoint or an orbax input block written by flax-posenc"
            if kind == "directory"
            else "a converted file written by flax-posenc"
        )
        found = (
            what
            if what is not None
            else kind_of_output(out, directory="a directory not written by flax-posenc (no flax-posenc marker)")
        )
        raise CheckpointError(_one_line(f"{out}: expected {expected} to overwrite, found {found} (left untouched)"))


__all__ = ["EXPORT_FORMAT", "EXPORT_MARKER", "check_apart", "check_output", "own_output", "protected_paths"]
