"""The README's code runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make tour", "make test"]
    assert README.index("```bash") < README.index("```python")


def test_readme_python_tour_runs(minilm_dir):
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    printed = out.getvalue().splitlines()
    assert printed[0] == "bert embeddings.position_embeddings.weight (512, 384) 512"
    assert printed[1] == (
        "bert position table (embeddings.position_embeddings.weight) holds 512 positions (0..511); "
        "asked for position 512, 1 past the end"
    )
    assert printed[2] == printed[1]  # the traced decoding step fails at run time with the same sentence
