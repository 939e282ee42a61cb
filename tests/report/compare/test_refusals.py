"""compare_caches refuses, in one sentence naming what differs and before any probe is fitted, caches that are not
over the same examples, and what the caches cannot give."""

from __future__ import annotations

import numpy as np
import pytest

import layercache as lc
from layercache.errors import ConfigError
from layercache.report.compare import compare_caches
from layercache.report.compare import comparing as module


@pytest.fixture
def no_probes(monkeypatch):
    """Every refusal comes before the first probe."""
    monkeypatch.setattr(module, "model_task", lambda *a, **k: pytest.fail("a probe was fitted before the refusal"))


def _refused(caches, match, **keywords):
    with pytest.raises(ConfigError, match=match) as caught:
        compare_caches(caches, progress=False, **keywords)
    message = str(caught.value)
    assert message.count(". ") == 0 and message.endswith("."), message  # one sentence
    return message


def test_other_split_sizes_are_refused_naming_both(caches, no_probes):
    message = _refused([caches["bert"], caches["fewer"]], "not over the same examples")
    assert "60 examples of split 'train'" in message and "holds 40" in message
    assert "same dataset and splits" in message and str(caches["fewer"]) in message


def test_another_dataset_is_refused_naming_both(caches, tiny_models, tsv, tmp_path, no_probes):
    other = lc.extract(str(tiny_models["bert"]), "", tmp_path / "reviews", split_files={"train": str(tsv)},
                       progress=False).path
    message = _refused([caches["bert"], other], "not over the same data")
    assert "builtin" in message and "reviews.tsv" in message


def test_what_the_caches_cannot_give(caches, no_probes):
    both = [caches["bert"], caches["pooled"]]
    assert "pooled vectors only" in _refused(both, "cannot be probed on task 'negation_scope'",
                                             tasks=["negation_scope"])
    assert "store=" in _refused(both, "CKA on word states needs every cache's token states", cka_states="words")
    _refused(both, "holds no task 'nope'", tasks=["nope"])
    _refused(both, "no split 'dev'", eval_split="dev")


def test_settings(caches, no_probes):
    both = [caches["bert"], caches["int8"]]
    _refused([caches["bert"]], "at least two caches")
    _refused(caches["bert"], "at least two caches")
    _refused(both, "Give each of the 2 caches its own name", names=["a"])
    _refused(both, "Give each of the 2 caches its own name", names=["a", "a"])
    _refused(both, "cka_examples must be at least 2", cka_examples=1)
    _refused(both, "cka_states must be one of auto, mean, words", cka_states="tokens")
    _refused(both, "cka_estimator must be one of debiased, plain", cka_estimator="biased")
    _refused(both, "Debiased CKA needs at least 4 examples", cka_examples=3)
    _refused(both, "max_train", max_train=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'mdl'"):
        compare_caches(both, mdl=False)


def _reviews(path, labels, empty=None):
    """A review file of 13 rows with ``labels`` (13 of 'pos'/'neg'); row ``empty`` has no text (extraction skips it)."""
    texts = ["" if i == empty else f"the lamp number {i} is fine" for i in range(len(labels))]
    rows = "".join(f"{text}\t{label}\n" for text, label in zip(texts, labels))
    path.write_text("text\tlabel\n" + rows)
    return path


def _extract(tiny_models, data, out):
    return lc.extract(str(tiny_models["bert"]), "", out, split_files={"train": str(data)}, progress=False,
                      overwrite=True).path


def test_other_rows_or_other_labels_of_one_file_are_refused(tiny_models, tmp_path, no_probes):
    """The same file name, edited between two extractions: as many examples, but other source rows, or other labels.
    Unedited, the file's two caches are compared (and a copy of it in another folder too: the same content)."""
    labels = ["pos", "neg"] * 6 + ["pos"]
    data = tmp_path / "reviews.tsv"
    first = _extract(tiny_models, _reviews(data, labels, empty=0), tmp_path / "first")
    assert lc.LayerCache.open(first).num_examples("train") == 12
    again = _extract(tiny_models, data, tmp_path / "again")
    copied = _extract(tiny_models, _reviews(tmp_path / "copy.tsv", labels, empty=0), tmp_path / "copied")
    rows = _extract(tiny_models, _reviews(data, labels, empty=12), tmp_path / "rows")
    flipped = _extract(tiny_models, _reviews(data, [{"pos": "neg", "neg": "pos"}[x] for x in labels], empty=0),
                       tmp_path / "flipped")
    message = _refused([first, rows], "hold different examples of split 'train'")
    assert str(first) in message and str(rows) in message
    _refused([first, flipped], "other labels of task 'label' on the same rows of split 'train'")
    for other in (again, copied):  # tasks=[]: CKA only
        compared = compare_caches([first, other], progress=False, tasks=[])
        assert compared.meta["splits"] == {"train": 12} and compared.tasks == {}
        assert np.diag(compared.similarity[0]["cka"]) == pytest.approx(1.0)  # the same model on the same rows
