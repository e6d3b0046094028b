"""mkdocs hooks for the API site (mkdocs.yml: ``hooks:``). Every problem is a warning, so
``mkdocs build --strict`` (``make docs``) fails on it.

- ``on_pre_build``: every public name is on an API page (``tools/docs_api_names.py``), and every
  generated table of the guides is current (``tools/docs_tables.py``).
- ``on_page_markdown``: the guides in docs/ link files of the repository outside docs/
  (``../examples/models/gpt2.py``, ``../benchmarks/results/...``) so that they work when browsing
  the repository; on the site such a link becomes the file's path as code. A link to a file that
  does not exist in the repository is a warning.
"""

from __future__ import annotations

import logging
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
log = logging.getLogger("mkdocs.hooks.flax_posenc")

_OUTSIDE_LINK = re.compile(r"\[([^\]]*)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")


def on_pre_build(config, **kwargs):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_api_names
        import docs_tables
    finally:
        sys.path.remove(str(ROOT / "tools"))
    for line in docs_api_names.missing_names() + docs_api_names.stale_names() + docs_tables.stale():
        log.warning(line)


def on_page_markdown(markdown, page, config, files, **kwargs):
    docs_dir = pathlib.Path(config["docs_dir"]).resolve()
    src = (docs_dir / page.file.src_path).parent

    def replace(match: re.Match) -> str:
        target = (src / match.group(2)).resolve()
        try:
            rel = target.relative_to(ROOT).as_posix()
        except ValueError:
            rel = None
        if rel is None or not target.exists():
            log.warning(f"docs/{page.file.src_path} links {match.group(2)}, which is not a file of the repository")
            return match.group(0)
        if target.is_relative_to(docs_dir):
            return match.group(0)  # inside docs/: mkdocs checks it
        return f"`{rel}`"

    return _OUTSIDE_LINK.sub(replace, markdown)
