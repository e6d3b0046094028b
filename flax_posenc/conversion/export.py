"""Writing a modified position table back into a Hugging Face layout checkpoint, atomically.

The new checkpoint is assembled in a temporary folder beside the target, checked by reading
it back, and only then renamed into place; on any failure the temporary folder is removed and
nothing is left behind. Every file other than the weights file holding the table and
``config.json`` (and the shard index's ``total_size``) is copied byte for byte, sub-folders
included. Inside the rewritten safetensors file every other tensor's bytes are copied unchanged
(streamed: the file is never held in memory); the table keeps the checkpoint's dtype (bfloat16
included, rounded to nearest even).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np

from flax_posenc.conversion.families import detect_family, resolve_relative
from flax_posenc.conversion.load import load_position_table, table_offset
from flax_posenc.conversion.readers import (
    SAFETENSORS_DTYPES,
    TorchBinReader,
    fail,
    float32_to_bf16_bits,
    import_torch,
    read_index,
    read_safetensors_header,
)
from flax_posenc.conversion.sources import (
    CONFIG_NAME,
    Checkpoint,
    looks_like_repo_id,
    open_checkpoint,
    open_directory,
    snapshot_directory,
)

_COPY_CHUNK = 16 << 20


def _encode(weights: np.ndarray, st_dtype: str, where: str) -> bytes:
    """The table's bytes in the checkpoint's dtype (little-endian)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if st_dtype == "BF16":
            out = float32_to_bf16_bits(weights.astype(np.float32))
            back = (out.astype(np.uint32) << 16).view(np.float32)
        else:
            out = weights.astype(SAFETENSORS_DTYPES[st_dtype])
            back = out
    if not np.isfinite(back).all():
        raise fail(where, f"a table representable in the checkpoint's dtype {st_dtype}",
                   "values that overflow it (Inf after the cast)")
    return np.ascontiguousarray(out).tobytes()


def rewrite_safetensors(src: Path, dst: Path, key: str, weights: np.ndarray) -> None:
    """Copy ``src`` to ``dst`` with tensor ``key`` replaced by ``weights`` (dtype kept).

    Tensors are laid out by decreasing item size (as safetensors does), so every tensor stays
    aligned; their bytes are streamed from ``src`` unchanged. ``__metadata__`` is kept.
    """
    header, data_start = read_safetensors_header(src)
    metadata = header.pop("__metadata__", None)
    entry = header[key]
    payload = _encode(weights, entry["dtype"], f"{src}:{key}")
    order = sorted(header, key=lambda k: (-SAFETENSORS_DTYPES[header[k]["dtype"]].itemsize, k))
    new_header: dict = {}
    if metadata is not None:
        new_header["__metadata__"] = metadata
    pos = 0
    for name in order:
        e = header[name]
        size = len(payload) if name == key else e["data_offsets"][1] - e["data_offsets"][0]
        shape = list(weights.shape) if name == key else e["shape"]
        new_header[name] = {"dtype": e["dtype"], "shape": shape, "data_offsets": [pos, pos + size]}
        pos += size
    blob = json.dumps(new_header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(struct.pack("<Q", len(blob)))
        fout.write(blob)
        for name in order:
            if name == key:
                fout.write(payload)
                continue
            b, e = header[name]["data_offsets"]
            fin.seek(data_start + b)
            left = e - b
            while left:
                chunk = fin.read(min(left, _COPY_CHUNK))
                if not chunk:
                    raise fail(src, f"{e - b} bytes for {name!r}", "a truncated file")
                fout.write(chunk)
                left -= len(chunk)


def rewrite_torch_bin(src: Path, dst: Path, key: str, weights: np.ndarray) -> None:
    """Copy a ``.bin`` state dict with ``key`` replaced (needs torch; read weights-only)."""
    reader = TorchBinReader(src)
    torch = import_torch(src)
    state = dict(reader.state_dict())
    old = state[key]
    new = torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float32)).to(old.dtype)
    if not bool(torch.isfinite(new).all()):
        raise fail(f"{src}:{key}", f"a table representable in {old.dtype}", "values that overflow it")
    state[key] = new
    torch.save(state, dst)


def _tensor_bytes(header: dict) -> int:
    return sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__")


def _source_directory(source: str | os.PathLike) -> Checkpoint:
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_file():
        raise fail(path, "a checkpoint directory (config.json + weights) to export from", "a single file")
    if not path.exists() and isinstance(source, str) and looks_like_repo_id(text):
        path = snapshot_directory(text)
    if not path.is_dir():
        return open_checkpoint(source)  # raises the missing-path error
    return open_directory(path, source=text, require_config=True)


def export_position_table(source: str | os.PathLike, weights: np.ndarray, out_dir: str | os.PathLike, *,
                          overwrite: bool = False) -> Path:
    """Write ``weights`` as the position table of a copy of checkpoint ``source``.

    The copy is a Hugging Face layout directory that ``transformers`` loads: every other file
    and tensor unchanged, the config's limit updated (``n_positions``, and ``n_ctx`` if present,
    for GPT-2; ``max_position_embeddings`` otherwise -- counting the reserved rows for
    RoBERTa/MPNet, excluding the 2 offset rows for OPT/BART).

    Args:
      source: a checkpoint directory with ``config.json`` (or a Hub model id).
      weights: ``(rows, dim)`` float array, the whole new table, reserved rows included;
        ``dim`` must equal the old table's; it is stored in the checkpoint's dtype.
      out_dir: the new checkpoint directory (parents are created).
      overwrite: replace ``out_dir`` if it exists (else that is an error).

    Returns:
      ``out_dir`` as an absolute :class:`pathlib.Path`.

    Raises:
      CheckpointError: the source cannot be read, the target exists (and not ``overwrite``),
        ``weights`` has the wrong rank/width/dtype, too few rows, NaN/Inf or values that
        overflow the stored dtype. Nothing is written on failure.

    t = load_position_table(src)
    longer = np.concatenate([t.weights, t.weights[-8:]])
    export_position_table(src, longer, "out").name
    'out'
    """
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and not overwrite:
        raise fail(out, "a new export target (or overwrite=True)", "it already exists")
    if out.exists() and not out.is_dir():
        raise fail(out, "a directory as export target", "an existing file")
    ckpt = _source_directory(source)
    det = detect_family(ckpt.reader.keys(), ckpt.config, where=str(ckpt.config_path))
    fam, prefix = det
    key = prefix + fam.position_key
    old = load_position_table(ckpt.root, key=key)
    arr = np.asarray(weights)
    if arr.dtype.kind != "f" or arr.ndim != 2:
        raise fail("weights", f"a 2-D float array (rows, {old.dim})", f"{arr.dtype} array of shape {arr.shape}")
    if arr.shape[1] != old.dim:
        raise fail("weights", f"width {old.dim} (the table of {ckpt.source})", f"shape {arr.shape}")
    offset = table_offset(fam, ckpt.config)
    if arr.shape[0] <= offset:
        raise fail("weights", f"more than {offset} rows ({offset} reserved for {fam.name})", f"{arr.shape[0]} rows")
    if not np.isfinite(arr).all():
        raise fail("weights", "finite values", f"{int((~np.isfinite(arr)).sum())} NaN/Inf values")
    keys = set(ckpt.reader.keys())
    for rel in fam.shared_length_keys:
        other = resolve_relative(prefix, rel)
        if other in keys and ckpt.reader.info(other)[1][0] != arr.shape[0]:
            rows = ckpt.reader.info(other)[1][0]
            raise fail("weights", f"{rows} rows: {other} ({rows} rows) shares {fam.length_field} with {key}, "
                       "so only same-size tables can be exported", f"{arr.shape[0]} rows")

    table_file = ckpt.reader.file_of(key)
    sharded = ckpt.weights_path.name.endswith(".index.json")
    root = ckpt.root
    assert root is not None
    skip = {(root / CONFIG_NAME).resolve(), Path(table_file).absolute()}
    if sharded:
        skip.add(ckpt.weights_path.absolute())

    created_parents: list[Path] = []
    parent = out.parent
    while not parent.exists():
        created_parents.append(parent)
        parent = parent.parent
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    trash: Path | None = None
    try:
        _copy_tree(root, tmp, skip={*skip}, exclude={tmp.resolve(), out.resolve()})
        rel = Path(table_file).absolute().relative_to(root.absolute())
        dst = tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.name.endswith(".safetensors"):
            rewrite_safetensors(Path(table_file), dst, key, arr)
        else:
            rewrite_torch_bin(Path(table_file), dst, key, arr)
        if sharded:
            index = json.loads(ckpt.weights_path.read_text(encoding="utf-8"))
            read_index(ckpt.weights_path)
            if dst.name.endswith(".safetensors") and isinstance(index.get("metadata"), dict) \
                    and "total_size" in index["metadata"]:
                old_h, _ = read_safetensors_header(Path(table_file))
                new_h, _ = read_safetensors_header(dst)
                index["metadata"]["total_size"] += _tensor_bytes(new_h) - _tensor_bytes(old_h)
            (tmp / ckpt.weights_path.name).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        config = dict(ckpt.config)
        value = fam.config_length(arr.shape[0], offset)
        config[fam.length_field] = value
        for extra in fam.extra_length_fields:
            if extra in config:
                config[extra] = value
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        # read it back: the config agrees, the table is what was asked (in the stored dtype)
        check = load_position_table(tmp, key=key)
        if check.weights.shape != arr.shape:
            raise fail(tmp, f"a written table of shape {arr.shape}", f"{check.weights.shape}")
        if out.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, trash / "old")
        os.replace(tmp, out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if trash is not None and (trash / "old").exists() and not out.exists():
            os.replace(trash / "old", out)  # put the old target back
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        for p in created_parents:
            try:
                p.rmdir()
            except OSError:
                pass
        if isinstance(e, OSError):
            raise fail(out, "a writable export target", f"{type(e).__name__}: {e}") from None
        raise
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    return out


def _copy_tree(src: Path, dst: Path, *, skip: set[Path], exclude: set[Path]) -> None:
    """Copy ``src`` into existing ``dst``, following symlinks (Hub snapshots), minus ``skip``."""
    for entry in sorted(src.iterdir()):
        absolute = entry.absolute()
        if entry.resolve() in exclude or absolute in exclude:
            continue
        if absolute in skip or entry.resolve() in skip:
            continue
        target = dst / entry.name
        if entry.is_dir():
            target.mkdir()
            _copy_tree(entry, target, skip=skip, exclude=exclude)
        else:
            shutil.copy2(entry, target)
