"""Dataset sources: local tables, CoNLL files, saved folders, (monkeypatched) hub datasets."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from layercache.errors import ConfigError, DatasetError
from layercache.sources.datasets import load_dataset_records
from layercache.sources.formats.conll import read_conll

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

REVIEWS = [
    ("the soup was cold and the waiter never came back", "neg"),
    ("a lovely little place with friendly staff", "pos"),
    ("i would happily eat here every single week", "pos"),
    ("the bread tasted like old cardboard", "neg"),
    ("nothing special , but the prices are fair", "neutral"),
    ("we left hungry and a little annoyed", "neg"),
]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- csv / tsv / jsonl / parquet


def test_csv_with_header(tmp_path):
    path = write(tmp_path / "reviews.csv", "review,sentiment,label\n" +
                 "\n".join(f'"{t}",x,{y}' for t, y in REVIEWS) + "\n")
    records = load_dataset_records(str(path))
    assert list(records.splits) == ["train"]
    assert records.columns == ["review", "sentiment", "label"]
    assert records.text_columns == ["review"]
    split = records.splits["train"]
    assert split.texts[0] == REVIEWS[0][0]
    assert split.words is None and split.text_pairs is None
    task = records.task("label")
    assert task.kind == "sequence" and task.label_names == ("neg", "neutral", "pos")
    assert split.labels["label"] == [0, 2, 2, 0, 1, 0]
    assert split.source_index == list(range(6))


def test_tsv_headerless_is_detected(tmp_path):
    path = write(tmp_path / "train.tsv", "".join(f"{int(y == 'pos')}\t{t}\n" for t, y in REVIEWS))
    records = load_dataset_records(str(path))
    # Positional columns get the names a header would have given them, once label and text are told apart.
    assert records.columns == ["label", "text"]
    assert records.text_columns == ["text"]
    assert records.tasks[0].name == "label" and records.tasks[0].label_names == ("0", "1")
    split = records.splits["train"]
    assert len(split) == 6  # the first row is data, not a header
    assert split.texts[0] == REVIEWS[0][0]
    assert split.labels["label"] == [0, 1, 1, 0, 0, 0]
    # explicit column choice on a headerless file, by position
    again = load_dataset_records(str(path), text_columns=["1"], label_columns=["0"])
    assert again.splits["train"].texts == split.texts and again.tasks[0].name == "label"


def test_tsv_headerless_text_first_with_string_labels_and_quotes(tmp_path):
    lines = ['he said "no" and walked out of the room\tdrama', "the match ended two all after extra time\tsport",
             'a "quiet" week on the markets again\tbusiness', "the home side won the cup final\tsport"]
    path = write(tmp_path / "news.tsv", "\n".join(lines) + "\n")
    records = load_dataset_records(str(path))
    split = records.splits["train"]
    assert records.text_columns == ["text"] and records.tasks[0].name == "label"
    assert records.columns == ["text", "label"]
    assert split.texts[0] == 'he said "no" and walked out of the room'
    assert records.tasks[0].label_names == ("business", "drama", "sport")
    assert split.labels["label"] == [1, 2, 0, 2]


def test_unknown_header_names_are_still_a_header(tmp_path):
    path = write(tmp_path / "sms.csv", "message,spam\n" + "".join(
        f"{t},{'spam' if y == 'neg' else 'ham'}\n" for t, y in REVIEWS if "," not in t))
    records = load_dataset_records(str(path), text_columns=["message"], label_columns=["spam"])
    assert records.columns == ["message", "spam"]
    assert len(records.splits["train"]) == 5
    assert records.task("spam").label_names == ("ham", "spam")


def test_jsonl_and_json_array(tmp_path):
    lines = [json.dumps({"text": t, "label": int(y == "pos"), "id": i}) for i, (t, y) in enumerate(REVIEWS)]
    jsonl = write(tmp_path / "data.jsonl", "\n".join(lines) + "\n\n")
    records = load_dataset_records(str(jsonl))
    assert records.text_columns == ["text"]
    assert records.columns == ["text", "label", "id"]
    assert records.task("label").label_names == ("0", "1")
    assert records.splits["train"].labels["label"] == [0, 1, 1, 0, 0, 0]
    array = write(tmp_path / "data.json", json.dumps([json.loads(line) for line in lines]))
    same = load_dataset_records(str(array))
    assert same.splits["train"].texts == records.splits["train"].texts
    assert same.splits["train"].labels == records.splits["train"].labels
    assert same.fingerprint != records.fingerprint  # different file bytes


def test_parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "data.parquet"
    pd.DataFrame({"content": [t for t, _ in REVIEWS], "category": [y for _, y in REVIEWS]}).to_parquet(path)
    records = load_dataset_records(str(path))
    assert records.text_columns == ["content"]
    assert records.task("category").label_names == ("neg", "neutral", "pos")
    assert records.splits["train"].labels["category"] == [0, 2, 2, 0, 1, 0]


def test_sentence_pairs(tmp_path):
    rows = [("the cat sat on the mat", "a cat is sitting", "entailment"),
            ("the cat sat on the mat", "the dog is barking", "neutral"),
            ("it is raining hard today", "the weather is dry", "contradiction")]
    path = write(tmp_path / "nli.csv", "premise,hypothesis,label\n" + "\n".join(",".join(r) for r in rows) + "\n")
    records = load_dataset_records(str(path))
    split = records.splits["train"]
    assert records.text_columns == ["premise", "hypothesis"]
    assert split.texts == [r[0] for r in rows] and split.text_pairs == [r[1] for r in rows]
    assert records.task("label").label_names == ("contradiction", "entailment", "neutral")
    # explicit pair choice works on any columns
    explicit = load_dataset_records(str(path), text_columns=["hypothesis", "premise"])
    assert explicit.splits["train"].texts == [r[1] for r in rows]
    assert explicit.fingerprint != records.fingerprint


def test_string_labels_consistent_across_split_files(tmp_path):
    train = write(tmp_path / "train.csv", "text,label\nfirst good one,pos\nsecond bad one,neg\n")
    valid = write(tmp_path / "valid.csv", "text,label\nonly a middling one,meh\nanother good one,pos\n")
    records = load_dataset_records(None, split_files={"train": str(train), "validation": str(valid)})
    assert list(records.splits) == ["train", "validation"]
    names = records.task("label").label_names
    assert names == ("meh", "neg", "pos")  # one vocabulary over both files
    assert records.splits["train"].labels["label"] == [2, 1]
    assert records.splits["validation"].labels["label"] == [0, 2]
    only_valid = load_dataset_records("", split_files={"train": str(train), "validation": str(valid)},
                                      splits=["validation"])
    assert list(only_valid.splits) == ["validation"]
    assert only_valid.task("label").label_names == names  # ids do not depend on the split choice


def test_integer_looking_labels_sort_numerically(tmp_path):
    path = write(tmp_path / "stars.csv", "text,label\na,10\nb,2\nc,1\nd,2\n")
    records = load_dataset_records(str(path))
    assert records.task("label").label_names == ("1", "2", "10")
    assert records.splits["train"].labels["label"] == [2, 1, 0, 1]


def test_regression_detection_and_override(tmp_path):
    path = write(tmp_path / "sts.csv", "sentence1,sentence2,score\nx y,x y,5.0\nx y,a b,0.4\nx z,x y,2.75\n")
    records = load_dataset_records(str(path))
    task = records.task("score")
    assert task.kind == "regression" and task.label_names is None
    assert records.splits["train"].labels["score"] == [5.0, 0.4, 2.75]
    ints = write(tmp_path / "ints.csv", "text,score\nbad one,1\ngood one,5\nok one,3\n")
    assert load_dataset_records(str(ints)).task("score").kind == "sequence"
    forced = load_dataset_records(str(ints), task_kind="regression")
    assert forced.task("score").kind == "regression"
    assert forced.splits["train"].labels["score"] == [1.0, 5.0, 3.0]
    words = write(tmp_path / "words.csv", "text,label\nbad one,neg\n")
    with pytest.raises(DatasetError, match="non-numeric"):
        load_dataset_records(str(words), task_kind="regression")
    with pytest.raises(ConfigError):
        load_dataset_records(str(words), task_kind="ordinal")


# ---------------------------------------------------------------- CoNLL

CONLL = """-DOCSTART- -X- -X- O

Maria NNP B-NP B-PER
visited VBD B-VP O
Oslo NNP B-NP B-LOC
. . O O

-DOCSTART- -X- -X- O

Blue NNP B-NP B-ORG
Harbour NNP I-NP I-ORG
hired VBD B-VP O
Tomas NNP B-NP B-PER

It PRP B-NP O
rained VBD B-VP O
"""


def test_conll_with_docstart_and_two_tasks(tmp_path):
    path = write(tmp_path / "ner.conll", CONLL)
    parsed = read_conll(path)
    assert parsed.column_names == ["tokens", "pos", "chunk", "ner"]
    assert len(parsed) == 3 and parsed.line_numbers == [3, 10, 15]

    records = load_dataset_records(str(path))
    assert [t.name for t in records.tasks] == ["pos", "chunk", "ner"]  # default: every tag column of CoNLL-2003
    assert all(t.kind == "token" for t in records.tasks)
    assert records.task("chunk").label_names == ("B-NP", "B-VP", "I-NP", "O")
    split = records.splits["train"]
    assert split.words == [["Maria", "visited", "Oslo", "."], ["Blue", "Harbour", "hired", "Tomas"], ["It", "rained"]]
    assert split.texts is None
    ner = records.task("ner")
    assert ner.kind == "token"
    assert ner.label_names == ("B-LOC", "B-ORG", "B-PER", "I-ORG", "O")
    assert [[ner.label_names[i] for i in tags] for tags in split.labels["ner"]] == [
        ["B-PER", "O", "B-LOC", "O"], ["B-ORG", "I-ORG", "O", "B-PER"], ["O", "O"]]

    both = load_dataset_records(str(path), label_columns=["pos", "ner"])  # named columns win
    assert [t.name for t in both.tasks] == ["pos", "ner"]
    assert all(t.kind == "token" for t in both.tasks)
    for words, pos, ner_ids in zip(both.splits["train"].words, both.splits["train"].labels["pos"],
                                   both.splits["train"].labels["ner"]):
        assert len(words) == len(pos) == len(ner_ids)
    assert both.fingerprint != records.fingerprint


def test_conll_txt_two_columns_and_bad_line(tmp_path):
    good = write(tmp_path / "tags.txt", "John B-PER\nran O\n\nShe O\n")
    records = load_dataset_records(str(good))
    assert records.columns == ["tokens", "tags"]
    assert records.task("tags").label_names == ("B-PER", "O")
    bad = write(tmp_path / "bad.conll", "John NNP B-PER\nran VBD O\n\nShe PRP\n")
    with pytest.raises(DatasetError, match=r"bad\.conll, line 4"):
        load_dataset_records(str(bad))
    prose = write(tmp_path / "prose.txt", "This is a whole sentence on a line.\nAnd another one, longer than that.\n")
    with pytest.raises(DatasetError, match="not a CoNLL token file"):
        load_dataset_records(str(prose))


def test_token_task_rejects_sequence_override(tmp_path):
    path = write(tmp_path / "ner.conll", CONLL)
    with pytest.raises(DatasetError, match="one label per word"):
        load_dataset_records(str(path), task_kind="sequence")


# ---------------------------------------------------------------- datasets library: saved folder and hub


def _hf():
    return pytest.importorskip("datasets")


def test_saved_to_disk_folder(tmp_path):
    hf = _hf()
    features = hf.Features({"tokens": hf.Sequence(hf.Value("string")),
                            "ner_tags": hf.Sequence(hf.ClassLabel(names=["O", "B-PER", "I-PER"]))})
    train = hf.Dataset.from_dict({"tokens": [["Ann", "Lee", "sang"], ["rain", "fell"]],
                                  "ner_tags": [[1, 2, 0], [0, 0]]}, features=features)
    valid = hf.Dataset.from_dict({"tokens": [["Bo", "left"]], "ner_tags": [[1, 0]]}, features=features)
    folder = tmp_path / "saved"
    hf.DatasetDict({"train": train, "validation": valid}).save_to_disk(str(folder))
    records = load_dataset_records(str(folder))
    assert list(records.splits) == ["train", "validation"]
    assert records.text_columns == ["tokens"]
    task = records.task("ner_tags")
    assert task.kind == "token" and task.label_names == ("O", "B-PER", "I-PER")
    assert records.splits["train"].words == [["Ann", "Lee", "sang"], ["rain", "fell"]]
    assert records.splits["train"].labels["ner_tags"] == [[1, 2, 0], [0, 0]]
    assert records.splits["validation"].labels["ner_tags"] == [[1, 0]]


def _fake_hub(hf):
    features = hf.Features({"sentence": hf.Value("string"), "label": hf.ClassLabel(names=["negative", "positive"]),
                            "idx": hf.Value("int32")})
    sentences = ["what a fine day it was", "the plot made no sense", "great acting all round", "dull and slow"]
    return hf.DatasetDict({
        "train": hf.Dataset.from_dict({"sentence": sentences, "label": [1, 0, 1, 0], "idx": [0, 1, 2, 3]},
                                      features=features),
        "validation": hf.Dataset.from_dict({"sentence": sentences[:2], "label": [1, 0], "idx": [0, 1]},
                                           features=features),
        "test": hf.Dataset.from_dict({"sentence": sentences[2:], "label": [-1, -1], "idx": [0, 1]},
                                     features=features),
    })


def test_hub_dataset_with_classlabel_and_unlabelled_test(monkeypatch, logged):
    hf = _hf()
    calls = []

    def fake_load_dataset(name, config=None, *args, **kwargs):
        calls.append((name, config))
        return _fake_hub(hf)

    monkeypatch.setattr(hf, "load_dataset", fake_load_dataset)
    with logged.expect("split 'test'"):
        records = load_dataset_records("glue", config="sst2")
    assert calls == [("glue", "sst2")]
    assert list(records.splits) == ["train", "validation"]  # unlabelled test dropped
    assert records.config == "sst2" and records.text_columns == ["sentence"]
    assert records.task("label").label_names == ("negative", "positive")
    assert records.splits["train"].labels["label"] == [1, 0, 1, 0]
    assert records.fingerprint

    with pytest.raises(DatasetError, match="no labels"):
        load_dataset_records("glue", config="sst2", splits=["test"])
    unlabelled = load_dataset_records("glue", config="sst2", splits=["test"], no_labels=True)
    assert unlabelled.tasks == [] and unlabelled.splits["test"].labels == {}
    with pytest.raises(DatasetError, match="Split 'dev' is not in"):
        load_dataset_records("glue", config="sst2", splits=["dev"])
    limited = load_dataset_records("glue", config="sst2", splits=["train"], limit=3)
    assert len(limited.splits["train"]) == 3


def test_hub_failure_is_a_dataset_error(monkeypatch):
    hf = _hf()

    def failing(name, config=None, *args, **kwargs):
        raise ConnectionError("Couldn't reach 'nope/nothing' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(hf, "load_dataset", failing)
    with pytest.raises(DatasetError, match=r"Could not load dataset 'nope/nothing' from the Hugging Face Hub.*"
                                           r"Couldn't reach.*pass a local file"):
        load_dataset_records("nope/nothing")


# ---------------------------------------------------------------- errors, no labels, limit


def test_missing_column_lists_available_columns(tmp_path):
    path = write(tmp_path / "d.csv", "text,label\nsome words here,a\n")
    with pytest.raises(DatasetError, match=r"Column 'body' is not in .*available columns: text, label"):
        load_dataset_records(str(path), text_columns=["body"])
    with pytest.raises(DatasetError, match=r"Column 'stars'.*text, label"):
        load_dataset_records(str(path), label_columns=["stars"])
    odd = write(tmp_path / "odd.csv", "body,label\nsome words here,a\n")
    with pytest.raises(DatasetError, match=r"No text column.*body, label.*text_columns=\.\.\."):
        load_dataset_records(str(odd))


def test_empty_files_are_errors(tmp_path):
    for name, text in [("empty.csv", ""), ("header_only.csv", "text,label\n"), ("empty.jsonl", "\n"),
                       ("empty.conll", "")]:
        path = write(tmp_path / name, text)
        with pytest.raises(DatasetError, match="has no examples"):
            load_dataset_records(str(path))


def test_a_null_text_is_skipped_and_counted_like_an_empty_one(tmp_path, logged):
    # Issue 26: null was refused while "" was skipped; the README says rows with no text are skipped.
    path = write(tmp_path / "d.jsonl", '{"text": "fine", "label": 1}\n{"text": null, "label": 0}\n'
                                       '{"text": "", "label": 1}\n{"text": "good", "label": 0}\n')
    with logged.expect(r"Skipping 2 rows of split 'train' \(file .*d.jsonl', lines 2 and 3\) with empty text"):
        split = load_dataset_records(str(path)).splits["train"]
    assert split.texts == ["fine", "good"] and split.source_index == [0, 3] and split.n_skipped_empty == 2
    words = write(tmp_path / "w.jsonl", '{"tokens": ["a", "b"], "tags": ["O", "X"]}\n{"tokens": null, "tags": null}\n')
    with logged.expect(r"line 2\) with empty word lists"):
        assert load_dataset_records(str(words)).splits["train"].n_skipped_empty == 1


def test_no_label_error_and_no_labels_option(tmp_path):
    path = write(tmp_path / "plain.csv", "text,source\nthe first line of prose,web\nanother line,book\n")
    with pytest.raises(DatasetError, match=r"label_columns=\.\.\., or no_labels=True"):
        load_dataset_records(str(path))
    records = load_dataset_records(str(path), no_labels=True)
    assert records.tasks == [] and records.splits["train"].labels == {}
    assert records.splits["train"].texts == ["the first line of prose", "another line"]
    labelled = load_dataset_records(str(path), label_columns=["source"])
    assert labelled.task("source").label_names == ("book", "web")


def test_unlabelled_split_file_is_dropped_by_default(tmp_path, logged):
    train = write(tmp_path / "train.csv", "text,label\ngood,pos\nbad,neg\n")
    test = write(tmp_path / "test.csv", "text,label\nunknown one,\nanother,\n")
    with logged.expect("no labels"):
        records = load_dataset_records(None, split_files={"train": str(train), "test": str(test)})
    assert list(records.splits) == ["train"]
    with pytest.raises(DatasetError, match="no labels"):
        load_dataset_records(None, split_files={"train": str(train), "test": str(test)}, splits=["train", "test"])


def test_limit_and_source_index(tmp_path, logged):
    rows = "\n".join(f"sentence number {i},{i % 2}" for i in range(10))
    path = write(tmp_path / "d.csv", "text,label\n" + rows + "\n")
    records = load_dataset_records(str(path), limit=4)
    split = records.splits["train"]
    assert len(split) == 4 and split.source_index == [0, 1, 2, 3]
    assert records.fingerprint != load_dataset_records(str(path)).fingerprint
    with pytest.raises(ConfigError):
        load_dataset_records(str(path), limit=0)
    gaps = write(tmp_path / "gaps.csv", "text,label\na b,1\nc d,\ne f,0\n")
    with logged.expect("1 of 3 rows"):
        partial = load_dataset_records(str(gaps))
    assert partial.splits["train"].source_index == [0, 2]
    assert partial.splits["train"].labels["label"] == [1, 0]


def test_fingerprint_follows_file_bytes_and_columns(tmp_path):
    a = write(tmp_path / "a.csv", "text,label,title\nsome words,1,t\nmore words,0,u\n")
    b = write(tmp_path / "b.csv", "text,label,title\nsome words,1,t\nmore words,1,u\n")
    fa = load_dataset_records(str(a)).fingerprint
    assert fa == load_dataset_records(str(a)).fingerprint
    assert fa != load_dataset_records(str(b)).fingerprint
    assert fa != load_dataset_records(str(a), text_columns=["title"]).fingerprint


def test_bad_sources(tmp_path):
    with pytest.raises(DatasetError, match="No file or folder"):
        load_dataset_records(str(tmp_path / "missing.csv"))
    with pytest.raises(DatasetError, match="unsupported extension"):
        load_dataset_records(str(write(tmp_path / "d.xml", "<a/>")))
    with pytest.raises(DatasetError, match="CoNLL-U"):
        load_dataset_records(str(write(tmp_path / "d.conllu", "1\tword\n")))
    with pytest.raises(ConfigError):
        load_dataset_records(None)
    with pytest.raises(DatasetError, match="line 2"):
        load_dataset_records(str(write(tmp_path / "broken.jsonl", '{"text": "a", "label": 1}\n{oops\n')))


def test_one_registry_drives_every_list_of_files_and_the_reading(tmp_path, monkeypatch, logged):
    from layercache.sources import datasets, registry
    from layercache.sources.splits import FileTable, MemorySplit

    assert datasets.SUPPORTED_EXTENSIONS == registry.SUPPORTED_EXTENSIONS == (
        ".csv", ".tsv", ".jsonl", ".json", ".parquet", ".conll", ".txt", ".iob", ".bio")
    assert registry.SUPPORTED_FILES == "csv, tsv, jsonl, json, parquet, or a CoNLL token file (.conll/.txt/.iob/.bio)"
    assert registry.SUPPORTED_FORMATS == "csv/tsv/jsonl/parquet/CoNLL"
    for extension in registry.SUPPORTED_EXTENSIONS:
        assert extension in registry.source_for(f"x{extension.upper()}").extensions
    with pytest.raises(DatasetError, match=r"unsupported extension '\.lines'; use csv, tsv"):
        load_dataset_records(str(write(tmp_path / "d.lines", "a sentence\n")))
    with pytest.raises(DatasetError, match=r"not a CoNLL token file .* save tables as \.csv, \.tsv, \.jsonl or "):
        load_dataset_records(str(write(tmp_path / "d.txt", "one two three\nfour five six seven\n")))

    def read_lines(split_name, path):  # a new format: one text per line, all labelled "x"
        texts = Path(path).read_text().splitlines()
        return FileTable(MemorySplit(split_name, f"file '{path}'", {"text": texts, "label": ["x"] * len(texts)}))

    lines = registry.FileSource("lines", (".lines",), read_lines)
    monkeypatch.setattr(registry, "_BY_EXTENSION", {**registry._BY_EXTENSION, ".lines": lines})
    with logged.expect("single class"):
        records = load_dataset_records(str(tmp_path / "d.lines"))
    assert records.splits["train"].texts == ["a sentence"] and records.tasks[0].label_names == ("x",)

def test_builtin_is_delegated_and_limited(monkeypatch):
    import sys
    import types

    from layercache.sources.records import DatasetRecords, LabelTask, SplitRecords

    seen = {}

    def fake_load_builtin(seed=0, sizes=None):
        seen["seed"] = seed
        split = SplitRecords(words=[["a", "b"]] * 5, labels={"agree": [0, 1, 0, 1, 0]})
        return DatasetRecords(name="builtin", splits={"train": split, "test": split},
                              tasks=[LabelTask("agree", "sequence", ("no", "yes"))], fingerprint="f")

    module = types.ModuleType("layercache.sources.builtin")
    module.load_builtin = fake_load_builtin
    monkeypatch.setitem(sys.modules, "layercache.sources.builtin", module)
    records = load_dataset_records("builtin:3", limit=2, splits=["train"])
    assert seen["seed"] == 3
    assert list(records.splits) == ["train"] and len(records.splits["train"]) == 2
    assert records.splits["train"].labels["agree"] == [0, 1]


# ---------------------------------------------------------------- real data (shared folder)


def test_shared_real_data(logged):
    sst2 = SHARED_DATA / "sst2" / "train.tsv"
    conll = SHARED_DATA / "conll2003" / "valid.txt"
    if not sst2.is_file() or not conll.is_file():
        pytest.skip(f"shared real data not found under {SHARED_DATA} (only present on the development machine)")
    with logged.none(), warnings.catch_warnings():
        warnings.simplefilter("error")
        records = load_dataset_records(str(sst2))
    split = records.splits["train"]
    assert len(split) == 6920
    assert records.text_columns == ["text"]
    assert records.tasks[0].num_classes == 2 and records.tasks[0].label_names == ("0", "1")
    assert all(" " in text for text in split.texts[:50])

    ner = load_dataset_records(str(conll))
    assert len(ner.splits["train"]) == 3250
    assert ner.task("ner").kind == "token" and ner.task("ner").num_classes == 9
    assert set(ner.task("ner").label_names) == {"O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC",
                                                "B-MISC", "I-MISC"}
    assert sum(len(words) for words in ner.splits["train"].words) == 51362
