"""``predict``'s rule for its arguments (live/predict.py's split_runs): run folders first, a path-like non-run
refused, literal texts kept. The command's arguments are tested in tests/cli/test_live_predict_arguments.py."""

from __future__ import annotations

import os

import pytest

from layercache.errors import ConfigError
from layercache.live.predict import split_runs

LONG_WORD = "a" * 300  # longer than any file name may be (255 bytes)


def test_split_runs_rule(runs, here):
    run = str(runs["bert"]["topic"])
    assert split_runs([run, "a fine day"]) == ([run], ["a fine day"])
    assert split_runs([run, "a fine day", "README.md"], literal=1) == ([run], ["a fine day", "README.md"])
    assert split_runs([run, LONG_WORD, "x" * 5000]) == ([run], [LONG_WORD, "x" * 5000])
    for text in ("README.md", "./a", "a/b", os.path.join("no", "such", "run")):
        with pytest.raises(ConfigError, match="--text"):
            split_runs([run, text])
    with pytest.raises(ConfigError, match="Nothing to predict with"):
        split_runs(["just a text"])
