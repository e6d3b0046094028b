"""The API reference site (mkdocs.yml, docs/api/*.md; built by `make docs`, run by `make test`):
every public name is on an API page, and the checks that make the strict build fail do fail."""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import types

import flax_posenc as fp

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


names = _tool("docs_api_names")


def test_every_public_name_is_on_an_api_page():
    assert names.missing_names() == []
    assert names.stale_names() == []


def test_public_names_cover_the_three_namespaces():
    public = names.public_names()
    assert "flax_posenc.sinusoidal_table" in public
    assert "flax_posenc.block" in public  # a submodule in flax_posenc.__all__
    assert "flax_posenc.nnx.TransformerInput" in public
    assert "flax_posenc.linen.RelativePositionBias" in public
    assert "flax_posenc.conversion.inspect_source" in public
    assert len(public) == len(fp.__all__) + len(fp.nnx.__all__) + len(fp.linen.__all__) + len(fp.conversion.__all__)


def test_a_name_removed_from_its_page_is_reported_with_the_page(tmp_path):
    api = tmp_path / "api"
    shutil.copytree(ROOT / "docs" / "api", api)
    page = api / "nnx.md"
    page.write_text(page.read_text().replace("::: flax_posenc.nnx.ALiBiBias\n", ""))
    missing = names.missing_names(api)
    assert len(missing) == 1
    assert "flax_posenc.nnx.ALiBiBias (flax_posenc.nnx.__all__) is not on any API page" in missing[0]
    assert missing[0].endswith("add the line `::: flax_posenc.nnx.ALiBiBias` to docs/api/nnx.md")


def test_a_new_public_name_is_reported_with_the_page_of_its_module(monkeypatch):
    # what another branch adding fp.a_new_function (defined in flax_posenc/sinusoidal.py, say) sees
    def a_new_function():
        """A new public function."""

    a_new_function.__module__ = "flax_posenc.sinusoidal"
    monkeypatch.setattr(fp, "a_new_function", a_new_function, raising=False)
    monkeypatch.setattr(fp, "__all__", [*fp.__all__, "a_new_function"])
    missing = names.missing_names()
    assert missing == [
        "flax_posenc.a_new_function (flax_posenc.__all__) is not on any API page: "
        "add the line `::: flax_posenc.a_new_function` to docs/api/core.md"
    ]


def test_a_directive_for_a_name_that_does_not_exist_is_reported(tmp_path):
    api = tmp_path / "api"
    shutil.copytree(ROOT / "docs" / "api", api)
    (api / "core.md").write_text((api / "core.md").read_text() + "\n::: flax_posenc.no_such_function\n")
    stale = names.stale_names(api)
    assert len(stale) == 1 and "flax_posenc.no_such_function, which does not exist" in stale[0]


def test_members_lists_count_as_documented(tmp_path):
    (tmp_path / "x.md").write_text(
        "::: flax_posenc.rope_config\n    options:\n      members:\n        - ROPE_SCALINGS\n"
        "        - scaling_of\n\ntext\n\n::: flax_posenc.limits\n    options:\n      members: [NoLimit, verdict_line]\n"
    )
    documented = set(names.documented_names(tmp_path))
    assert documented == {
        "flax_posenc.rope_config",
        "flax_posenc.rope_config.ROPE_SCALINGS",
        "flax_posenc.rope_config.scaling_of",
        "flax_posenc.limits",
        "flax_posenc.limits.NoLimit",
        "flax_posenc.limits.verdict_line",
    }


def test_links_out_of_docs_become_paths_and_a_missing_file_is_a_warning(caplog):
    hooks = _tool("mkdocs_hooks")
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_path="models.md"))
    config = {"docs_dir": str(ROOT / "docs")}
    text = "[`gpt2.py`](../examples/models/gpt2.py), [ov](overflow.md#x), [gone](../examples/models/gone.py)"
    with caplog.at_level("WARNING", logger="mkdocs.hooks.flax_posenc"):
        out = hooks.on_page_markdown(text, page, config, files=None)
    assert out == "`examples/models/gpt2.py`, [ov](overflow.md#x), [gone](../examples/models/gone.py)"
    assert [r.getMessage() for r in caplog.records] == [
        "docs/models.md links ../examples/models/gone.py, which is not a file of the repository"
    ]


def test_doctest_paragraphs_are_fenced_and_sphinx_roles_become_code():
    ext = _tool("griffe_doctests")
    text = "Rows of :func:`~flax_posenc.sinusoidal_table`.\n\n>>> t[:, 0]\narray([0.])\n\nAfter."
    assert ext.plain_roles(ext.fence_doctests(text)) == (
        "Rows of `flax_posenc.sinusoidal_table`.\n\n```pycon\n>>> t[:, 0]\narray([0.])\n```\n\nAfter."
    )
