"""Which RoPE/ALiBi model types of the installed transformers ``flax-posenc`` reads (docs/rope-alibi.md).

    python benchmarks/rope_audit.py          # < 1 s; reads transformers' source files, imports nothing heavy

A model type counts as relative when its ``modeling_*.py`` defines a ``*RotaryEmbedding`` class
or builds an ALiBi tensor; it is *read* when a :data:`RELATIVE_FAMILIES` row names it.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from flax_posenc.conversion.relative_config import RELATIVE_FAMILIES


def audit() -> tuple[str, list[str], list[str]]:
    spec = importlib.util.find_spec("transformers")
    root = Path(next(iter(spec.submodule_search_locations)))
    version = re.search(r'__version__ = "([^"]+)"', (root / "__init__.py").read_text()).group(1)
    read_types = {t for f in RELATIVE_FAMILIES.values() for t in f.model_types}
    read, unread = [], []
    for d in sorted((root / "models").iterdir()):
        sources = list(d.glob("modeling_*.py"))
        text = "\n".join(p.read_text(errors="replace") for p in sources)
        if not re.search(r"class \w*RotaryEmbedding\b|alibi", text, re.IGNORECASE):
            continue
        (read if d.name in read_types else unread).append(d.name)
    return version, read, unread


def main() -> None:
    version, read, unread = audit()
    print(f"transformers {version}: {len(read) + len(unread)} model directories with RoPE or ALiBi")
    print(f"read ({len(read)}): {', '.join(read)}")
    print(f"not read ({len(unread)}): {', '.join(unread)}")


if __name__ == "__main__":
    main()
