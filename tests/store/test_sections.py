"""Issue 39: the manifest's sections and a run folder's share one base (store/sections.py, JsonSection); the manifest's
drop keys they do not know (the schema validated them), a run file's keep them, and both write exactly the keys read."""

from __future__ import annotations

from layercache.heads.run_folders.run_sections import RunSection
from layercache.store.sections import JsonSection, ModelSection, Section, TokenizerSection

MODEL = {"name": "tiny", "revision": None, "fingerprint": "fp", "architecture": "BertModel", "model_type": "bert",
         "kind": "encoder", "n_layers": 2, "hidden_size": 8, "final_norm": "none", "forward_dtype": "float32",
         "device": "cpu"}


def test_both_kinds_of_section_share_one_base():
    assert issubclass(Section, JsonSection) and issubclass(RunSection, JsonSection)
    assert not Section.keeps_unknown and RunSection.keeps_unknown


def test_a_manifest_section_drops_unknown_keys_and_writes_what_it_read():
    model = ModelSection.from_json({**MODEL, "placement": {"cpu": 3}, "later": 1})
    assert model.to_json() == {**MODEL, "placement": {"cpu": 3}} and not hasattr(model, "extra")
    assert list(ModelSection.from_json(MODEL).to_json()) == list(MODEL)  # source, placement: written only when set
    tokenizer = TokenizerSection.from_json({"class": "BertTokenizerFast", "fingerprint": "t", "max_length": 64,
                                            "pad_from": None, "stride": None})
    assert tokenizer.class_name == "BertTokenizerFast" and tokenizer.to_json()["class"] == "BertTokenizerFast"


def test_a_section_and_its_json_do_not_share_values():
    given = {**MODEL, "placement": {"cpu": 3}}
    model = ModelSection.from_json(given)
    given["placement"]["cpu"] = 4
    written = model.to_json()
    written["placement"]["cpu"] = 5
    assert model.placement == {"cpu": 3}
