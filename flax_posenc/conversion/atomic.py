"""Publishing an export atomically and exclusively, and cleaning up on SIGTERM/SIGINT.

An export is assembled in a hidden temporary sibling of its destination (``.NAME.tmp-*``) and
published only when complete:

- without ``overwrite``, :func:`publish_dir` claims the destination with ``os.mkdir`` (atomic,
  fails if anything is there) and renames the finished folder onto that empty claim; a file,
  a folder or anything else created at the destination meanwhile by someone else is never
  replaced (the rename onto a non-empty directory fails) and the export fails instead. Two
  processes exporting to one destination: exactly one succeeds. :func:`publish_file` does the
  same for a single file with ``os.link`` (fails if the name exists).
- with ``overwrite``, the old destination is first moved aside (into a hidden sibling), the new
  one claimed and renamed in, and only then is the old one deleted; if publishing fails the old
  one is put back.
- :func:`cleanup_on_signal` turns SIGTERM into an exception for the duration of the export, so
  the temporary folder is removed; the signal is then delivered again with its previous
  handler (by default the process still dies of SIGTERM). SIGINT raises KeyboardInterrupt,
  which cleans up the same way. ``kill -9`` cannot be caught: it may leave the hidden
  temporary sibling, never a partial destination.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> tmp = d / ".out.tmp"; tmp.mkdir(); _ = (tmp / "x").write_text("x")
>>> publish_dir(tmp, d / "out", overwrite=False).name
'out'
>>> sorted(p.name for p in d.iterdir())
['out']
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from flax_posenc.errors import CheckpointError


class Terminated(BaseException):
    """SIGTERM arrived during an export (raised by :func:`cleanup_on_signal`'s handler)."""


@contextlib.contextmanager
def cleanup_on_signal() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` (so ``finally``/``except`` clean up);
    on the way out a caught SIGTERM is re-delivered with the previous handler.

    Only in the main thread (signal handlers can only be set there); elsewhere a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # die (or run the caller's handler) as asked
        raise KeyboardInterrupt("terminated (SIGTERM)") from None  # a Python handler returned
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


#: for tests only: a directory. When set, an export stops at each hold point (:func:`hold`),
#: so a test can act at a known state instead of after a duration.
TEST_HOLD_ENV = "FLAX_POSENC_TEST_HOLD"


def hold(point: str) -> None:
    """A test hook: with :data:`TEST_HOLD_ENV` naming a directory, create ``POINT.held`` there and
    wait until ``POINT.release`` exists (a signal delivered meanwhile is handled as anywhere else).
    Without the variable: nothing, at the cost of one environment lookup.

    Hold points: ``"copying"``, in an export, after the first chunk of a copied file is written
    into the temporary folder (the export is then known to be in progress, unfinished).
    """
    folder = os.environ.get(TEST_HOLD_ENV)
    if not folder:
        return
    Path(folder, f"{point}.held").touch()
    release = Path(folder, f"{point}.release")
    while not release.exists():
        time.sleep(0.005)


def _taken(out: Path) -> CheckpointError:
    return CheckpointError(
        f"{out}: expected a new export target (or overwrite), found it already exists "
        "(created by someone else during the export; it was left untouched)"
    )


def _claim(out: Path) -> None:
    """Create ``out`` as an empty directory, exclusively."""
    try:
        os.mkdir(out)
    except FileExistsError:
        raise _taken(out) from None


def _rename_onto_claim(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` onto the empty directory ``out`` we just created (fails if it was filled)."""
    try:
        os.rename(tmp, out)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise _taken(out) from None
        with contextlib.suppress(OSError):
            os.rmdir(out)  # our empty claim
        raise


def publish_dir(tmp: Path, out: Path, *, overwrite: bool) -> Path:
    """Move the finished folder ``tmp`` to ``out`` (see the module docstring); returns ``out``."""
    if not overwrite or not os.path.lexists(out):
        _claim(out)
        _rename_onto_claim(tmp, out)
        return out
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, aside / "old")
    try:
        _claim(out)
        try:
            _rename_onto_claim(tmp, out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rmdir(out)  # our claim, if still empty (never anything someone put there)
            raise
    except BaseException:
        if not os.path.lexists(out):
            os.rename(aside / "old", out)
            os.rmdir(aside)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    return out


def publish_file(tmp: Path, out: Path, *, overwrite: bool) -> Path:
    """Move the finished file ``tmp`` to ``out``: exclusively (``os.link``) unless ``overwrite``."""
    if overwrite:
        if os.path.isdir(out) and not os.path.islink(out):
            raise CheckpointError(f"{out}: expected a file to overwrite, found a directory")
        os.replace(tmp, out)
        return out
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise CheckpointError(
            f"{out}: expected a new path, found an existing file (pass overwrite=True / --overwrite)"
        ) from None
    os.unlink(tmp)
    return out


__all__ = ["TEST_HOLD_ENV", "Terminated", "cleanup_on_signal", "hold", "publish_dir", "publish_file"]
