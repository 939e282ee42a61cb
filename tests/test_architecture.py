"""The import graph is the architecture: what importing the public API must not load.

The layer contract itself (which package may import which) is checked by ``lint-imports`` in
``.ci/run`` from ``pyproject.toml``; these tests check what it cannot see: the lazy public API,
and that a process that only trains from a cache never loads a model library or the extractor.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("transformers", "layercache.extraction", "layercache.backbone", "layercache.sources", "layercache.live")


def loaded_after(statement: str) -> list[str]:
    """Modules among ``HEAVY`` that ``statement`` loads in a fresh interpreter."""
    code = (f"import sys, json\n{statement}\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("statement", [
    "import layercache",
    "import layercache.heads",
    "import layercache.probes",
    "import layercache.store.reader",
    "from layercache import LayerHead, LayerCache, LinearProbes, LabelTask",
    "from layercache.heads.mixers import make_mixer",
])
def test_learning_from_a_cache_loads_no_model_library_and_no_extractor(statement):
    assert loaded_after(statement) == []


def test_the_public_api_is_complete_and_lazy():
    import layercache as lc

    for name in lc.__all__:
        assert getattr(lc, name) is not None, name
    assert set(lc.__all__) <= set(dir(lc))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lc.nope  # noqa: B018


def test_the_command_line_loads_no_model_library_until_a_command_needs_one():
    # `layercache --help` and `train-head` stay quick: the extractor loads inside `extract` only. The
    # help may read the data-source registry (the list of supported files), which loads no model library, and the
    # extraction options' declarations (extraction/specs.py, the one module of the lazy package it needs).
    loaded = loaded_after("import layercache.cli")
    declarations = {"layercache.extraction", "layercache.extraction.specs"}
    assert not [m for m in loaded if m.startswith(("transformers", "layercache.extraction", "layercache.backbone",
                                                   "layercache.live")) and m not in declarations], loaded


def test_extract_is_importable_from_the_top():
    assert "layercache.extraction" in " ".join(loaded_after("from layercache import extract"))
