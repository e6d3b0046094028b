"""What the ``flax-posenc`` command and its ``tour`` print besides their reports.

The program name (:data:`PROG`), the one-line usage error (:class:`UsageError`, exit 2) and the
figures of a SOURCE record written with their notes (:func:`make_figures`; for ``plot``, half of
them in a forked child process when two CPUs are idle). Both
:mod:`flax_posenc.report.cli` and :mod:`flax_posenc.report.tour` import them from here, so neither imports
the other back (plots, and matplotlib with it, are imported only when figures are drawn).

>>> one_line(ValueError("two   words"))
'two words'
"""

from __future__ import annotations

import builtins
import functools
import os
import pickle
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flax_posenc import errors
from flax_posenc.progress import Progress
from flax_posenc.report import plots

__all__ = ["PROG", "UsageError", "make_figures", "one_line"]

PROG = "flax-posenc"


class UsageError(Exception):
    """Bad input on the command line: one line, exit 2. ``prog`` names the (sub)command."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    text = errors.one_line(str(exc))  # control characters escaped, length capped
    return text or type(exc).__name__


def make_figures(
    record, out: Path, *, dims: Sequence[int] | None, prefix: str, progress: bool, parallel: bool = False
) -> list[Path]:
    """Every figure of a :class:`~flax_posenc.conversion.SourceRecord` into ``out``; downsampling notes to stderr.

    A bad ``--dims`` or a table without usable rows is a :class:`UsageError` (exit 2).
    ``parallel`` (``flax-posenc plot``): draw every other figure in a forked child process when
    :func:`_can_fork` says it is safe and useful (issue 38: the figures are independent, and the
    machine has a second core); the paths, notes and errors are the sequential run's.
    """
    try:
        jobs = plots.figure_jobs(record, out, dims=dims, prefix=prefix)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    forked = parallel and len(jobs) > 1 and _can_fork()  # before the bar: tqdm starts a thread
    bar = Progress(len(jobs), progress)
    if forked:
        results = _run_forked(jobs, bar)
    else:
        results = [bar.run(label.replace("_", " "), functools.partial(_run_job, draw)) for label, draw in jobs]
    bar.close()
    for _, notes in results:
        for note in notes:
            print(f"{PROG}: note: {note}", file=sys.stderr)
    return [path for paths, _ in results for path in paths]


def _run_job(draw: Callable[[], list[Path]]) -> tuple[list[Path], list[str]]:
    """One figure job: its paths and its downsampling notes (other warnings are dropped, as before)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.DownsampledWarning)
        paths = draw()
    notes = [w.message for w in caught if issubclass(w.category, plots.DownsampledWarning)]
    return paths, [one_line(note) for note in notes]  # type: ignore[arg-type]


def _can_fork() -> bool:
    """Whether drawing in a forked child is safe and can help: Linux (``fork`` without the
    macOS caveats), no other Python thread (a forked child holds copies of their locks), jax not
    imported (its threads make ``fork`` deadlock-prone), and two CPUs to run on now
    (:func:`_idle_cpus`: on a busy machine a second process only competes with the first,
    measured slower in docs/benchmarks.md). ``flax-posenc plot`` imports numpy and matplotlib
    only, so it qualifies on an idle machine."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork") or "jax" in sys.modules:
        return False
    return threading.active_count() == 1 and _idle_cpus() >= 2


def _idle_cpus() -> int:
    """CPUs this process may run on, less the tasks runnable on the machine now besides this one
    (``/proc/loadavg``'s fourth field: a snapshot, not the 1-minute average, which the previous
    command's own run would raise); 0 when unknown."""
    try:
        cpus = len(os.sched_getaffinity(0))
        with open("/proc/loadavg", encoding="ascii") as f:
            runnable = int(f.read().split()[3].split("/")[0])
    except (AttributeError, OSError, ValueError, IndexError):
        return 0
    return cpus - max(runnable - 1, 0)


def _interrupt(signum, frame):  # a SIGTERM from the parent: unwind, so _save removes its temporary file
    raise KeyboardInterrupt


def _run_forked(jobs: list[tuple[str, Callable[[], list[Path]]]], bar: Progress) -> list[tuple[list[Path], list[str]]]:
    """Run ``jobs`` on two processes: the odd ones in a forked child, the even ones here.

    The child sends back each job's ``(paths, notes)``, or its first error: the exception
    pickled (or, when it does not pickle, its class name, nearest built-in class and one-line
    message) with its traceback as text, raised here as the error's cause. It leaves with
    ``os._exit`` (no atexit handlers, no flushing of the parent's buffers). Every PNG is written
    by :func:`plots._save` (a temporary file renamed), so nothing is half-written; on errors the
    lowest-numbered job's is raised, as the sequential run would; on Ctrl-C or another
    ``BaseException`` here, the child is stopped (``SIGTERM``, turned into ``KeyboardInterrupt``
    so its temporary file is removed) and waited for.
    """
    theirs = list(range(1, len(jobs), 2))
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: draw its figures, report, and leave without running the parent's cleanup
        try:
            os.close(read_fd)
            signal.signal(signal.SIGTERM, _interrupt)
            done: list[Any] = []
            failure: Any = None
            for i in theirs:
                try:
                    done.append(_run_job(jobs[i][1]))
                except BaseException as exc:  # sent to the parent, which raises it
                    details = (type(exc).__name__, _builtin_base(exc), one_line(exc), traceback.format_exc())
                    failure = (i, _pickled(exc), *details)
                    break
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump((done, failure), pipe)
        finally:
            os._exit(0)
    os.close(write_fd)
    results: dict[int, tuple[list[Path], list[str]]] = {}
    error: tuple[int, BaseException] | None = None
    try:
        for i in range(0, len(jobs), 2):
            label, draw = jobs[i]
            try:
                results[i] = bar.run(label.replace("_", " "), functools.partial(_run_job, draw))
            except Exception as exc:
                error = (i, exc)
                break
        with os.fdopen(read_fd, "rb") as pipe:
            read_fd = -1
            data = pipe.read()
    except BaseException:
        if read_fd >= 0:
            os.close(read_fd)
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"the figure process ended without a result (wait status {status})")
    done, failure = pickle.loads(data)
    for i, result in zip(theirs, done):
        results[i] = result
        bar.update()
    if failure is not None and (error is None or failure[0] < error[0]):
        _, blob, name, base, message, child_traceback = failure
        raise _unpickled(blob, name, base, message) from _ChildTraceback(child_traceback)
    if error is not None:
        raise error[1]
    return [results[i] for i in range(len(jobs))]


class _ChildTraceback(Exception):
    """The traceback of an error in the figure process, as text: the ``__cause__`` of the error
    raised here, so ``--debug`` shows where it happened."""


def _pickled(exc: BaseException) -> bytes | None:
    try:
        return pickle.dumps(exc)
    except Exception:  # one that does not pickle: its type and message instead
        return None


def _unpickled(blob: bytes | None, name: str, base: str, message: str) -> BaseException:
    """The child's exception; when it does not pickle, one of its name, derived from its nearest
    built-in class (so the command line reports it as it would have: exit code and message)."""
    if blob is not None:
        try:
            exc = pickle.loads(blob)
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # fall back to its type and message
            pass
    builtin = getattr(builtins, base, Exception)
    if not (isinstance(builtin, type) and issubclass(builtin, BaseException)):
        builtin = Exception
    return type(name, (builtin,), {})(message)


def _builtin_base(exc: BaseException) -> str:
    """The name of the nearest built-in exception class ``exc`` is an instance of."""
    return next(c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins")
