"""``import flax_posenc as fp``: one list of public names (``fp.__all__``, read from the
``if TYPE_CHECKING:`` block of ``flax_posenc/__init__.py``), and no internal submodule in it."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path

import flax_posenc as fp

ROOT = Path(__file__).resolve().parents[1]

#: the submodules users reach as attributes: the shells, checkpoints, the input block's functional
#: core (the README's ``fp.block.transformer_input``) and the reporting wing's two modules
USER_SUBMODULES = ["analysis", "block", "conversion", "linen", "nnx", "plots"]


def test_all_exports_the_user_submodules_and_no_internal_one():
    modules = sorted(name for name in fp.__all__ if isinstance(getattr(fp, name), types.ModuleType))
    assert modules == USER_SUBMODULES
    internal = {p.stem for p in (ROOT / "flax_posenc").glob("*.py")} - set(USER_SUBMODULES)
    assert internal & set(fp.__all__) == set()
    assert {"rope", "lookup", "progress", "spec", "overflow", "shells", "limits"} <= internal  # the check sees them
    assert len(fp.__all__) == len(set(fp.__all__)) and sorted(dir(fp)) == sorted(fp.__all__)


def test_every_public_name_resolves_and_functions_and_classes_are_not_modules():
    for name in fp.__all__:
        value = getattr(fp, name)
        assert value is not None, name
        if name not in USER_SUBMODULES:
            assert not isinstance(value, types.ModuleType), name


def test_an_unexported_submodule_is_still_reached_by_its_path_and_as_an_attribute():
    """Not exported is not removed: ``import flax_posenc.rope`` and ``fp.rope`` are the module (in a
    fresh interpreter, where nothing imported it before), ``from flax_posenc import *`` leaves it out."""
    code = (
        "import flax_posenc as fp, sys\n"
        "assert 'flax_posenc.rope' not in sys.modules\n"
        "assert fp.rope is sys.modules['flax_posenc.rope']\n"
        "ns = {}\n"
        "exec('from flax_posenc import *', ns)\n"
        "assert 'nnx' in ns and 'sinusoidal_table' in ns and 'rope' not in ns and 'lookup' not in ns\n"
        "try:\n"
        "    fp.no_such_name\n"
        "except AttributeError as e:\n"
        "    assert str(e) == \"module 'flax_posenc' has no attribute 'no_such_name'\", e\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert importlib.import_module("flax_posenc.lookup") is fp.lookup
