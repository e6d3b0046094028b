"""What a new user meets first (issue 34): the help, the version, the docs' entry points, figure
titles. Each statement is checked against its source of truth (the registries, pyproject.toml,
CHANGELOG.md, mkdocs.yml), never against a copy of itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import flax_posenc
from flax_posenc.conversion.models import MECHANISM_KINDS, MODEL_MECHANISMS
from flax_posenc.report.cli import KIND_PHRASES, main

ROOT = Path(__file__).resolve().parent.parent


def test_help_describes_the_whole_tool(capsys):
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert set(KIND_PHRASES) == set(MECHANISM_KINDS)  # every built-in kind has its phrase with examples
    for kind in MECHANISM_KINDS:
        assert " ".join(KIND_PHRASES[kind].split()) in text, kind

    for word in ("RoPE", "ALiBi", "relative", "grids", "audio", ".gguf", "Hub", "orbax"):
        assert word in text, word
    for option in ("--image-size", "--seconds", "--bbox-max", "--steps"):  # check's options, named in the kinds
        assert option in text, option
    assert f"the {len(MODEL_MECHANISMS)} model types read" in text
    for command in ("inspect", "check", "plot", "extend", "convert", "families", "tour"):
        assert f" {command} " in text, command


def test_help_describes_a_kind_registered_later_by_its_summary(capsys):
    import toy_mechanism

    from flax_posenc.conversion.mechanisms import MECHANISMS

    with MECHANISMS.registered(toy_mechanism.TOY):
        assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert " ".join(toy_mechanism.TOY.summary.split()) in text


def _changelog_version() -> str:
    head = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    return re.search(r"(\d+\.\d+\.\d+)", head).group(1)


def test_version_is_one_number_everywhere(capsys):
    assert main(["--version"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == ["flax-posenc", flax_posenc.__version__]
    assert flax_posenc.__version__ == _changelog_version()  # the newest CHANGELOG heading describes this code
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = {attr = "flax_posenc._version.__version__"}' in pyproject
    assert not re.search(r'^version\s*=\s*"', pyproject, re.M)  # no second literal to drift


def test_built_metadata_carries_the_package_version(tmp_path):
    """What pip installs: setuptools reads __version__ statically into the metadata."""
    code = (
        f"import os, setuptools.build_meta as b; os.chdir({str(ROOT)!r}); "
        f"print(b.prepare_metadata_for_build_wheel({str(tmp_path)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    metadata = (tmp_path / out.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert f"\nVersion: {flax_posenc.__version__}\n" in metadata


def test_site_search_works_from_the_file_system():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert "search" in plugins and "offline" in plugins  # Material's offline plugin inlines the index
    assert config["use_directory_urls"] is False
    from material.plugins.offline.plugin import OfflinePlugin  # the pinned mkdocs-material has it

    assert OfflinePlugin


def test_docs_home_links_every_guide_of_the_nav():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)["nav"]
    guides = next(item["Guides"] for item in nav if isinstance(item, dict) and "Guides" in item)
    home = (ROOT / "docs" / "index.md").read_text()
    missing = [page for page in guides if f"]({page})" not in home]
    assert missing == [], missing
    assert "[Images, audio and multimodal](vision-audio.md)" in home


def test_readme_box_names_exist():
    """Every name in README's "What is in the box" table is a real attribute of the module it is listed under."""
    import importlib

    text = (ROOT / "README.md").read_text()
    box = text[text.index("## What is in the box") :]
    box = box[: box.index("\n## ", 5)]
    rows = [line for line in box.splitlines() if line.startswith("| `flax_posenc")]
    checked = 0
    for row in rows:
        module_cell, what = row.split("|")[1:3]
        modules = [m.strip("` ") for m in re.findall(r"`([\w.]+)`", module_cell)]
        modules = [m if m.startswith("flax_posenc") else "flax_posenc" + m for m in modules]
        loaded = [importlib.import_module(m) for m in modules]
        for name in re.findall(r"`([A-Za-z_][\w]*)`", what):
            if name in {"tile", "linear", "cubic", "from_pretrained", "rope_type"}:  # methods, arguments, fields
                continue
            assert any(hasattr(m, name) for m in loaded) or hasattr(flax_posenc, name), (row[:40], name)
            checked += 1
    assert checked > 40
    for kind_word in ("RotaryEmbedding", "mrope_positions", "resize_grid", "inspect_source", "save_orbax", "families"):
        assert kind_word in box


def test_plot_titles_a_gguf_with_its_file_name(tmp_path, figures):
    from test_gguf import write_gpt2

    folder = tmp_path / "models"
    folder.mkdir()
    path = write_gpt2(folder / "tiny-gpt2.Q8_0.gguf")
    assert main(["plot", str(path), "--out", str(tmp_path / "figs")]) == 0
    titles = [fig._suptitle.get_text() for fig in figures if fig._suptitle is not None]
    assert titles and all("tiny-gpt2.Q8_0.gguf" in t for t in titles), titles
    assert not any(re.search(r"\bmodels\b", t) for t in titles), titles
