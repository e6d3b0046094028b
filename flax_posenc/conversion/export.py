"""Writing a modified position table back into a Hugging Face layout checkpoint, atomically.

The new checkpoint is assembled in a temporary folder beside the target, checked by reading
it back, and only then published (exclusively, see :mod:`~flax_posenc.conversion.atomic`); on
any failure, SIGINT or SIGTERM the temporary folder is removed and nothing is left behind.
Containment: everything read resolves inside the source checkpoint (symlinks pointing outside
it, and anything that is not a regular file or directory, are refused); everything written
lies under the output directory, in files created exclusively (never an existing file opened
for writing, so the source can never be truncated). Every file other than the weights file holding the table and
``config.json`` (and the shard index's ``total_size``) is copied byte for byte, sub-folders
included. Inside the rewritten safetensors file every other tensor's bytes are copied unchanged
(streamed: the file is never held in memory); the table keeps the checkpoint's dtype (bfloat16
included, rounded to nearest even). The copy also holds
:data:`~flax_posenc.conversion.outputs.EXPORT_MARKER` (``flax_posenc_export.json``: the source,
the table's name and rows), which marks it as flax-posenc's output: ``overwrite`` replaces only
such a directory or an orbax block (:mod:`~flax_posenc.conversion.outputs`, the one overwrite
rule), and never a path that is, lies inside or contains the source.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import tempfile
from pathlib import Path

import numpy as np

from flax_posenc.conversion.atomic import cleanup_on_signal, hold, publish_dir
from flax_posenc.conversion.families import detect_family, resolve_relative
from flax_posenc.conversion.load import load_position_table, read_detected_table
from flax_posenc.conversion.outputs import EXPORT_FORMAT, EXPORT_MARKER, check_output, protected_paths
from flax_posenc.conversion.readers import (
    HEADER_ITEMSIZE,
    SAFETENSORS_DTYPES,
    TorchBinReader,
    fail,
    float32_to_bf16_bits,
    import_torch,
    read_index,
    read_safetensors_header,
)
from flax_posenc.conversion.safety import is_inside, kind_of, load_json
from flax_posenc.conversion.sources import (
    CONFIG_NAME,
    Checkpoint,
    looks_like_repo_id,
    open_checkpoint,
    open_directory,
    snapshot_directory,
    source_text,
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
        raise fail(
            where,
            f"a table representable in the checkpoint's dtype {st_dtype}",
            "values that overflow it (Inf after the cast)",
        )
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
    order = sorted(header, key=lambda k: (-HEADER_ITEMSIZE[header[k]["dtype"]], k))
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
    with open(src, "rb") as fin, open(dst, "xb") as fout:  # "x": never an existing file
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
    with open(dst, "xb") as f:  # "x": never an existing file
        torch.save(state, f)


def _tensor_bytes(header: dict) -> int:
    return sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__")


def _source_directory(source: str | os.PathLike) -> Checkpoint:
    text = source_text(source)
    path = Path(text).expanduser()
    if path.is_file():
        raise fail(path, "a checkpoint directory (config.json + weights) to export from", "a single file")
    if not os.path.lexists(path) and isinstance(source, str) and looks_like_repo_id(text):
        path = snapshot_directory(text)  # its entries link into ../../blobs: see checkpoint_boundary
    if not path.is_dir():
        return open_checkpoint(source)  # raises the missing-path error
    return open_directory(path, source=text, require_config=True)


def export_position_table(
    source: str | os.PathLike, weights: np.ndarray, out_dir: str | os.PathLike, *, overwrite: bool = False
) -> Path:
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
      overwrite: replace ``out_dir`` if it exists (else that is an error), and only if it is an
        output of flax-posenc (an earlier export or an orbax block); never the source, a folder
        inside it or one that contains it (:func:`~flax_posenc.conversion.outputs.check_output`).

    Returns:
      ``out_dir`` as an absolute :class:`pathlib.Path`.

    Raises:
      CheckpointError: the source cannot be read, the target exists (and not ``overwrite``, or
        it is not flax-posenc's output), the target is, is inside or contains the source,
        ``weights`` has the wrong rank/width/dtype, too few rows, NaN/Inf or values that
        overflow the stored dtype. Nothing is written on failure.

    t = load_position_table(src)
    longer = np.concatenate([t.weights, t.weights[-8:]])
    export_position_table(src, longer, "out").name
    'out'
    """
    out = Path(source_text(out_dir, "out_dir")).expanduser().absolute()
    if os.path.lexists(out) and not overwrite:
        raise fail(out, "a new export target (or overwrite=True)", "it already exists")
    ckpt = _source_directory(source)
    assert ckpt.root is not None  # _source_directory: a directory checkpoint
    sources = protected_paths(ckpt.root) + protected_paths(ckpt.boundary or ckpt.root)
    check_output(out, kind="directory", sources=sources, overwrite=overwrite)
    try:
        with cleanup_on_signal():
            return _export(ckpt, weights, out, overwrite)
    except OSError as e:
        raise fail(out, "a writable export target", f"{type(e).__name__}: {e.strerror or e}") from None


def _export(ckpt: Checkpoint, weights: np.ndarray, out: Path, overwrite: bool) -> Path:
    det = detect_family(ckpt.reader.keys(), ckpt.config, where=str(ckpt.config_path))
    fam, prefix = det
    key = prefix + fam.position_key
    old = read_detected_table(ckpt, det, key)  # the checkpoint opened and detected once, by export_position_table
    arr = np.asarray(weights)
    if arr.dtype.kind != "f" or arr.ndim != 2:
        raise fail("weights", f"a 2-D float array (rows, {old.dim})", f"{arr.dtype} array of shape {arr.shape}")
    if arr.shape[1] != old.dim:
        raise fail("weights", f"width {old.dim} (the table of {ckpt.source})", f"shape {arr.shape}")
    offset = old.offset
    if arr.shape[0] <= offset:
        raise fail("weights", f"more than {offset} rows ({offset} reserved for {fam.name})", f"{arr.shape[0]} rows")
    if not np.isfinite(arr).all():
        raise fail("weights", "finite values", f"{int((~np.isfinite(arr)).sum())} NaN/Inf values")
    keys = set(ckpt.reader.keys())
    for shared in fam.shared_length_keys:
        other = resolve_relative(prefix, shared)
        if other in keys and ckpt.reader.info(other)[1][0] != arr.shape[0]:
            rows = ckpt.reader.info(other)[1][0]
            raise fail(
                "weights",
                f"{rows} rows: {other} ({rows} rows) shares {fam.length_field} with {key}, "
                "so only same-size tables can be exported",
                f"{arr.shape[0]} rows",
            )

    table_file = Path(ckpt.reader.file_of(key))
    sharded = ckpt.weights_path.name.endswith(".index.json")
    root = ckpt.root
    assert root is not None
    boundary = ckpt.boundary or root
    rel = _inside_path(root, table_file, boundary)
    skip = {root / CONFIG_NAME, root / rel, root / EXPORT_MARKER}  # a marker is written afresh
    if sharded:
        skip.add(ckpt.weights_path)

    created_parents: list[Path] = []
    parent = out.parent
    while not os.path.lexists(parent):
        created_parents.append(parent)
        parent = parent.parent
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _copy_tree(root, tmp, skip=skip, exclude={tmp, out}, boundary=boundary)
        dst = tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not is_inside(dst, tmp):
            raise fail(dst, f"a path inside the export {tmp}", "one outside it")
        if dst.name.endswith(".safetensors"):
            rewrite_safetensors(table_file, dst, key, arr)
        else:
            rewrite_torch_bin(table_file, dst, key, arr)
        if sharded:
            read_index(ckpt.weights_path)
            index = load_json(ckpt.weights_path, what="a JSON shard index")
            total = index["metadata"].get("total_size") if isinstance(index.get("metadata"), dict) else None
            if dst.name.endswith(".safetensors") and isinstance(total, int) and not isinstance(total, bool):
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
        marker = {"format": EXPORT_FORMAT, "version": 1, "source": ckpt.source, "table": key, "rows": arr.shape[0]}
        (tmp / EXPORT_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        # read it back: the config agrees, the table is what was asked (in the stored dtype)
        check = load_position_table(tmp, key=key)
        if check.weights.shape != arr.shape:
            raise fail(tmp, f"a written table of shape {arr.shape}", f"{check.weights.shape}")
        publish_dir(tmp, out, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in created_parents:
            try:
                p.rmdir()
            except OSError:
                pass
        raise
    return out


def _inside_path(root: Path, path: Path, boundary: Path) -> Path:
    """``path`` relative to ``root``, when it names a file under ``root`` that resolves inside
    ``boundary``; else CheckpointError (a shard named ``../x`` never gets here: the index
    reader refuses it)."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        raise fail(path, f"a file inside the checkpoint {root}", "a path outside it") from None
    if ".." in rel.parts or not is_inside(path, boundary):
        raise fail(path, f"a file inside the checkpoint {boundary}", "a path outside it")
    return rel


def _copy_tree(src: Path, dst: Path, *, skip: set[Path], exclude: set[Path], boundary: Path) -> None:
    """Copy ``src`` into the existing ``dst``, minus ``skip``: regular files and directories only.

    A symbolic link is copied as the regular file (or directory) it points to only when it
    resolves inside ``boundary`` (the checkpoint; for a Hub snapshot, its cache folder); a link
    out of it, to a device, a FIFO or a socket refuses the export with one line naming it.
    Directory links are followed at most once per real directory (no loops).
    """
    real_skip = {os.path.realpath(p) for p in skip} | {os.path.abspath(p) for p in skip}
    real_exclude = {os.path.realpath(p) for p in exclude}
    seen: set[str] = set()

    def walk(folder: Path, target: Path) -> None:
        real_folder = os.path.realpath(folder)
        if real_folder in seen:
            raise fail(folder, "a checkpoint without directory loops", "a symbolic link back to a parent")
        seen.add(real_folder)
        for entry in sorted(folder.iterdir()):
            if os.path.abspath(entry) in real_skip:
                continue
            real = os.path.realpath(entry)
            if real in real_exclude or real in real_skip:
                continue
            if not is_inside(entry, boundary):
                raise fail(
                    entry,
                    f"files that resolve inside the checkpoint {boundary}",
                    f"a symbolic link to {real} (refused, not copied)",
                )
            try:
                st = os.stat(entry)
            except OSError:
                raise fail(entry, "a readable file in the checkpoint", "a dangling symbolic link") from None
            out = target / entry.name
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(out)
                walk(entry, out)
            elif stat.S_ISREG(st.st_mode):
                _copy_file(entry, out, st.st_size)
            else:
                raise fail(entry, "regular files and directories in the checkpoint", kind_of(st.st_mode))

    walk(src, dst)


def _copy_file(src: Path, dst: Path, size: int) -> None:
    """Copy exactly ``size`` bytes (the size seen before copying) into a new file ``dst``."""
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        left = size
        while left:
            chunk = fin.read(min(left, _COPY_CHUNK))
            if not chunk:
                raise fail(src, f"{size} bytes", f"{size - left} (the file shrank while copied)")
            fout.write(chunk)
            left -= len(chunk)
            hold("copying")  # tests: the export is known to be in progress here (atomic.TEST_HOLD_ENV)
    shutil.copystat(src, dst)
