"""A stand-in for the Hugging Face Hub over real HTTP: what ``hf_hub_download`` talks to.

Not a mock of huggingface_hub: a ``ThreadingHTTPServer`` on 127.0.0.1 (port 0) answering the
requests huggingface_hub makes (``file_download.py``): ``HEAD`` then ``GET`` on
``{endpoint}/{repo_id}/resolve/{revision}/{filename}``. A file is answered as the Hub answers a
regular (non-LFS) file: ``200`` with ``X-Repo-Commit`` (the commit), ``ETag`` (the git blob
sha1, quoted) and ``Content-Length``; errors carry the Hub's ``X-Error-Code``
(``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``); a renamed repository answers a
relative ``307`` to its new name, as the Hub does. Every request is logged, and every TCP
connection counted, so a test can say exactly what was asked for (and that nothing was).

Use (the fixture ``hub_server`` in ``conftest.py`` starts one per test and stops it)::

    from hub_server import run_python

    def test_x(hub_server, tmp_path):
        hub_server.add("org/name", {"config.json": {"model_type": "gpt2"}})
        env = hub_server.env(tmp_path / "hf")                  # HF_ENDPOINT, HF_HOME; online
        proc = run_python(CODE, env=env, cwd=tmp_path)
        assert hub_server.requested_files() == ["config.json"]
        hub_server.clear()
        proc = run_python(CODE, env=hub_server.env(tmp_path / "hf", offline=True), cwd=tmp_path)
        assert hub_server.log == [] and hub_server.connections == 0

Run the code under test in a subprocess (:func:`run_python`) with :meth:`FakeHub.env`:
huggingface_hub reads ``HF_ENDPOINT``, ``HF_HOME`` and ``HF_HUB_OFFLINE`` once, at import, and
the subprocess inherits no ``HF_*`` variable (token included) from the test run.

Faults, per repository (``add(..., fault=...)``), each a way a server that is not a healthy Hub answers:

- ``"not-a-hub"``: ``200`` with an HTML page and none of the Hub's headers (a proxy, a web server);
- ``"head-403"``: a proxy refusing: ``403`` without the Hub's error headers (not retried);
- ``"head-503"``: the Hub down: ``503`` (``Retry-After: 0``; huggingface_hub retries 5 times, 1 s
  apart, and logs each retry: about 6 s, so the suite does not use it);
- ``"get-500"``: the metadata answers, the download itself fails with ``500``;
- ``"short-body"``: the download sends fewer bytes than the metadata announced;
- ``"long-body"``: the download sends more bytes than the metadata announced;
- ``"stall-head"``: the connection is accepted and the request never answered (until the server stops);
- ``"drip-head"`` / ``"drip-body"``: the answer's head, or the download's body, one byte every
  ``Repo.drip`` seconds (2 by default): each read succeeds, the whole never ends in useful time.

And per repository, answers that lie (``Repo`` fields, set after ``add``): ``etag`` and
``commit`` replace the ``ETag`` and ``X-Repo-Commit`` headers with any text (a path such as
``../../../../outside/x``), ``announce`` replaces every file's announced ``Content-Length`` in the
metadata (``HEAD``) answer, ``listed`` replaces the file names the API lists.

The API's ``GET /api/models/{repo_id}/revision/{revision}`` (what a whole-snapshot download asks
first) answers ``{"id", "sha": commit, "siblings": [{"rfilename": name}, ...]}``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

FAULTS = (
    "not-a-hub",
    "head-403",
    "head-503",
    "get-500",
    "short-body",
    "long-body",
    "stall-head",
    "drip-head",
    "drip-body",
)
#: environment variables a test's subprocess must not inherit (they would point it elsewhere).
HF_VARIABLES = (
    "HF_ENDPOINT",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HUB_ETAG_TIMEOUT",
    "HF_HUB_DOWNLOAD_TIMEOUT",
    "HF_HUB_DISABLE_XET",
)


def git_blob_sha1(data: bytes) -> str:
    """The ETag the Hub gives a regular file: git's blob id."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


@dataclasses.dataclass
class Repo:
    """One model repository: its files (name -> bytes), commit id and fault (``None``: healthy)."""

    files: dict[str, bytes]
    commit: str
    fault: str | None = None
    etag: str | None = None
    announce: int | None = None
    drip: float = 2.0
    commit_header: str | None = None
    listed: list | None = None


class FakeHub:
    """The server, its repositories and its request log (see the module docstring)."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.renamed: dict[str, str] = {}
        self.log: list[tuple[str, str]] = []
        self.connections = 0
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        hub = self

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def process_request(self, request, client_address):
                with hub._lock:
                    hub.connections += 1
                super().process_request(request, client_address)

        class Handler(_Handler):
            server_hub = hub

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ life cycle
    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port (a hub never started just closes it)."""
        self.stopping.set()  # stalled and dripping answers end
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    # ------------------------------------------------------------------ content
    def add(self, repo_id: str, files: Mapping[str, bytes | str | dict], *, fault: str | None = None) -> Repo:
        """Serve ``files`` (bytes, text, or a dict written as JSON) as repository ``repo_id``."""
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault {fault!r} not one of {FAULTS}")
        data = {
            name: v if isinstance(v, bytes) else (v if isinstance(v, str) else json.dumps(v, indent=2)).encode()
            for name, v in files.items()
        }
        commit = hashlib.sha1(repo_id.encode() + b"".join(sorted(data.values()))).hexdigest()
        self.repos[repo_id] = Repo(data, commit, fault)
        return self.repos[repo_id]

    def rename(self, old_id: str, new_id: str) -> None:
        """``old_id`` now answers a relative 307 to ``new_id``, as the Hub does for a renamed repository."""
        self.renamed[old_id] = new_id

    # ------------------------------------------------------------------ what was asked
    def clear(self) -> None:
        with self._lock:
            self.log.clear()
            self.connections = 0

    def requested_files(self) -> list[str]:
        """The file names requested (any repo, any method), in order, without repeats."""
        out: list[str] = []
        for _, path in self.log:
            parsed = parse_resolve(path)
            name = parsed[2] if parsed else path
            if name not in out:
                out.append(name)
        return out

    def env(self, hf_home: str | os.PathLike, *, offline: bool = False) -> dict[str, str]:
        """An environment for a subprocess: this server as the Hub, ``hf_home`` as ``HF_HOME``."""
        env = {k: v for k, v in os.environ.items() if k not in HF_VARIABLES}
        env.update(
            HF_ENDPOINT=self.endpoint,
            HF_HOME=str(hf_home),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_HUB_DISABLE_XET="1",
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        if offline:
            env["HF_HUB_OFFLINE"] = "1"
        return env


def parse_resolve(path: str) -> tuple[str, str, str] | None:
    """``/org/name/resolve/REV/file`` -> ``("org/name", "REV", "file")``; any other path -> ``None``."""
    parts = unquote(urlsplit(path).path).strip("/").split("/")
    if "resolve" not in parts:
        return None
    i = parts.index("resolve")
    if i == 0 or len(parts) < i + 3:
        return None
    return "/".join(parts[:i]), parts[i + 1], "/".join(parts[i + 2 :])


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_hub: FakeHub

    def log_message(self, format, *args):  # quiet: the hub keeps its own log
        pass

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def _send(
        self,
        status: int,
        headers: dict[str, str],
        body: bytes,
        send_body: bool,
        length: int | None = None,
        drip: tuple[str, float] | None = None,
    ):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        if drip is not None and drip[0] == "head":
            self._headers_buffer.append(b"\r\n")
            head = b"".join(self._headers_buffer)
            self._headers_buffer = []
            self._drip(head, drip[1])
        else:
            self.end_headers()
        if send_body:
            if drip is not None and drip[0] == "body":
                self._drip(body, drip[1])
            else:
                self.wfile.write(body)

    def _drip(self, data: bytes, every: float) -> None:
        for i in range(len(data)):
            if self.server_hub.stopping.wait(every):
                return
            try:
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
            except OSError:  # the client gave up
                return

    def _error(self, status: int, code: str | None, message: str, send_body: bool, extra: dict | None = None):
        headers = {"Content-Type": "application/json", **(extra or {})}
        if code is not None:
            headers |= {"X-Error-Code": code, "X-Error-Message": message}
        self._send(status, headers, json.dumps({"error": message}).encode(), send_body)

    def _answer(self, send_body: bool) -> None:
        hub = self.server_hub
        with hub._lock:
            hub.log.append((self.command, self.path))
        parsed = parse_resolve(self.path)
        api = unquote(urlsplit(self.path).path)
        if parsed is None and api.startswith("/api/models/") and "/revision/" in api:
            repo_id = api[len("/api/models/") :].split("/revision/")[0]
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found", send_body)
            names = list(repo.files) if repo.listed is None else repo.listed
            info = {"id": repo_id, "sha": repo.commit, "siblings": [{"rfilename": n} for n in names]}
            return self._send(200, {"Content-Type": "application/json"}, json.dumps(info).encode(), send_body)
        if parsed is None:
            return self._error(404, None, "Not Found", send_body)
        repo_id, revision, filename = parsed
        if repo_id in hub.renamed:
            target = f"/{hub.renamed[repo_id]}/resolve/{revision}/{filename}"
            return self._send(307, {"Location": target}, b"", send_body)
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found", send_body)
        if repo.fault == "not-a-hub":
            return self._send(200, {"Content-Type": "text/html"}, b"<html><body>Welcome</body></html>", send_body)
        if repo.fault == "head-403":
            return self._send(403, {"Content-Type": "text/plain"}, b"Forbidden", send_body)
        if repo.fault == "stall-head":
            self.server_hub.stopping.wait()
            return None
        if repo.fault == "head-503":
            return self._error(503, None, "Service Unavailable", send_body, {"Retry-After": "0"})
        if revision not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", "Invalid rev id", send_body, {"X-Repo-Commit": repo.commit})
        if filename not in repo.files:
            return self._error(404, "EntryNotFound", "Entry not found", send_body, {"X-Repo-Commit": repo.commit})
        data = repo.files[filename]
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": repo.commit if repo.commit_header is None else repo.commit_header,
            "ETag": f'"{git_blob_sha1(data) if repo.etag is None else repo.etag}"',
        }
        if send_body and repo.fault == "get-500":
            return self._error(500, None, "Internal Error", send_body)
        if send_body and repo.fault == "short-body":
            return self._send(200, headers, data[: len(data) // 2], send_body)
        if send_body and repo.fault == "long-body":
            return self._send(200, headers, data + b" " * 64, send_body)
        if repo.fault in ("drip-head", "drip-body"):
            where = "head" if repo.fault == "drip-head" else "body"
            return self._send(200, headers, data, send_body, drip=(where, repo.drip))
        length = repo.announce if (repo.announce is not None and not send_body) else None
        return self._send(200, headers, data, send_body, length=length)


def run(argv: list[str], *, env: dict[str, str], cwd: str | os.PathLike, timeout: float = 120):
    """Run ``argv`` with ``env`` (``PYTHONPATH`` puts this checkout first) in ``cwd``; capture text."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)}
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def run_python(code: str, *args: str, env: dict[str, str], cwd: str | os.PathLike, timeout: float = 120):
    """``python -c code args...`` with this interpreter (see :func:`run`)."""
    return run([sys.executable, "-c", code, *args], env=env, cwd=cwd, timeout=timeout)
