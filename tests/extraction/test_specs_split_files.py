"""extract(model, split_files={...}) without a dataset: the files are the data (the default dataset gives way)."""

from __future__ import annotations

import pytest

import layercache as lc
from layercache.errors import ConfigError
from layercache.extraction.specs import DataSpec


def test_split_files_replace_the_default_dataset(tiny_models, tsv, tmp_path):
    assert DataSpec(split_files={"train": "a.tsv"}).dataset is None and DataSpec().dataset == "builtin"
    result = lc.extract(str(tiny_models["bert"]), split_files={"train": str(tsv)}, out=tmp_path / "c",
                        progress=False)
    assert result.manifest.splits.keys() >= {"train"}


def test_another_dataset_beside_split_files_is_refused(tiny_models, tsv, tmp_path):
    with pytest.raises(ConfigError, match="Pass either a source"):
        lc.extract(str(tiny_models["bert"]), "imdb", split_files={"train": str(tsv)}, out=tmp_path / "c",
                   progress=False)
