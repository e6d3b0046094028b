"""Benchmark: where the time goes when a ``.gguf`` SOURCE is read.

Writes, with ``gguf.GGUFWriter``, a Llama-3-shaped GGUF whose metadata holds a tokenizer the
size of Llama 3's (``--vocab`` 128256 tokens with their types, ``--merges`` 280000 merges) and
one small tensor, then times in this process (median of ``--repeats``):

- ``scan_header``: the bounded header walk that decides whether ``gguf.GGUFReader`` may see the file;
- ``gguf.GGUFReader(path)``: llama.cpp's reader, which parses every metadata array item;
- ``inspect_source(path)``: both, then the RoPE config.

Usage::

    .venv/bin/python benchmarks/gguf_read.py [--vocab 128256] [--merges 280000] [--repeats 3]

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

from flax_posenc.conversion import inspect_source
from flax_posenc.conversion.gguf_source import scan_header


def write(path: Path, vocab: int, merges: int) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(131072)
    w.add_embedding_length(2048)
    w.add_block_count(16)
    w.add_head_count(32)
    w.add_head_count_kv(8)
    w.add_rope_dimension_count(64)
    w.add_rope_freq_base(500000.0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}".encode() for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges([f"a{i} b{i}" for i in range(merges)])
    w.add_tensor("token_embd.weight", np.zeros((8, 64), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--merges", type=int, default=280000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = {int(k): (int(b), int(n)) for k, (b, n) in gguf.GGML_QUANT_SIZES.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama3-shaped.gguf"
        write(path, args.vocab, args.merges)
        rows = [
            ("scan_header (bounded walk)", timed(lambda: scan_header(path, sizes), args.repeats)),
            ("gguf.GGUFReader(path)", timed(lambda: gguf.GGUFReader(path), args.repeats)),
            ("inspect_source(path)", timed(lambda: inspect_source(path), args.repeats)),
        ]
        size_mb = path.stat().st_size / 1e6
    print(f"GGUF with {args.vocab} tokens + {args.merges} merges ({size_mb:.1f} MB), median of {args.repeats}:")
    print("| step | seconds |\n|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
