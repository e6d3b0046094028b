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

from flax_posenc.conversion.sources import open_checkpoint
ckpt = open_checkpoint("path/to/all-MiniLM-L6-v2")
ckpt.config["model_type"], ckpt.weights_path.name
('bert', 'model.safetensors')
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, Callable

from flax_posenc.conversion.readers import TensorReader, fail, one_line, open_weights
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
    """

    source: str
    weights_path: Path
    reader: TensorReader
    config: dict[str, Any]
    config_path: Path | None
    root: Path | None


def parse_sinusoidal(source: str) -> tuple[int, int] | None:
    """``"sinusoidal:L:D"`` -> ``(L, D)``; any other string -> ``None``.

    Raises:
      CheckpointError: the prefix is there but ``L``/``D`` are not positive integers.
    """
    if not source.startswith(SINUSOIDAL_PREFIX):
        return None
    parts = source.split(":")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
        raise fail(source, "sinusoidal:LENGTH:DIM with positive integers (e.g. sinusoidal:1024:768)",
                   repr(source))
    return int(parts[1]), int(parts[2])


def read_config(path: Path) -> dict[str, Any]:
    """``config.json`` as a dict. Raises CheckpointError if it is not a JSON object."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise fail(path, "a JSON model config", f"{type(e).__name__}: {e}") from None
    if not isinstance(config, dict):
        raise fail(path, "a JSON object as model config", type(config).__name__)
    return config


def find_weights(directory: Path) -> Path:
    """The weights file of a checkpoint directory (see :data:`WEIGHT_NAMES`).

    Raises:
      CheckpointError: none of the known weight files is there (lists what is).
    """
    for name in WEIGHT_NAMES:
        if (directory / name).is_file():
            return directory / name
    others = sorted(p.name for p in directory.iterdir())
    shown = ", ".join(others[:12]) + (" ..." if len(others) > 12 else "") if others else "an empty directory"
    raise fail(directory, f"weights ({' or '.join(WEIGHT_NAMES)})", shown)


def open_directory(directory: Path, *, source: str, require_config: bool,
               resolve_shard: Callable[[str], Path] | None = None) -> Checkpoint:
    """Open a Hugging Face layout directory (``config.json`` + weights)."""
    config_path = directory / CONFIG_NAME
    has_config = config_path.is_file()
    if require_config and not has_config:
        present = sorted(p.name for p in directory.iterdir())[:12]
        raise fail(directory, f"{CONFIG_NAME} (Hugging Face layout; or pass family=, or the weights file "
                   "itself)", f"no {CONFIG_NAME}; files: {', '.join(present) or 'none'}")
    weights = find_weights(directory)
    config = read_config(config_path) if has_config else {}
    return Checkpoint(source, weights, open_weights(weights, resolve_shard), config,
                      config_path if has_config else None, directory)


def open_file(path: Path, *, source: str) -> Checkpoint:
    """Open a bare weights file; a ``config.json`` beside it is used when present."""
    config_path = path.parent / CONFIG_NAME
    has_config = config_path.is_file()
    config = read_config(config_path) if has_config else {}
    return Checkpoint(source, path, open_weights(path), config, config_path if has_config else None,
                      path.parent if has_config else None)


def looks_like_repo_id(source: str) -> bool:
    """Whether ``source`` could be a Hub model id (``"gpt2"``, ``"org/name"``) rather than a path."""
    return bool(_REPO_ID.match(source)) and ".." not in source and not source.endswith(
        (".safetensors", ".bin", ".json", ".pt", ".pth"))


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
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_dir():
        return open_directory(path, source=text, require_config=require_config)
    if path.is_file():
        return open_file(path, source=text)
    if isinstance(source, str) and looks_like_repo_id(text) and not path.exists():
        return open_hub(text, require_config=require_config)
    parent = path.parent
    hint = f" (nor its folder {parent})" if not parent.exists() else ""
    raise fail(path, "a checkpoint directory, a .safetensors/.bin file, a Hub model id or "
               "sinusoidal:LENGTH:DIM", f"no such file or directory{hint}")


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


def _cached(repo_id: str, filename: str, cache_dir: Path) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo_id, filename, cache_dir=str(cache_dir))
    except Exception:  # invalid repo id and the like: treat as not cached
        return None
    return Path(hit) if isinstance(hit, str) else None


def _download(repo_id: str, filename: str, cache_dir: Path) -> Path | None:
    """Download one file (progress bar from huggingface_hub); ``None`` if the repo lacks it."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=str(cache_dir)))
    except EntryNotFoundError:
        return None
    except RepositoryNotFoundError:
        raise fail(repo_id, "a Hugging Face model id (or a local path)", "no such repository on the Hub "
                   "(or it is private/gated)") from None
    except Exception as e:
        raise fail(f"{repo_id}/{filename}", "a file downloadable from the Hugging Face Hub",
                   f"{type(e).__name__}: {one_line(e)[:200]}") from None


def open_hub(repo_id: str, *, require_config: bool = True) -> Checkpoint:
    """Resolve a Hub model id: local cache first, then (online only) download what is missing.

    Only ``config.json`` and the weights file (or shard index; shards on first use) are fetched.

    Raises:
      CheckpointError: offline and not cached; no such repository; no weights in it.
    """
    cache = hub_cache_dir()
    offline = hub_offline()
    config = _cached(repo_id, CONFIG_NAME, cache)
    weights = next((p for n in WEIGHT_NAMES if (p := _cached(repo_id, n, cache)) is not None), None)
    if config is None or weights is None:
        if offline:
            missing = CONFIG_NAME if config is None else "weights"
            raise fail(repo_id, f"a Hub model id already in the local cache ({cache}) because "
                       "HF_HUB_OFFLINE=1", f"no cached {missing}; run once online, unset HF_HUB_OFFLINE, "
                       "or pass a local directory")
        if config is None:
            config = _download(repo_id, CONFIG_NAME, cache)
            if config is None and require_config:
                raise fail(repo_id, f"{CONFIG_NAME} in the Hub repository", "none")
        if weights is None:
            weights = next((p for n in WEIGHT_NAMES if (p := _download(repo_id, n, cache)) is not None), None)
            if weights is None:
                raise fail(repo_id, f"weights ({' or '.join(WEIGHT_NAMES)}) in the Hub repository", "none")

    def resolve_shard(name: str) -> Path:
        hit = _cached(repo_id, name, cache)
        if hit is not None:
            return hit
        if offline:
            raise fail(f"{repo_id}/{name}", "a cached shard (HF_HUB_OFFLINE=1)", "not in the local cache")
        got = _download(repo_id, name, cache)
        if got is None:
            raise fail(f"{repo_id}/{name}", "a shard listed in the index", "not in the Hub repository")
        return got

    try:
        reader = open_weights(weights, resolve_shard)
    except CheckpointError:
        raise
    cfg = read_config(config) if config is not None else {}
    return Checkpoint(repo_id, weights, reader, cfg, config, weights.parent)


def snapshot_directory(repo_id: str) -> Path:
    """A complete local snapshot of a Hub repository (for export), cache first."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, cache_dir=str(hub_cache_dir()), local_files_only=hub_offline()))
    except Exception as e:
        raise fail(repo_id, "a Hub model id (cached, or downloadable when online)",
                   f"{type(e).__name__}: {one_line(e)[:200]}") from None
