"""Resolving a SOURCE string into something to read: a :class:`Checkpoint` (or a sinusoid).

A SOURCE is, in the order tried:

1. ``sinusoidal:LENGTH:DIM`` -- no file at all (handled by :func:`parse_sinusoidal`);
2. an existing directory in Hugging Face layout: ``config.json`` plus, in order of preference,
   ``model.safetensors``, ``model.safetensors.index.json`` (sharded: only the shard holding a
   tensor is opened), ``pytorch_model.bin``, ``pytorch_model.bin.index.json``;
3. an existing weights file (``*.safetensors``, ``*.bin``, ``*.index.json``); a
   ``config.json`` beside it is used when present, otherwise the family comes from key names;
4. a Hub model id (``"gpt2"``, ``"org/name"``): resolved from the local Hugging Face cache first
   (``try_to_load_from_cache``), downloaded (with the hub's progress bar) only when online and
   not cached; with ``HF_HUB_OFFLINE=1`` a model that is not cached is a one-line error.

Anything else is a one-line :class:`~flax_posenc.errors.CheckpointError`.

Every file of a Hub repository, the config, the weights and each shard, goes through one
resolver, :func:`resolve_hub_file` (cache, then that one file alone, checked before it is written: :mod:`~flax_posenc.conversion.hub_download`).
:func:`config_json_path` asks it for ``config.json`` only: what a RoPE/ALiBi SOURCE needs, no
weights fetched.

from flax_posenc.conversion.sources import open_checkpoint
ckpt = open_checkpoint("path/to/all-MiniLM-L6-v2")
ckpt.config["model_type"], ckpt.weights_path.name
('bert', 'model.safetensors')
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flax_posenc.conversion import hub_download
from flax_posenc.conversion.readers import TensorReader, fail, open_weights
from flax_posenc.conversion.safety import checkpoint_boundary, contained, kind_of, load_json
from flax_posenc.errors import CheckpointError

CONFIG_NAME = "config.json"
#: weight files of a checkpoint directory, most preferred first.
WEIGHT_NAMES: tuple[str, ...] = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
SINUSOIDAL_PREFIX = "sinusoidal:"
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?$")
_TRUTHY = {"1", "true", "yes", "on"}
#: the largest ``sinusoidal:L:D`` built: L*D values (float64 on the host: 8 bytes each).
MAX_SINUSOIDAL_VALUES = 1 << 28
#: seconds to wait for the Hub's host before saying it is unreachable.
HUB_CONNECT_TIMEOUT = 3.0


@dataclasses.dataclass
class Checkpoint:
    """A resolved checkpoint: its config, a lazy tensor reader, and where they came from.

    Attributes:
      source: the SOURCE string as given (for messages).
      weights_path: the weights file (or shard index) read.
      reader: lazy tensor reader over it.
      config: ``config.json`` as a dict (empty when there is none).
      config_path: path of ``config.json`` or ``None``.
      root: the checkpoint directory (``None`` for a bare weights file with no config beside).
      boundary: the directory every file derived from the checkpoint must resolve into (the
        checkpoint directory; for a Hub id, the repository's folder in the cache).
    """

    source: str
    weights_path: Path
    reader: TensorReader
    config: dict[str, Any]
    config_path: Path | None
    root: Path | None
    boundary: Path | None = None


def source_text(source: object, what: str = "SOURCE") -> str:
    """``os.fspath(source)`` for a str/PathLike without NUL bytes, else CheckpointError (a bad argument)."""
    if not isinstance(source, (str, os.PathLike)):
        raise fail(what, "a path, a Hub model id or sinusoidal:LENGTH:DIM (str or os.PathLike)", type(source).__name__)
    text = os.fspath(source)
    if not isinstance(text, str) or "\x00" in text:
        raise fail(what, "a text path without NUL bytes", repr(text)[:80])
    return text


def parse_sinusoidal(source: str) -> tuple[int, int] | None:
    """``"sinusoidal:L:D"`` -> ``(L, D)``; any other string -> ``None``.

    Raises:
      CheckpointError: the prefix is there but ``L``/``D`` are not positive ASCII integers, or
        the table would hold more than :data:`MAX_SINUSOIDAL_VALUES` values (checked before any
        allocation; the message names the memory it would need).
    """
    if not source.startswith(SINUSOIDAL_PREFIX):
        return None
    parts = source.split(":")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 12 and int(p) > 0 for p in parts[1:]):
        raise fail(
            source[:80], "sinusoidal:LENGTH:DIM with positive integers (e.g. sinusoidal:1024:768)", repr(source[:80])
        )
    length, dim = int(parts[1]), int(parts[2])
    if length * dim > MAX_SINUSOIDAL_VALUES:
        raise fail(
            source,
            f"a table of at most {MAX_SINUSOIDAL_VALUES} values ({MAX_SINUSOIDAL_VALUES * 8 >> 30} GiB as float64)",
            f"{length} x {dim} = {length * dim} values, {length * dim * 8 / 2**30:.1f} GiB",
        )
    return length, dim


def read_config(path: Path) -> dict[str, Any]:
    """``config.json`` as a dict: a regular file of bounded JSON (see
    :func:`~flax_posenc.conversion.safety.load_json`). Raises CheckpointError otherwise."""
    config = load_json(path, what="a JSON model config", allow_constants=True)
    if not isinstance(config, dict):
        raise fail(path, "a JSON object as model config", type(config).__name__)
    return config


def find_weights(directory: Path) -> Path:
    """The weights file of a checkpoint directory (see :data:`WEIGHT_NAMES`).

    Raises:
      CheckpointError: none of the known weight files is there (lists what is).
    """
    for name in WEIGHT_NAMES:
        if os.path.lexists(directory / name):  # not a regular file: refused by open_weights, by name
            return directory / name
    others = sorted(p.name for p in directory.iterdir())
    shown = ", ".join(others[:12]) + (" ..." if len(others) > 12 else "") if others else "an empty directory"
    raise fail(directory, f"weights ({' or '.join(WEIGHT_NAMES)})", shown)


def open_directory(
    directory: Path, *, source: str, require_config: bool, resolve_shard: Callable[[str], Path] | None = None
) -> Checkpoint:
    """Open a Hugging Face layout directory (``config.json`` + weights)."""
    config_path = directory / CONFIG_NAME
    has_config = os.path.lexists(config_path)  # a directory/FIFO named config.json: read_config says so
    if require_config and not has_config:
        present = sorted(p.name for p in directory.iterdir())[:12]
        raise fail(
            directory,
            f"{CONFIG_NAME} (Hugging Face layout; or pass family=, or the weights file itself)",
            f"no {CONFIG_NAME}; files: {', '.join(present) or 'none'}",
        )
    weights = find_weights(directory)
    boundary = checkpoint_boundary(directory)
    contained(boundary, weights, what="the weights file")  # a link out of the checkpoint is refused
    if has_config:
        contained(boundary, config_path, what=CONFIG_NAME)
    config = read_config(config_path) if has_config else {}
    return Checkpoint(
        source,
        weights,
        open_weights(weights, resolve_shard, boundary),
        config,
        config_path if has_config else None,
        directory,
        boundary,
    )


def open_file(path: Path, *, source: str) -> Checkpoint:
    """Open a bare weights file; a ``config.json`` beside it is used when present."""
    config_path = path.parent / CONFIG_NAME
    has_config = os.path.lexists(config_path) and path.name != CONFIG_NAME
    boundary = checkpoint_boundary(path.parent)
    if has_config:
        contained(boundary, config_path, what=f"the {CONFIG_NAME} beside {path.name}")
    config = read_config(config_path) if has_config else {}
    return Checkpoint(
        source,
        path,
        open_weights(path, None, boundary),
        config,
        config_path if has_config else None,
        path.parent if has_config else None,
        boundary,
    )


def looks_like_repo_id(source: str) -> bool:
    """Whether ``source`` could be a Hub model id (``"gpt2"``, ``"org/name"``) rather than a path."""
    return (
        bool(_REPO_ID.match(source))
        and ".." not in source
        and not source.endswith((".safetensors", ".bin", ".json", ".pt", ".pth"))
    )


def config_json_path(source: str | os.PathLike) -> Path | None:
    """The ``config.json`` of SOURCE, without reading any weights; ``None`` when SOURCE has none.

    - an existing directory: its ``config.json`` when it holds one (a link leading out of the
      checkpoint is refused, as :func:`open_directory` does), else ``None``;
    - an existing file named ``*.json`` (not ``*.index.json``): the file itself, else ``None``
      (a weights file, a shard index);
    - a Hub model id (a ``str`` that is no existing path, see :func:`looks_like_repo_id`): the
      cached ``config.json`` (:func:`resolve_hub_file`); when online and not cached, that one
      file is downloaded into the cache, never the weights;
    - ``sinusoidal:LENGTH:DIM``, a missing path, anything else: ``None`` (the caller's other
      readers say what is wrong with it).

    Nothing is read or written outside the given path and the Hugging Face cache folder.

    Raises:
      CheckpointError: a Hub id not in the cache while ``HF_HUB_OFFLINE=1``; the Hub unreachable
        or not answering as a Hub; no such repository; no ``config.json`` in it; SOURCE not a
        str/PathLike. Each one line naming SOURCE.
    """
    text = source_text(source)
    if text.startswith(SINUSOIDAL_PREFIX):
        return None
    path = Path(text).expanduser()
    if path.is_dir():
        config = path / CONFIG_NAME
        if not config.is_file():
            return None
        return contained(checkpoint_boundary(path), config, what=CONFIG_NAME)
    if path.is_file():
        return path if path.suffix == ".json" and not path.name.endswith(".index.json") else None
    if os.path.lexists(path) or not isinstance(source, str) or not looks_like_repo_id(text):
        return None
    found = resolve_hub_file(text, (CONFIG_NAME,), what=CONFIG_NAME)
    if found is None:
        raise fail(text, f"{CONFIG_NAME} in the Hub repository", "not in the repository")
    return found


def open_checkpoint(source: str | os.PathLike, *, require_config: bool = True) -> Checkpoint:
    """Resolve SOURCE (directory, weights file or Hub id) into a :class:`Checkpoint`.

    Args:
      source: see the module docstring (``sinusoidal:`` sources are not handled here).
      require_config: a *directory* without ``config.json`` is an error (default); set False
        when the family is given explicitly.

    Raises:
      CheckpointError: missing path, no weights, no config, unreadable files, model id not
        cached while offline.
    """
    text = source_text(source)
    path = Path(text).expanduser()
    if path.is_dir():
        return open_directory(path, source=text, require_config=require_config)
    if path.is_file():
        return open_file(path, source=text)
    if os.path.lexists(path):  # a FIFO, a device, a socket, a dangling link: say which
        try:
            found = kind_of(os.stat(path).st_mode)
        except OSError:
            found = "a dangling symbolic link" if path.is_symlink() else "an unreadable path"
        raise fail(path, "a checkpoint directory or a weights file (a regular file)", found)
    if isinstance(source, str) and looks_like_repo_id(text):
        return open_hub(text, require_config=require_config)
    parent = path.parent
    hint = f" (nor its folder {parent})" if not parent.exists() else ""
    raise fail(
        path,
        "a checkpoint directory, a .safetensors/.bin file, a Hub model id or sinusoidal:LENGTH:DIM",
        f"no such file or directory{hint}",
    )


# ----------------------------------------------------------------------------- Hub


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as set *now* (huggingface_hub reads it only at import)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUTHY:
        return True
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE) and "HF_HUB_OFFLINE" not in os.environ
    except Exception:  # pragma: no cover - broken install
        return False


def hub_cache_dir() -> Path:
    """The hub cache folder as the environment says *now*: ``HF_HUB_CACHE``, else ``HF_HOME/hub``,
    else ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "hub"


def repo_folder(repo_id: str, cache_dir: Path) -> Path:
    """The cache folder of a model repository (``models--org--name``): what its files must resolve into."""
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


def _cached(repo_id: str, filename: str, cache_dir: Path) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo_id, filename, cache_dir=str(cache_dir))
    except Exception:  # invalid repo id and the like: treat as not cached
        return None
    if not isinstance(hit, str):
        return None
    return contained(repo_folder(repo_id, cache_dir), Path(hit), what=f"the cached {filename} of {repo_id}")


def hub_endpoint() -> str:
    """The Hub's address as the environment says now (``HF_ENDPOINT``, else huggingface.co)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_reachable(timeout: float = HUB_CONNECT_TIMEOUT) -> str | None:
    """``None`` when a TCP connection to the Hub's host opens within ``timeout`` s, else why not."""
    import socket
    import threading
    import time
    from urllib.parse import urlsplit

    url = urlsplit(hub_endpoint())
    host = url.hostname or "huggingface.co"
    try:
        port = url.port or (80 if url.scheme == "http" else 443)
    except ValueError:
        return f"{hub_endpoint()!r} (HF_ENDPOINT) not a valid address"
    found: list = []

    def resolve() -> None:  # getaddrinfo has no timeout of its own: run it aside, wait at most `timeout`
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as e:
            found.append(e)

    start = time.monotonic()
    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(timeout)
    if not found:
        return f"{host} unreachable (no DNS answer within {timeout:g} s)"
    if isinstance(found[0], OSError):
        return f"{host}:{port} unreachable ({found[0].strerror or type(found[0]).__name__})"
    family, kind, proto, _, address = found[0][0]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(max(0.1, timeout - (time.monotonic() - start)))
            sock.connect(address)
    except OSError as e:
        return f"{host}:{port} unreachable ({e.strerror or type(e).__name__})"
    return None


def _unreachable(repo_id: str, why: str) -> CheckpointError:
    return fail(
        repo_id,
        "a Hub model id in the local cache or a reachable Hugging Face Hub",
        f"not cached, and {why}; set HF_HUB_OFFLINE=1 to use the cache only, or pass a local directory",
    )


def _download(repo_id: str, filename: str, cache_dir: Path) -> Path | None:
    """Download one file into the cache, checked before any byte is written
    (:func:`~flax_posenc.conversion.hub_download.download`); ``None`` if the repository lacks it.

    The Hub's address is :func:`hub_endpoint` *now* (huggingface_hub reads ``HF_ENDPOINT`` only
    at import), the same address :func:`hub_reachable` probed.
    """
    folder = repo_folder(repo_id, cache_dir)
    got = hub_download.download(repo_id, filename, folder, endpoint=hub_endpoint())
    if got is None:
        return None
    return contained(folder, got, what=f"the downloaded {filename} of {repo_id}")


def resolve_hub_file(repo_id: str, names: tuple[str, ...], *, what: str) -> Path | None:
    """THE Hub resolver: a local path for one file of a Hub model repository.

    The first of ``names`` (most preferred first) already in the local cache; else, online only,
    the first the repository has, downloaded alone (nothing else of the repository is fetched)
    by :func:`~flax_posenc.conversion.hub_download.download`: the server's commit and ETag are
    checked before any path is built from them, a ``.json`` file announced larger than 64 MiB
    is refused before downloading it, and the whole exchange has one deadline
    (``FLAX_POSENC_HUB_TIMEOUT``). Nothing is written outside the repository's cache folder, and
    every path returned lies inside it.

    Args:
      repo_id: ``"org/name"`` (or ``"name"``).
      names: file names inside the repository, e.g. ``("config.json",)`` or :data:`WEIGHT_NAMES`.
      what: what they are, for messages (``"config.json"``, ``"weights"``, ``"shard x"``).

    Returns:
      The file's path, or ``None`` when online and the repository holds none of ``names``.

    Raises:
      CheckpointError (one line naming ``repo_id``): none cached while ``HF_HUB_OFFLINE=1``; the
        Hub unreachable (within :data:`HUB_CONNECT_TIMEOUT` s) or answering as no Hub does
        (an HTTP error, no ``X-Repo-Commit``, an ETag or commit that is not a plain token); no such
        repository; a file too large; a download that fails or does not finish in time.
    """
    cache = hub_cache_dir()
    for name in names:
        hit = _cached(repo_id, name, cache)
        if hit is not None:
            return hit
    if hub_offline():
        raise fail(
            repo_id,
            f"a Hub model id already in the local cache ({cache}) because HF_HUB_OFFLINE=1",
            f"no cached {what}; run once online, unset HF_HUB_OFFLINE, or pass a local directory",
        )
    why = hub_reachable()
    if why is not None:
        raise _unreachable(repo_id, f"the Hub is {why}")
    return next((p for name in names if (p := _download(repo_id, name, cache)) is not None), None)


def open_hub(repo_id: str, *, require_config: bool = True) -> Checkpoint:
    """Resolve a Hub model id: local cache first, then (online only) download what is missing.

    Only ``config.json`` and the weights file (or shard index; shards on first use) are fetched,
    each through :func:`resolve_hub_file`.

    Three failures are told apart: not cached while ``HF_HUB_OFFLINE=1``; not cached and the
    Hub unreachable (one line within :data:`HUB_CONNECT_TIMEOUT` s, naming ``HF_HUB_OFFLINE``);
    a file not in the repository.

    Raises:
      CheckpointError: offline and not cached; Hub unreachable; no such repository; no weights in it.
    """
    config = resolve_hub_file(repo_id, (CONFIG_NAME,), what=CONFIG_NAME)
    if config is None and require_config:
        raise fail(repo_id, f"{CONFIG_NAME} in the Hub repository", "not in the repository")
    weights = resolve_hub_file(repo_id, WEIGHT_NAMES, what="weights")
    if weights is None:
        raise fail(
            repo_id,
            f"weights ({' or '.join(WEIGHT_NAMES)}) in the Hub repository",
            "none of them in the repository",
        )

    def resolve_shard(name: str) -> Path:
        got = resolve_hub_file(repo_id, (name,), what=f"shard {name}")
        if got is None:
            raise fail(f"{repo_id}/{name}", "a shard listed in the index", "not in the Hub repository")
        return got

    boundary = repo_folder(repo_id, hub_cache_dir())
    reader = open_weights(weights, resolve_shard, boundary)
    cfg = read_config(config) if config is not None else {}
    return Checkpoint(repo_id, weights, reader, cfg, config, weights.parent, boundary)


def snapshot_directory(repo_id: str) -> Path:
    """A complete local snapshot of a Hub repository (for export), cache first.

    A complete cached snapshot serves offline, or when the Hub is unreachable. Otherwise every
    file is downloaded by :func:`~flax_posenc.conversion.hub_download.download_snapshot`, each
    checked before it is written, as :func:`resolve_hub_file` does for one file.
    """
    from huggingface_hub import snapshot_download

    cache = hub_cache_dir()
    try:  # a complete cached snapshot serves, without a request
        return Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True))
    except Exception as e:
        if hub_offline():
            raise fail(
                repo_id,
                f"a Hub model id already in the local cache ({cache}) because HF_HUB_OFFLINE=1",
                f"no complete cached snapshot ({type(e).__name__}); run once online, unset HF_HUB_OFFLINE, "
                "or pass a local directory",
            ) from None
    why = hub_reachable()
    if why is not None:
        raise _unreachable(repo_id, f"the Hub is {why}")
    folder = repo_folder(repo_id, cache)
    return contained(
        folder,
        hub_download.download_snapshot(repo_id, folder, endpoint=hub_endpoint()),
        what=f"the downloaded snapshot of {repo_id}",
    )
