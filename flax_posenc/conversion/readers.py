"""Reading tensors from checkpoint files lazily, one named tensor at a time.

Three readers share one small interface (:class:`TensorReader`): ``keys()``, ``info(key)``
(dtype name and shape, from the header only) and ``read(key)`` (that one tensor as numpy):

- :class:`SafetensorsReader`: the header is parsed and checked as ``safetensors`` checks it
  (bounded JSON, every entry inside the file, tensors back to back), then only the requested
  tensor's byte range is read, straight into the returned array. bfloat16 tensors, which
  numpy cannot hold, are upcast *exactly* to float32 (a bfloat16 is the top half of a float32).
- :class:`TorchBinReader`: ``torch.load(path, map_location="cpu", weights_only=True,
  mmap=True)``, only when torch is importable; a pickle that would run code is refused by
  torch's weights-only unpickler and reported as :class:`CheckpointError`.
- :class:`ShardedReader`: a ``*.index.json`` (``weight_map``: tensor -> shard file); a shard is
  opened only when one of its tensors is read.

Every failure is a one-line :class:`~flax_posenc.errors.CheckpointError` naming the file, what
was expected and what was found; safetensors' own errors (``SafetensorError``, Rust panics) and
torch's are wrapped, never leaked.

from flax_posenc.conversion.readers import open_weights
r = open_weights("model.safetensors")
r.info("wpe.weight"), r.read("wpe.weight").shape
(('F32', (1024, 768)), (1024, 768))
"""

from __future__ import annotations

import os
import struct
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from flax_posenc import errors
from flax_posenc.conversion.safety import contained, load_json, parse_json, regular_file, safe_member_name
from flax_posenc.errors import CheckpointError

#: safetensors dtype name -> numpy dtype (little-endian). BF16 is read as raw uint16.
SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
#: bytes per element of every dtype a header may declare: the readable ones above plus those we
#: never read but must not refuse a whole file for (float8: only that tensor is refused).
HEADER_ITEMSIZE: dict[str, int] = {**{k: v.itemsize for k, v in SAFETENSORS_DTYPES.items()}, "F8_E4M3": 1, "F8_E5M2": 1}
#: dtypes a weight may have (returned as float16/float32/float64; BF16 upcast to float32).
FLOAT_DTYPES: tuple[str, ...] = ("F16", "BF16", "F32", "F64")
#: safetensors refuses headers above 100 MB; so do we.
MAX_HEADER_BYTES = 100_000_000


def one_line(text: object) -> str:
    """Collapse a (possibly multi-line) message into one line (:func:`flax_posenc.errors.one_line`:
    control characters escaped, length capped)."""
    return errors.one_line(text)


def fail(where: object, expected: str, found: str) -> CheckpointError:
    """``CheckpointError("<where>: expected <expected>, found <found>")`` on one line."""
    return CheckpointError(one_line(f"{where}: expected {expected}, found {found}"))


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32, exactly (bf16 is float32's top 16 bits)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


class TensorReader(Protocol):
    """What every reader offers. ``key`` is a tensor name as stored in the checkpoint."""

    path: Path

    def keys(self) -> list[str]: ...

    def info(self, key: str) -> tuple[str, tuple[int, ...]]:
        """``(dtype, shape)`` with safetensors dtype names (``"F32"``, ``"BF16"``, ...)."""
        ...

    def read(self, key: str) -> np.ndarray: ...

    def file_of(self, key: str) -> Path: ...


# ----------------------------------------------------------------------------- safetensors


def read_safetensors_header(path: Path) -> tuple[dict, int]:
    """Parse a safetensors header without reading any tensor data.

    Returns ``(header, data_start)``: the JSON header (``{name: {"dtype", "shape",
    "data_offsets"}, "__metadata__": {...}}``, a new dict the caller may change; its entries are
    shared and must not be changed) and the byte where tensor data begins. Checks that the header
    is a JSON object of well-formed entries whose byte ranges fit the file, as ``safetensors``
    does. A file whose identity (device, inode, size, mtime, ctime: one ``stat`` per call) is
    that of a file already checked in this process is not parsed again (see ``_CHECKED_HEADERS``).

    Raises:
      CheckpointError: the file is shorter than its header says, or the header is malformed.
    """
    path = Path(path)
    st = regular_file(path, what="a safetensors file")
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _CHECKED_LOCK:
        known = _CHECKED_HEADERS.get(identity)
        if known is not None:  # this very file, unchanged since its header passed every check below
            _CHECKED_HEADERS.move_to_end(identity)
            return dict(known[0]), known[1]
    header, data_start = _read_and_check_header(path, st.st_size)
    with _CHECKED_LOCK:
        _CHECKED_HEADERS[identity] = (MappingProxyType(dict(header)), data_start)
        while len(_CHECKED_HEADERS) > _CHECKED_HEADERS_MAX:
            _CHECKED_HEADERS.popitem(last=False)
    return header, data_start


#: headers that passed :func:`read_safetensors_header`'s checks in this process, keyed by the
#: file's identity ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` from the ``stat``
#: made on every call: a file replaced, rewritten, truncated or touched (even with its mtime set
#: back, which moves ctime) is a new key and is parsed and checked again. Only the header is
#: kept; tensor bytes are read, and checked for NaN/Inf, on every call.
_CHECKED_HEADERS: OrderedDict[tuple[int, ...], tuple[MappingProxyType, int]] = OrderedDict()
_CHECKED_HEADERS_MAX = 32
_CHECKED_LOCK = threading.Lock()


def _read_and_check_header(path: Path, size: int) -> tuple[dict, int]:
    """The parsing and checking of :func:`read_safetensors_header` (no cache)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise fail(
                    path, "a safetensors file (8-byte header length, JSON header, data)", f"only {len(head)} bytes"
                )
            if size < 8:  # it reports fewer bytes than it just gave: a /proc or other virtual file
                raise fail(
                    path,
                    "a safetensors file whose size is known (a regular file on disk)",
                    f"a file that reports {size} bytes but holds more (a virtual file, such as under /proc?)",
                )
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise fail(
                    path,
                    f"a safetensors header of at most {min(MAX_HEADER_BYTES, size - 8)} bytes "
                    "(truncated or not a safetensors file?)",
                    f"a declared header length of {n}",
                )
            raw = f.read(n)
    except OSError as e:
        raise fail(path, "a readable safetensors file", f"{type(e).__name__}: {e}") from None
    header = parse_json(raw, where=path, what="a JSON safetensors header")
    if not isinstance(header, dict):
        raise fail(path, "a JSON object as safetensors header", type(header).__name__)
    data_start = 8 + n
    data_len = size - data_start
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        # json.loads makes only plain dict/list/int/str/bool: ``type(x) is int`` is "an int, not a bool"
        dtype: Any = entry.get("dtype") if type(entry) is dict else None
        shape: Any = entry.get("shape") if dtype is not None else None  # checked below
        offsets: Any = entry.get("data_offsets") if dtype is not None else None
        ok = (
            type(dtype) is str
            and dtype in HEADER_ITEMSIZE
            and type(shape) is list
            and type(offsets) is list
            and len(offsets) == 2
            and type(offsets[0]) is int
            and type(offsets[1]) is int
        )
        if ok:
            count = 1
            for d in shape:  # safetensors (Rust) counts elements in 64 bits, overflow refused
                if type(d) is not int or not 0 <= d < _U64 or count * d >= _U64:
                    ok = False
                    break
                count *= d
        if not ok:
            raise fail(path, "header entries {dtype, shape, data_offsets}", f"{name!r}: {str(entry)[:120]}")
        b, end = offsets
        want = count * HEADER_ITEMSIZE[dtype]  # exact ints
        if not (0 <= b <= end <= data_len) or end - b != want:
            raise fail(
                path,
                f"{name!r} to occupy {want} bytes inside the {data_len} data bytes (truncated file?)",
                f"data_offsets [{b}, {end}]",
            )
        spans.append((b, end, name))
    _check_layout(path, header, spans, data_len)
    return header, data_start


_U64 = 1 << 64


def _check_layout(path: Path, header: dict, spans: list[tuple[int, int, str]], data_len: int) -> None:
    """What ``safetensors`` itself checks beyond each entry's own range (so that we need not
    open the file a second time with it): tensors back to back in offset order with neither gap
    nor overlap, together covering the data bytes exactly, and ``__metadata__`` null or a
    ``{str: str}`` object. ``tests/test_fast_paths.py`` checks that these decisions are
    ``safetensors.safe_open``'s on crafted headers."""
    meta = header.get("__metadata__")
    if meta is not None and (type(meta) is not dict or any(type(v) is not str for v in meta.values())):
        raise fail(path, "a safetensors __metadata__ of string values (or null)", str(meta)[:120])
    spans.sort()
    end = 0
    for b, e, name in spans:
        if b != end:
            raise fail(
                path,
                f"tensors stored back to back ({name!r} to begin at data byte {end}, where the previous one ends)",
                f"data_offsets [{b}, {e}]",
            )
        end = e
    if end != data_len:
        raise fail(path, f"tensor data covering all {data_len} data bytes", f"{data_len - end} bytes no tensor holds")


def read_into(path: Path, offset: int, out: np.ndarray) -> int:
    """Read ``out.nbytes`` bytes of ``path`` from byte ``offset`` straight into the C-contiguous
    ``out`` (one buffer, no intermediate copy); returns the bytes read (fewer: the file ended)."""
    view = out.reshape(-1).view(np.uint8).data  # a memoryview
    done = 0
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        while done < len(view):
            got = f.readinto(view[done:])
            if not got:
                break
            done += got
    return done


class SafetensorsReader:
    """One ``.safetensors`` file: its header parsed and checked once, then each tensor read on
    demand with one positioned read of its byte range into the returned array.

    The checks are ``safetensors``' own (each entry well formed and inside the file, tensors
    back to back covering the data exactly, string metadata), so the file is not opened a
    second time with ``safetensors.safe_open``. Float dtypes come back as stored (float16,
    float32, float64) except bfloat16, which comes back as float32 (exact upcast).

    Raises:
      CheckpointError: not a safetensors file, truncated, corrupted header, unknown key.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._header, self._data_start = read_safetensors_header(self.path)
        self._header.pop("__metadata__", None)

    def keys(self) -> list[str]:
        return list(self._header)

    def info(self, key: str) -> tuple[str, tuple[int, ...]]:
        entry = self._entry(key)
        return entry["dtype"], tuple(entry["shape"])

    def file_of(self, key: str) -> Path:
        self._entry(key)
        return self.path

    def _entry(self, key: str) -> dict:
        try:
            return self._header[key]
        except KeyError:
            raise fail(self.path, f"tensor {key!r}", "no such tensor") from None

    def read_raw(self, key: str) -> np.ndarray:
        """The tensor's stored bits as numpy (bfloat16 as uint16), read from the file's byte range."""
        entry = self._entry(key)
        if entry["dtype"] not in SAFETENSORS_DTYPES:
            raise fail(
                f"{self.path}:{key}",
                f"a tensor of a readable dtype ({'/'.join(SAFETENSORS_DTYPES)})",
                f"dtype {entry['dtype']}",
            )
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        b, e = entry["data_offsets"]
        arr = np.empty((e - b) // dtype.itemsize, dtype=dtype)
        try:
            got = read_into(self.path, self._data_start + b, arr)
        except (OSError, ValueError) as err:
            raise fail(f"{self.path}:{key}", f"{e - b} readable bytes", f"{type(err).__name__}: {err}") from None
        if got != e - b:
            raise fail(f"{self.path}:{key}", f"{e - b} bytes", f"{got} (truncated file)")
        try:
            return arr.reshape(entry["shape"])
        except ValueError as err:  # a (zero-size) shape with a dimension numpy cannot index
            raise fail(f"{self.path}:{key}", "a shape numpy can hold", f"{entry['shape']} ({err})") from None

    def read(self, key: str) -> np.ndarray:
        arr = self.read_raw(key)
        if self._header[key]["dtype"] == "BF16":
            return bf16_bits_to_float32(arr)
        return arr


# ----------------------------------------------------------------------------- torch .bin

TORCH_EXTRA_HINT = "pip install 'flax-posenc[torch]'"


def import_torch(path: Path):
    """``import torch`` or a one-line CheckpointError naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise fail(
            path,
            f"torch to read a PyTorch .bin checkpoint (install it: {TORCH_EXTRA_HINT}; "
            "or convert the checkpoint to safetensors)",
            "torch is not installed",
        ) from None
    return torch


_TORCH_TO_ST = {
    "torch.float64": "F64",
    "torch.float32": "F32",
    "torch.float16": "F16",
    "torch.bfloat16": "BF16",
    "torch.int64": "I64",
    "torch.int32": "I32",
    "torch.int16": "I16",
    "torch.int8": "I8",
    "torch.uint8": "U8",
    "torch.bool": "BOOL",
}


def _weights_only_reason(message: str) -> str:
    """What torch's weights-only unpickler blocked (the global's name), never its advice to
    turn ``weights_only`` off or to allowlist the global."""
    import re

    hit = re.search(r"GLOBAL\s+([A-Za-z_][\w.]*)", message)
    if hit:
        return f"it needs the global {hit.group(1).rstrip('.')}, which is blocked"
    for line in message.splitlines():
        line = line.strip()
        if (
            line
            and not line.startswith(("Weights only load failed", "Check the documentation", "Please file"))
            and "weights_only" not in line
            and "safe_globals" not in line
        ):
            return one_line(line)[:200]
    return "torch's weights-only unpickler refused it"


class TorchBinReader:
    """A PyTorch ``.bin`` state dict, loaded with ``weights_only=True`` (never arbitrary pickles).

    Loaded with ``mmap=True`` (tensor storage stays on disk until read); a legacy (non-zip)
    file falls back to ``mmap=False``, still weights-only.

    Raises:
      CheckpointError: torch missing (names the extra), a pickle that would run code or
        unpickle non-tensor objects, a file that is not a flat ``{name: tensor}`` dict.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        torch = import_torch(self.path)
        self._torch = torch
        state = None
        for mmap in (True, False):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # pickle-protocol chatter
                    state = torch.load(str(self.path), map_location="cpu", weights_only=True, mmap=mmap)
                break
            except BaseException as e:
                if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                    raise
                msg = one_line(e)
                if mmap and "mmap" in msg.lower() and "weights only" not in msg.lower():
                    continue  # legacy (non-zip) format: retry without mmap, still weights-only
                if "weights only" in msg.lower():
                    raise fail(
                        self.path,
                        "a weights-only PyTorch checkpoint (tensors in a dict)",
                        "a pickle that would need arbitrary code or objects; refused, not "
                        f"unpickled ({_weights_only_reason(str(e))})",
                    ) from None
                raise fail(
                    self.path,
                    "a PyTorch checkpoint readable with torch.load(weights_only=True)",
                    f"{type(e).__name__}: {msg[:200]}",
                ) from None
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
        ):
            raise fail(self.path, "a flat state dict {name: tensor}", type(state).__name__)
        check_storage_records(self.path)
        self._state = state

    def keys(self) -> list[str]:
        return list(self._state)

    def _tensor(self, key: str):
        try:
            return self._state[key]
        except KeyError:
            raise fail(self.path, f"tensor {key!r}", "no such tensor") from None

    def info(self, key: str) -> tuple[str, tuple[int, ...]]:
        t = self._tensor(key)
        name = _TORCH_TO_ST.get(str(t.dtype), str(t.dtype))
        if t.layout != self._torch.strided:  # sparse and the like: refused when read, named here
            name = f"{name} ({str(t.layout).replace('torch.', '')} layout)"
        return name, tuple(int(d) for d in t.shape)

    def file_of(self, key: str) -> Path:
        self._tensor(key)
        return self.path

    def read(self, key: str) -> np.ndarray:
        t = self._tensor(key).detach()
        dtype, _ = self.info(key)
        if t.layout != self._torch.strided or dtype not in SAFETENSORS_DTYPES:
            raise fail(f"{self.path}:{key}", "a dense tensor of a readable dtype", f"dtype {dtype}")
        if t.dtype == self._torch.bfloat16:
            t = t.float()
        return np.array(t.numpy(), copy=True)

    def state_dict(self) -> dict:
        """The whole (memory-mapped) state dict, for rewriting a ``.bin`` on export."""
        return self._state


#: storage class name (as pickled by torch.save) -> bytes per element.
_STORAGE_ITEMSIZE = {
    "DoubleStorage": 8,
    "FloatStorage": 4,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
    "UntypedStorage": 1,
    "ComplexFloatStorage": 8,
    "ComplexDoubleStorage": 16,
}


class _Stub:
    """Stands for every global of the pickle: nothing is imported, nothing is called."""

    def __init__(self, name: str = ""):
        self.name = name

    def __call__(self, *args, **kwargs):
        return _Stub()

    def __setitem__(self, key, value):
        pass

    def __setstate__(self, state):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass


def _declared_storages(data_pkl: bytes) -> list[tuple[str, str, int]]:
    """``(key, storage class, element count)`` of every storage a torch ``data.pkl`` names.

    The pickle is walked with stubs (no global is imported or called): only the persistent ids
    ``("storage", type, key, location, numel)`` are recorded.
    """
    import io
    import pickle

    found: list[tuple[str, str, int]] = []

    class Scan(pickle.Unpickler):
        def find_class(self, module, name):
            return _Stub(name)

        def persistent_load(self, pid):
            if isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage":
                found.append((str(pid[2]), getattr(pid[1], "name", ""), pid[4]))
            return _Stub()

    Scan(io.BytesIO(data_pkl)).load()
    return found


def check_storage_records(path: Path) -> None:
    """Refuse a zip ``.bin`` whose storage records hold fewer bytes than the pickle declares.

    With ``mmap=True`` torch would hand out the bytes that follow a short record (other parts of
    the zip) as tensor data; this check reads only the zip directory and ``data.pkl``.
    """
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            pkl = next((n for n in names if n.endswith("data.pkl") and n.count("/") == 1), None)
            if pkl is None:
                return
            prefix = pkl.rsplit("/", 1)[0]
            if z.getinfo(pkl).file_size > MAX_HEADER_BYTES:
                raise fail(path, f"a data.pkl of at most {MAX_HEADER_BYTES} bytes", f"{z.getinfo(pkl).file_size}")
            storages = _declared_storages(z.read(pkl))
            sizes = {i.filename: i.file_size for i in z.infolist()}
    except CheckpointError:
        raise
    except zipfile.BadZipFile:
        return  # legacy (non-zip) format: read without mmap, torch checks the sizes itself
    except Exception as e:  # a pickle the stubs cannot walk: torch's weights-only load already passed
        if isinstance(e, (MemoryError, RecursionError)):
            raise fail(path, "a PyTorch checkpoint of reasonable structure", type(e).__name__) from None
        return
    for key, kind, numel in storages:
        itemsize = _STORAGE_ITEMSIZE.get(kind)
        if itemsize is None or not isinstance(numel, int):
            continue
        record = f"{prefix}/data/{key}"
        have = sizes.get(record)
        if have is None or have < numel * itemsize:
            raise fail(
                path,
                f"storage record {record} of {numel * itemsize} bytes ({numel} x {kind})",
                f"{'no such record' if have is None else f'{have} bytes'} (truncated or corrupted file)",
            )


# ----------------------------------------------------------------------------- sharded

#: what a shard listed in an index may be.
SHARD_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin")


def read_index(path: Path) -> dict[str, str]:
    """The ``weight_map`` of a ``*.index.json`` (tensor name -> shard file name).

    Bounded JSON (see :mod:`~flax_posenc.conversion.safety`); every shard name must be a plain
    relative name of a ``.safetensors``/``.bin`` file: no absolute path, no ``..``, and never
    another index (so an index cannot point at itself or at an index pointing back).
    """
    index = load_json(path, what="a JSON shard index")
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise fail(path, 'a shard index {"weight_map": {tensor: shard file}}', f"{str(index)[:120]}")
    for name in set(wm.values()):
        safe_member_name(name, where=path, what="a shard in the weight_map")
        if name.endswith(".index.json") or not name.endswith(SHARD_SUFFIXES):
            raise fail(path, f"shards ending in {' or '.join(SHARD_SUFFIXES)} (never another index)", f"{name[:120]!r}")
    return wm


class ShardedReader:
    """A sharded checkpoint: opens only the shard(s) holding the tensors actually read.

    Args:
      index_path: ``model.safetensors.index.json`` or ``pytorch_model.bin.index.json``.
      resolve_shard: maps a shard file name to a local path (default: beside the index; a Hub
        source downloads or finds the shard in the cache).
    """

    def __init__(
        self,
        index_path: str | os.PathLike,
        resolve_shard: Callable[[str], Path] | None = None,
        root: str | os.PathLike | None = None,
    ):
        self.path = Path(index_path)
        self._map = read_index(self.path)
        self._resolve = resolve_shard or (lambda name: self.path.parent / name)
        self.root = Path(root) if root is not None else self.path.parent
        self._open: dict[str, TensorReader] = {}

    @property
    def opened_shards(self) -> list[str]:
        """Shard file names opened so far (for tests and diagnostics)."""
        return list(self._open)

    def keys(self) -> list[str]:
        return list(self._map)

    def shard_name(self, key: str) -> str:
        try:
            return self._map[key]
        except KeyError:
            raise fail(self.path, f"tensor {key!r} in the weight_map", "no such tensor") from None

    def _shard(self, key: str) -> TensorReader:
        name = self.shard_name(key)
        if name not in self._open:
            shard = contained(self.root, Path(self._resolve(name)), what=f"shard {name!r} of {self.path}")
            regular_file(shard, what=f"shard file {name!r} (holding {key!r}) listed in {self.path}")
            if os.path.realpath(shard) == os.path.realpath(self.path):
                raise fail(self.path, "shards other than the index itself", f"{name!r}")
            self._open[name] = open_weights(shard)
        return self._open[name]

    def info(self, key: str) -> tuple[str, tuple[int, ...]]:
        return self._shard(key).info(key)

    def file_of(self, key: str) -> Path:
        return self._shard(key).path

    def read(self, key: str) -> np.ndarray:
        return self._shard(key).read(key)


def open_weights(
    path: str | os.PathLike, resolve_shard: Callable[[str], Path] | None = None, root: str | os.PathLike | None = None
) -> TensorReader:
    """The reader for a weights file (a regular file), chosen by its name.

    ``*.safetensors`` -> :class:`SafetensorsReader`, ``*.index.json`` -> :class:`ShardedReader`
    (shards must resolve inside ``root``, default the index's folder), anything else (``*.bin``,
    ``*.pt``, ``*.pth``) -> :class:`TorchBinReader`.
    """
    path = Path(path)
    name = path.name
    regular_file(path, what="a weights file")
    if name.endswith(".index.json"):
        return ShardedReader(path, resolve_shard, root)
    if name.endswith(".safetensors"):
        return SafetensorsReader(path)
    if name.endswith((".bin", ".pt", ".pth")):
        return TorchBinReader(path)
    raise fail(path, "a .safetensors, .bin or *.index.json weights file", f"a file named {name!r}")


# ----------------------------------------------------------------------------- validation


def read_float(
    reader: TensorReader, key: str, *, ndim: int, what: str, dim: int | None = None, check_finite: bool = True
) -> np.ndarray:
    """Read ``key`` as a float array of ``ndim`` dimensions, checked before and after reading.

    Args:
      reader: where the tensor lives.
      key: its full name.
      ndim: 2 for tables ``(rows, dim)``, 1 for LayerNorm vectors ``(dim,)``.
      what: a short description for messages (``"position table"``).
      dim: the required last dimension, if known.
      check_finite: refuse NaN or Inf values.

    Returns:
      float16/float32/float64 numpy array (bfloat16 upcast to float32).

    Raises:
      CheckpointError: wrong dtype, rank or width, an empty table, NaN or Inf.
    """
    where = f"{reader.file_of(key)}:{key}"
    dtype, shape = reader.info(key)
    if dtype not in FLOAT_DTYPES:
        raise fail(where, f"a float {what} ({'/'.join(FLOAT_DTYPES)})", f"dtype {dtype}")
    if len(shape) != ndim:
        want = "(rows, dim)" if ndim == 2 else "(dim,)"
        raise fail(where, f"a {ndim}-D {what} {want}", f"shape {shape}")
    if ndim == 2 and (shape[0] == 0 or shape[1] == 0):
        raise fail(where, f"a non-empty {what}", f"shape {shape}")
    if dim is not None and shape[-1] != dim:
        raise fail(where, f"a {what} of width {dim} (the position table's dim)", f"shape {shape}")
    arr = reader.read(key)
    if tuple(arr.shape) != shape:
        raise fail(where, f"shape {shape} (from the header)", f"shape {tuple(arr.shape)}")
    if check_finite:
        bad = _count_nonfinite(arr)
        if bad:
            raise fail(where, f"finite values in the {what}", f"{bad} NaN/Inf values")
    return arr


def _count_nonfinite(arr: np.ndarray, chunk_rows: int = 4096) -> int:
    """How many NaN/Inf values ``arr`` holds (0 for a finite array), in chunks of rows."""
    flat = arr.reshape(arr.shape[0], -1) if arr.ndim > 1 else arr.reshape(-1, 1)
    chunks = [flat[i : i + chunk_rows] for i in range(0, flat.shape[0], chunk_rows)]
    # fast path: ``isfinite(...).all()`` stops at nothing but skips the count's integer sum
    if all(np.isfinite(c).all() for c in chunks):
        return 0
    return int(sum(int(np.count_nonzero(~np.isfinite(c))) for c in chunks))


def nearest_keys(wanted: str, keys: Iterable[str], n: int = 5) -> list[str]:
    """The stored keys closest to ``wanted`` (difflib), for 'not found' messages."""
    import difflib

    keys = list(keys)
    close = difflib.get_close_matches(wanted, keys, n=n, cutoff=0.4)
    if not close:  # fall back on shared last components
        tail = wanted.rsplit(".", 2)[-2:]
        close = [k for k in keys if any(t in k for t in tail)][:n]
    return close


#: The words that name a tower's module in a composite checkpoint, by the tower's sub-config field
#: (``text_model.``, ``language_model.``; ``vision_model.``, ``visual.``, ``image_encoder.``; ``audio_tower.``).
TOWER_MODULE_WORDS: dict[str, tuple[str, ...]] = {
    "text_config": ("text", "language"),
    "vision_config": ("vision", "visual", "image"),
    "audio_config": ("audio",),
    "qformer_config": ("qformer",),
}


def tower_keys(keys: Iterable[str], section: str | None) -> list[str]:
    """Of the tensors ``keys`` that end alike (OWL-ViT's ``text_model.embeddings.position_embedding.weight``
    and ``vision_model.embeddings.position_embedding.weight``), those under the module of the tower whose
    sub-config is ``section``: one of its :data:`TOWER_MODULE_WORDS` (another field: the field without
    ``_config``) in the name's first component. Fewer than two keys, no ``section`` or a
    ``backbone_config``: ``keys`` unchanged.

    >>> tower_keys(["text_model.pos.weight", "vision_model.pos.weight"], "vision_config")
    ['vision_model.pos.weight']
    """
    keys = list(keys)
    if len(keys) < 2 or section is None or section == "backbone_config":
        return keys
    words = TOWER_MODULE_WORDS.get(section) or (section.removesuffix("_config"),)  # CSM's codec_config: codec_model
    return [k for k in keys if any(w in k.split(".", 1)[0] for w in words)]
