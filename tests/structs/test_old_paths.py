"""synattn.structs grouped by structure: every module path from before still imports, as the same
module, lazily, and the public API is the same."""

import importlib
import subprocess
import sys

import pytest

import synattn.structs as structs
from synattn.structs import _old_paths

OLD = sorted(_old_paths.MOVED)


@pytest.mark.parametrize("old", OLD)
def test_an_old_path_is_its_new_module(old):
    module = importlib.import_module(f"synattn.structs.{old}")
    sources = [importlib.import_module(f"synattn.structs.{m}") for m in _old_paths.MOVED[old]]
    if len(sources) == 1:
        assert module is sources[0]
    public = {n for s in sources for n in dir(s) if not n.startswith("_")}
    assert public and public <= set(dir(module))
    for name in public:  # (each name from the first new module that has it)
        assert getattr(module, name) is next(getattr(s, name) for s in sources if hasattr(s, name))
    assert getattr(structs, old) is module  # as an attribute of the package too


def test_old_from_imports():
    """Imports that docs, examples and user code wrote against the flat layout."""
    from synattn.structs.semiring import NEG, LogSemiring, check_scores, signed_logsumexp  # noqa: F401
    from synattn.structs.semiring_programs import count, marginals, run  # noqa: F401
    from synattn.structs.semiring_sampling import GumbelCRFSemiring, SampledSemiring  # noqa: F401
    from synattn.structs.semirings import EntropySemiring, KMaxSemiring, Semiring, sparsemax  # noqa: F401

    assert LogSemiring is structs.LogSemiring and NEG == structs.NEG


def test_an_unknown_name_of_a_split_module_names_where_things_went():
    module = importlib.import_module("synattn.structs.semiring")
    with pytest.raises(AttributeError, match="moved to synattn.structs.semirings.log_max"):
        module.no_such_name


def test_old_paths_load_nothing_until_asked():
    """``import synattn.structs`` imports no old path, and no old path loads a compiled kernel."""
    code = ("import sys, synattn.structs\n"
            f"old = {OLD!r}\n"
            "assert not [o for o in old if 'synattn.structs.' + o in sys.modules]\n"
            "for o in old:\n"
            "    __import__('synattn.structs.' + o)\n"
            "assert not [m for m in sys.modules if m.startswith('synattn.structs') and '_kernels' in m]\n"
            "assert 'numba' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
