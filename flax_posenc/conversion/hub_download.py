"""One file of a Hub repository into the Hugging Face cache: checked before any byte is written.

What :func:`~flax_posenc.conversion.sources.resolve_hub_file` calls when a file is not cached
(``huggingface_hub``'s ``hf_hub_download`` is not used: it builds cache paths from the server's
``ETag`` and ``X-Repo-Commit`` before anything checks them). One exchange, in order:

1. the file's metadata (``get_hf_file_metadata``: one ``HEAD``, redirects within the Hub followed,
   no retries);
2. checks, before anything is created: the commit must be 40 hex digits and the ``ETag`` a plain
   token (letters, digits, ``-``, ``_``; a path such as ``../../outside/x`` or ``/tmp/x`` is
   refused), and the announced size at most ``max_bytes`` (a ``.json`` file: 64 MiB, the
   bound of the JSON reader): a larger file is refused without downloading it;
3. the body, streamed into a private temporary file inside the repository's cache folder, at
   most the announced size (a server sending more, or fewer, is refused and the file removed);
4. only then placed where huggingface_hub would have put it (``blobs/ETAG``,
   ``snapshots/COMMIT/NAME`` linking to it, ``refs/main``), so ``try_to_load_from_cache`` and
   huggingface_hub's own tools find it.

The whole exchange is bounded by ONE deadline, not a timeout per read: :func:`hub_timeout`
seconds (environment variable :data:`HUB_TIMEOUT_ENV`, default :data:`DEFAULT_HUB_TIMEOUT`),
plus one second per :data:`MIN_BYTES_PER_SECOND` bytes announced (a large weights file gets the
time a slow line needs). A Hub that accepts the connection and never answers, or drips a byte at
a time, is one line when the deadline passes (the temporary file removed). huggingface_hub's
log lines (retry warnings, a server's ``X-HF-Warning`` text) are dropped for these calls:
failures are reported as one :class:`~flax_posenc.errors.CheckpointError` line instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flax_posenc.conversion.readers import fail, one_line
from flax_posenc.conversion.safety import MAX_JSON_BYTES, parse_json, safe_member_name
from flax_posenc.errors import CheckpointError

#: environment variable: seconds allowed for one Hub exchange (plus the size allowance).
HUB_TIMEOUT_ENV = "FLAX_POSENC_HUB_TIMEOUT"
#: the default of :data:`HUB_TIMEOUT_ENV`.
DEFAULT_HUB_TIMEOUT = 30.0
#: a file announced with N bytes gets N / MIN_BYTES_PER_SECOND more seconds (1 MiB/s).
MIN_BYTES_PER_SECOND = 1 << 20
#: files at least this large show huggingface_hub's progress bar while downloading.
_BAR_BYTES = 16 << 20
_COMMIT = re.compile(r"[0-9a-f]{40}")
_ETAG = re.compile(r"[0-9A-Za-z_-]{1,128}")


def hub_timeout() -> float:
    """Seconds allowed for one Hub exchange: :data:`HUB_TIMEOUT_ENV` (a positive number), else
    :data:`DEFAULT_HUB_TIMEOUT`. Raises CheckpointError for a value that is not one."""
    text = os.environ.get(HUB_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_HUB_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e7):
        raise fail(HUB_TIMEOUT_ENV, "a positive number of seconds", repr(text[:40]))
    return value


def max_bytes_of(filename: str) -> int | None:
    """The largest size accepted for a Hub file: a ``.json`` file is read whole by the bounded JSON
    reader (:data:`~flax_posenc.conversion.safety.MAX_JSON_BYTES`); weights: ``None`` (no bound
    besides the size the Hub announces)."""
    return MAX_JSON_BYTES if filename.endswith(".json") else None


class _Quiet(logging.Filter):
    """Drops huggingface_hub's log records made by one thread (ours), leaves every other thread's."""

    def __init__(self, thread_id: int) -> None:
        super().__init__()
        self.thread_id = thread_id

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread_id


@contextlib.contextmanager
def _quiet_hub_logs() -> Iterator[None]:
    quiet = _Quiet(threading.get_ident())
    loggers = [logging.getLogger("huggingface_hub")]
    handlers = [h for lg in loggers for h in lg.handlers] + logging.getLogger().handlers
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for h in handlers:
        h.addFilter(quiet)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(quiet)


class _Exchange:
    """The state the waiting thread and the worker share."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.lock = threading.Lock()
        self.cancelled = False
        self.tmp: Path | None = None
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


def download(
    repo_id: str, filename: str, storage: Path, *, endpoint: str, revision: str = "main", timeout: float | None = None
) -> Path | None:
    """Download ``filename`` of ``repo_id`` into the repository's cache folder ``storage``.

    Returns the snapshot path (``storage/snapshots/COMMIT/filename``), or ``None`` when the
    repository answered that it has no such file. Raises CheckpointError (one line) for
    everything else; see the module docstring for the checks and the deadline. With a
    ``revision`` that is a commit, the Hub's answer must name that commit.
    """
    budget = hub_timeout() if timeout is None else timeout
    return _bounded(
        lambda state: _exchange(state, repo_id, filename, storage, endpoint, revision, budget),
        f"{repo_id}/{filename}",
        endpoint,
        budget,
    )


def download_snapshot(repo_id: str, storage: Path, *, endpoint: str, timeout: float | None = None) -> Path:
    """Every file of ``repo_id`` at its current commit into ``storage``; returns ``storage/snapshots/COMMIT``.

    The file list comes from the Hub's API (``/api/models/ID/revision/main``: its ``sha`` must be
    40 hex digits, every file name relative without ``..``, the answer bounded JSON); each file is
    then fetched by :func:`download` at that commit (each checked, each under its own deadline),
    and ``refs/main`` written last. Raises CheckpointError (one line) as :func:`download`.
    """
    budget = hub_timeout() if timeout is None else timeout
    commit, names = _bounded(lambda state: _listing(state, repo_id, endpoint, budget), repo_id, endpoint, budget)
    for name in names:
        safe_member_name(name, where=f"{repo_id} (the Hub's file list)", what="a file name")
    for name in names:
        if download(repo_id, name, storage, endpoint=endpoint, revision=commit, timeout=budget) is None:
            raise fail(f"{repo_id}/{name}", "a file the Hub's list names", "not in the repository")
    snapshot = _inside(storage, "snapshots", commit)
    snapshot.mkdir(parents=True, exist_ok=True)
    _write_ref(storage, "main", commit)
    return snapshot


def _per_read(budget: float) -> float:
    """The worker's own timeout per read: longer than the whole deadline, so the deadline (one line,
    the same whatever the read) always decides first; it only ends an abandoned worker thread."""
    return 2 * budget + 1


def _bounded(work, where: str, endpoint: str, budget: float):
    """``work(state)`` in a worker thread; its result, its error, or one line when the deadline passes."""
    state = _Exchange(time.monotonic() + budget)

    def run() -> None:
        try:
            with _quiet_hub_logs():
                state.result = work(state)
        except BaseException as e:  # handed to the waiting thread
            state.error = e
        finally:
            state.done.set()

    threading.Thread(target=run, daemon=True).start()
    try:
        while not state.done.wait(0.05):
            if time.monotonic() > state.deadline:
                raise fail(
                    where,
                    f"a complete answer from the Hub at {endpoint} within {budget:g} s "
                    f"(plus 1 s per MiB announced; {HUB_TIMEOUT_ENV})",
                    "none in time (the Hub accepted the connection, then did not finish answering)",
                )
    finally:
        if not state.done.is_set():
            with state.lock:
                state.cancelled = True
                if state.tmp is not None:
                    state.tmp.unlink(missing_ok=True)
    if state.error is not None:
        raise state.error
    return state.result


def _listing(state: _Exchange, repo_id: str, endpoint: str, budget: float) -> tuple[str, list]:
    """The commit and file names of ``repo_id``'s main branch, from the Hub's API (bounded JSON)."""
    from urllib.parse import quote

    from huggingface_hub.utils import build_hf_headers, get_session

    url = f"{endpoint}/api/models/{quote(repo_id, safe='/')}/revision/main"
    raw = bytearray()
    try:
        with get_session().stream("GET", url, headers=build_hf_headers(), timeout=_per_read(budget)) as response:
            status = response.status_code
            if status in (401, 404):
                raise fail(
                    repo_id,
                    f"a Hugging Face model id on {endpoint} (or a local path)",
                    "no such repository on the Hub (or it is private/gated)",
                )
            if status != 200:
                raise _unreachable(repo_id, f"{endpoint} answered HTTP {status}")
            for chunk in response.iter_bytes():
                if state.cancelled:
                    raise fail(repo_id, "a file list within the deadline", "cancelled")
                raw += chunk
                if len(raw) > MAX_JSON_BYTES:
                    raise fail(repo_id, f"a file list of at most {MAX_JSON_BYTES} bytes", "more")
    except CheckpointError:
        raise
    except Exception as e:
        raise _unreachable(repo_id, f"the Hub is unreachable ({type(e).__name__})") from None
    info = parse_json(bytes(raw), where=f"{repo_id} (the Hub's file list)", what="the Hub's model info")
    sha = info.get("sha") if isinstance(info, dict) else None
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not _COMMIT.fullmatch(sha) or not isinstance(siblings, list):
        raise fail(
            f"{repo_id} (the Hub's file list)",
            "a model info with a 40-hex 'sha' and a 'siblings' list",
            f"sha {str(sha)[:60]!r} (refused: nothing was written)",
        )
    return sha, [s.get("rfilename") if isinstance(s, dict) else None for s in siblings]


def _write_ref(storage: Path, revision: str, commit: str) -> None:
    refs = _inside(storage, "refs", *revision.split("/"))
    refs.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=refs.parent, prefix=".ref-")
    with os.fdopen(fd, "w") as f:
        f.write(commit)
    os.replace(tmp, refs)


def _unreachable(repo_id: str, why: str) -> CheckpointError:
    return fail(
        repo_id,
        "a Hub model id in the local cache or a reachable Hugging Face Hub",
        f"not cached, and {why}; set HF_HUB_OFFLINE=1 to use the cache only, or pass a local directory",
    )


def _metadata(repo_id: str, filename: str, endpoint: str, revision: str, budget: float):
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
    try:
        return get_hf_file_metadata(url, timeout=_per_read(budget), endpoint=endpoint)
    except RepositoryNotFoundError:  # GatedRepoError included
        raise fail(
            repo_id,
            f"a Hugging Face model id on {endpoint} (or a local path)",
            "no such repository on the Hub (or it is private/gated)",
        ) from None
    except RevisionNotFoundError:
        raise fail(repo_id, f"a revision {revision!r} on the Hub", "no such revision") from None
    except EntryNotFoundError:  # the repository answered: it has no such file
        return None
    except HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        raise _unreachable(repo_id, f"{endpoint} answered HTTP {status}") from None
    except Exception as e:
        if any(w in type(e).__name__ for w in ("Connect", "Timeout", "Network", "Protocol")):
            raise _unreachable(repo_id, f"the Hub is unreachable ({type(e).__name__})") from None
        raise _unreachable(repo_id, f"the Hub could not be asked ({type(e).__name__}: {one_line(e)[:120]})") from None


def _inside(storage: Path, *parts: str) -> Path:
    path = storage.joinpath(*parts)
    base = os.path.abspath(storage)
    if os.path.commonpath([base, os.path.abspath(path)]) != base:  # never: parts are checked tokens
        raise fail(path, f"a path inside the cache folder {storage}", "one outside it")
    return path


def _exchange(state: _Exchange, repo_id, filename, storage: Path, endpoint, revision, budget) -> Path | None:
    where = f"{repo_id}/{filename}"
    meta = _metadata(repo_id, filename, endpoint, revision, budget)
    if meta is None:
        return None
    commit, etag, size = meta.commit_hash, meta.etag, meta.size
    if commit is None or etag is None:
        raise _unreachable(
            repo_id, f"{endpoint} answered without the Hub's X-Repo-Commit/ETag headers (is HF_ENDPOINT a Hub?)"
        )
    if _COMMIT.fullmatch(revision) and commit != revision:
        raise fail(where, f"the Hub's answer for commit {revision}", f"X-Repo-Commit {commit[:60]!r} (refused)")
    if not _COMMIT.fullmatch(commit) or not _ETAG.fullmatch(etag):
        raise fail(
            where,
            "a Hub answer whose X-Repo-Commit is 40 hex digits and whose ETag is a plain token (a digest)",
            f"X-Repo-Commit {commit[:60]!r}, ETag {etag[:60]!r} (refused: nothing was written)",
        )
    bound = max_bytes_of(filename)
    if size is not None and bound is not None and size > bound:
        raise fail(
            where,
            f"a file of at most {bound} bytes",
            f"{size} bytes announced by the Hub (refused before downloading it)",
        )
    if size is not None:
        state.deadline += size / MIN_BYTES_PER_SECOND
    pointer = _inside(storage, "snapshots", commit, *filename.split("/"))
    blob = _inside(storage, "blobs", etag)
    if not os.path.lexists(blob):
        _get(state, meta.location, blob, where, endpoint, size, bound, budget)
    with state.lock:
        if state.cancelled:
            raise fail(where, "a download within the deadline", "cancelled")
        pointer.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(pointer):
            try:
                os.symlink(os.path.relpath(blob, pointer.parent), pointer)
            except OSError:  # no symbolic links here (as huggingface_hub, copy instead)
                import shutil

                shutil.copyfile(blob, pointer)
        if revision != commit:
            _write_ref(storage, revision, commit)
    return pointer


def _get(state: _Exchange, url: str, blob: Path, where: str, endpoint: str, size, bound, budget) -> None:
    """Stream the body into a private temporary file beside ``blob``; rename it to ``blob`` when complete."""
    from urllib.parse import urlsplit

    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
    from huggingface_hub.utils import tqdm as hf_tqdm

    headers = build_hf_headers()
    headers["Accept-Encoding"] = "identity"
    if urlsplit(url).netloc != urlsplit(endpoint).netloc:
        headers.pop("authorization", None)  # a storage host (CDN) never gets the Hub token
        headers.pop("Authorization", None)
    most = size if size is not None else bound
    blob.parent.mkdir(parents=True, exist_ok=True)
    with state.lock:
        if state.cancelled:
            raise fail(where, "a download within the deadline", "cancelled")
        fd, name = tempfile.mkstemp(dir=blob.parent, prefix=f".{blob.name}.", suffix=".incomplete")
        state.tmp = Path(name)
    got = 0
    try:
        # huggingface_hub's bar (HF_HUB_DISABLE_PROGRESS_BARS turns it off), for files worth watching
        bar = hf_tqdm(total=size, unit="B", unit_scale=True, desc=where, disable=size is None or size < _BAR_BYTES)
        with os.fdopen(fd, "wb") as f, bar:
            try:
                with get_session().stream(
                    "GET", url, headers=headers, follow_redirects=True, timeout=_per_read(budget)
                ) as response:
                    hf_raise_for_status(response)
                    for chunk in response.iter_bytes():
                        bar.update(len(chunk))
                        if state.cancelled:
                            raise fail(where, "a download within the deadline", "cancelled")
                        got += len(chunk)
                        if most is not None and got > most:
                            raise fail(
                                where,
                                f"at most the {most} bytes announced",
                                "more (refused; the partial file was removed)",
                            )
                        f.write(chunk)
            except CheckpointError:
                raise
            except Exception as e:
                status = getattr(getattr(e, "response", None), "status_code", None)
                found = f"HTTP {status} from {endpoint}" if status else f"{type(e).__name__}: {one_line(e)[:160]}"
                raise fail(where, "a file downloadable from the Hugging Face Hub", found) from None
        if size is not None and got != size:
            raise fail(
                where,
                f"the {size} bytes the Hub announced",
                f"{got} bytes (the download was cut short; the partial file was removed)",
            )
        with state.lock:
            if state.cancelled:
                raise fail(where, "a download within the deadline", "cancelled")
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(name, 0o644 & ~umask)
            os.replace(name, blob)
            state.tmp = None
    finally:
        with state.lock:
            if state.tmp is not None:
                state.tmp.unlink(missing_ok=True)
                state.tmp = None


__all__ = [
    "DEFAULT_HUB_TIMEOUT",
    "HUB_TIMEOUT_ENV",
    "MIN_BYTES_PER_SECOND",
    "download",
    "download_snapshot",
    "hub_timeout",
    "max_bytes_of",
]
