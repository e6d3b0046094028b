"""Benchmark: where the time goes when a ``.gguf`` SOURCE is read.

Writes, with ``gguf.GGUFWriter``, a Llama-3-shaped GGUF whose metadata holds a tokenizer the
size of Llama 3's (``--vocab`` 128256 tokens with their types, ``--merges`` 280000 merges) and
one small tensor, then times in this process (median of ``--repeats``):

- ``scan_header``: the bounded header walk (string arrays stepped over by their length prefixes);
- ``gguf.GGUFReader(path)``: llama.cpp's reader, which parses every metadata array item;
- ``inspect_source(path)``, ``check`` (``record.check_length``) and ``rope_for_layer(path, 0)``:
  what the command line and the models read; the scan only, no ``GGUFReader``.

Each row also gives the peak of memory allocated during the call (``tracemalloc``: Python and
numpy allocations; the file is mmapped, not copied). ``--empty-strings N``: instead, a file whose
metadata holds one array of N empty strings (issue 34's 3.8 MB file with 500,000).

Usage::

    .venv/bin/python benchmarks/gguf_read.py [--vocab 128256] [--merges 280000] [--repeats 3]

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np

from flax_posenc.conversion import inspect_source, rope_for_layer
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


def write_empty_strings(path: Path, count: int) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_head_count(2)
    w.add_array("tokenizer.ggml.tokens", [""] * count)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(median wall seconds, median CPU seconds of this process, peak MB allocated during one call)."""
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return statistics.median(times), statistics.median(cpu), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--merges", type=int, default=280000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--empty-strings", type=int, help="a file with one array of this many empty strings instead")
    parser.add_argument("--no-reader", action="store_true", help="skip the gguf.GGUFReader row (slow)")
    args = parser.parse_args()
    sizes = {int(k): (int(b), int(n)) for k, (b, n) in gguf.GGML_QUANT_SIZES.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama3-shaped.gguf"
        if args.empty_strings:
            write_empty_strings(path, args.empty_strings)
            what = f"one array of {args.empty_strings} empty strings"
        else:
            write(path, args.vocab, args.merges)
            what = f"{args.vocab} tokens + {args.merges} merges"
        rows = [("scan_header (bounded walk)", timed(lambda: scan_header(path, sizes), args.repeats))]
        if not args.no_reader:
            rows.append(("gguf.GGUFReader(path)", timed(lambda: gguf.GGUFReader(path), args.repeats)))
        rows += [
            ("inspect_source(path)", timed(lambda: inspect_source(path), args.repeats)),
            (
                "check: inspect_source(path).check_length(4096)",
                timed(lambda: inspect_source(path).check_length(4096), args.repeats),
            ),
            ("rope_for_layer(path, 0)", timed(lambda: rope_for_layer(path, 0), args.repeats)),
        ]
        size_mb = path.stat().st_size / 1e6
    print(f"GGUF with {what} ({size_mb:.1f} MB), median of {args.repeats}:")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")
    print("| step | wall s | CPU s | peak MB allocated |\n|---|---|---|---|")
    for name, (seconds, cpu, peak) in rows:
        print(f"| {name} | {seconds:.2f} | {cpu:.2f} | {peak:.2f} |")


if __name__ == "__main__":
    main()
