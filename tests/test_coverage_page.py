"""docs/coverage.md is what benchmarks/coverage.py writes from the registry today."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_coverage_page_is_current():
    spec = importlib.util.spec_from_file_location("coverage_script", ROOT / "benchmarks" / "coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "coverage.md").read_text() == module.render(), (
        "docs/coverage.md is stale: run `python benchmarks/coverage.py --write-docs`"
    )
    readme = (ROOT / "README.md").read_text()
    assert module.with_counts(readme, module.readme_counts()) == readme, (
        "README.md's counts are stale: run `python benchmarks/coverage.py --write-docs`"
    )
