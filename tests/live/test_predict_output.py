"""Where ``predict --out`` and ``LiveBundle.save_pretrained`` write: never an input, never through a link, never a FIFO.

Each hostile case plants something in a sandbox (a folder of the test's own) and asserts that
nothing outside the place layercache was asked to write changed: every file's bytes, every
link's target and every entry's kind and mode are compared before and after (fs_support.tree_state).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from cli_support import assert_refused, invoke
from fs_support import OUTSIDE_FOLDER, make_outside, no_hang, plant, tree_state

from layercache.errors import LayercacheError
from layercache.live import LiveBundle

TEXTS = ["the film was not good", "a fine day in the park"]


@pytest.fixture
def sandbox(tmp_path):
    """``outside/`` holds a file and a folder that must never change; ``work/`` is where outputs are asked for."""
    make_outside(tmp_path / "outside", {f"{OUTSIDE_FOLDER}/notes.txt": "keep me too\n"})
    (tmp_path / "work").mkdir()
    return tmp_path


PLANTED = ["link-to-file", "dangling", "loop-of-two", "fifo"]


# ---------------------------------------------------------------- predict --out
def test_out_that_is_the_input_file_is_refused_before_reading(runs, tmp_path):
    run = runs["bert"]["topic"]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    before = texts.read_bytes()
    assert_refused(invoke("predict", run, "--file", texts, "--out", texts, "--threads", "1"),
                   "is a file this command reads", "would destroy it")
    hard = tmp_path / "hard-link.txt"
    os.link(texts, hard)
    assert_refused(invoke("predict", run, "--file", texts, "--out", hard, "--threads", "1"),
                   f"the same file as {texts}")
    config = Path(run) / "config.json"
    kept = config.read_bytes()
    assert_refused(invoke("predict", run, "a text", "--out", config, "--threads", "1"), "a file this command reads")
    assert texts.read_bytes() == before and config.read_bytes() == kept


def test_out_under_a_file_or_in_a_folder_that_cannot_be_written_is_one_sentence(runs, tmp_path, monkeypatch):
    run = runs["bert"]["topic"]
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    assert_refused(invoke("predict", run, "a text", "--out", blocker / "pred.jsonl", "--threads", "1"),
                   f"{blocker} is a regular file, not a folder")
    assert_refused(invoke("predict", run, "a text", "--out", blocker / "deeper" / "pred.jsonl", "--threads", "1"),
                   "cannot be written", "a file stands where a folder")
    assert_refused(invoke("predict", run, "a text", "--out", tmp_path, "--threads", "1"), "is a folder")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    import layercache.live.outputs as outputs

    monkeypatch.setattr(outputs.tempfile, "mkstemp", read_only)  # what a read-only mount answers
    assert_refused(invoke("predict", run, "a text", "--out", tmp_path / "pred.jsonl", "--threads", "1"),
                   "cannot be written (the file system is read-only)", "choose a path")


def test_out_in_a_folder_the_system_refuses(runs):
    """A real refusal where the system has one for this user (sysfs refuses new files even to root)."""
    target = Path("/sys/layercache-predictions.jsonl")
    try:
        target.touch()
    except OSError:
        pass
    else:
        target.unlink()
        pytest.skip("/sys takes new files here")
    assert_refused(invoke("predict", runs["bert"]["topic"], "a text", "--out", target, "--threads", "1"),
                   "cannot be written")


def test_a_failure_late_leaves_the_old_output_whole(runs, tmp_path, monkeypatch):
    """The file is written beside and renamed: a write that fails at the end leaves what was there."""
    run = runs["bert"]["topic"]
    out = tmp_path / "pred.jsonl"
    out.write_text("old predictions\n")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    import layercache.live.outputs as outputs

    monkeypatch.setattr(outputs, "write_text_atomic", full)
    assert_refused(invoke("predict", run, "a text", "--out", out, "--threads", "1"), "the disk is full")
    assert out.read_text() == "old predictions\n"
    monkeypatch.undo()
    assert invoke("predict", run, *TEXTS, "--out", out, "--threads", "1").exit_code == 0
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == TEXTS
    assert [p.name for p in tmp_path.iterdir()] == ["pred.jsonl"]  # no temporary file left


@pytest.mark.parametrize("kind", PLANTED)
def test_out_never_writes_through_what_is_planted_there(runs, sandbox, kind):
    outside = sandbox / "outside"
    out = sandbox / "work" / "pred.jsonl"
    plant(out, kind, outside)
    before = tree_state(sandbox)
    with no_hang():
        result = invoke("predict", runs["bert"]["topic"], *TEXTS, "--out", out, "--threads", "1")
    assert_refused(result)
    assert tree_state(sandbox) == before


# ---------------------------------------------------------------- LiveBundle.save_pretrained
@pytest.fixture(scope="module")
def bundle(runs):
    return LiveBundle.from_runs([runs["bert"]["topic"], runs["bert"]["scope"]])


BUNDLE_PLACES = {  # where a planted entry sits, relative to the bundle folder
    "live_bundle.json": ["link-to-file", "dangling", "loop-of-two", "fifo"],
    "heads": ["link-to-folder", "dangling", "loop-of-two", "fifo"],
    "heads/00": ["link-to-folder", "dangling", "fifo"],
    "heads/01/weights.safetensors": ["link-to-file", "dangling", "fifo"],
    "heads/00/config.json": ["link-to-file", "fifo"],
}


@pytest.mark.parametrize("place, kind", [(p, k) for p, kinds in BUNDLE_PLACES.items() for k in kinds])
def test_save_pretrained_never_writes_through_what_is_planted(bundle, sandbox, place, kind):
    outside = sandbox / "outside"
    folder = sandbox / "work" / "bundle"
    if "/" in place:
        (folder / place).parent.mkdir(parents=True)
    plant(folder / place, kind, outside)
    before = tree_state(sandbox)
    with no_hang(), pytest.raises(LayercacheError, match="link|FIFO"):
        bundle.save_pretrained(folder)
    assert tree_state(sandbox) == before  # nothing written, inside or out


def test_save_pretrained_writes_a_bundle_that_loads(bundle, sandbox):
    folder = sandbox / "work" / "bundle"
    bundle.save_pretrained(folder)
    again = bundle.save_pretrained(folder)  # saving over a bundle replaces it
    assert sorted(p.name for p in folder.iterdir()) == ["heads", "live_bundle.json"]
    loaded = LiveBundle.from_pretrained(again)
    assert loaded.predict(TEXTS).rows() == bundle.predict(TEXTS).rows()


def test_save_pretrained_on_a_file_is_one_sentence(bundle, sandbox):
    target = sandbox / "work" / "file"
    target.write_text("x")
    with pytest.raises(LayercacheError, match="not a folder"):
        bundle.save_pretrained(target)
    with pytest.raises(LayercacheError, match="cannot be written|not a folder"):
        bundle.save_pretrained(target / "bundle")
    assert target.read_text() == "x"


# ---------------------------------------------------------------- --out keeps the input's fields
def test_out_keeps_every_field_of_a_jsonl_input_beside_the_prediction(runs, tmp_path):
    run = runs["bert"]["topic"]
    texts = tmp_path / "texts.jsonl"
    lines = [{"id": 7, "text": TEXTS[0], "source": {"site": "a", "stars": [1, 2]}, "note": None},
             {"text": TEXTS[1], "id": "b-2", "lang": "en"}]
    texts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "pred.jsonl"
    assert invoke("predict", run, "an argument text", "--file", texts, "--out", out, "--threads", "1").exit_code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert list(rows[0]) == ["text", "topic"] and rows[0]["text"] == "an argument text"  # no line: nothing to keep
    assert list(rows[1]) == ["id", "text", "source", "note", "topic"]  # the line's order, then the prediction
    assert list(rows[2]) == ["text", "id", "lang", "topic"]
    for row, line in zip(rows[1:], lines):
        assert {k: row[k] for k in line} == line and set(row["topic"]["topic"]) == {"label", "probability",
                                                                                   "probabilities"}


def test_out_keeps_the_text_field_and_adds_text(runs, tmp_path):
    texts = tmp_path / "texts.jsonl"
    texts.write_text(json.dumps({"id": 1, "sentence": TEXTS[0]}) + "\n")
    out = tmp_path / "pred.jsonl"
    result = invoke("predict", runs["bert"]["topic"], "--file", texts, "--text-field", "sentence", "--out", out,
                    "--threads", "1")
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert list(row) == ["id", "sentence", "text", "topic"] and row["sentence"] == row["text"] == TEXTS[0]


@pytest.mark.parametrize("line, option, fragment", [
    ({"text": "a fine day", "topic": "sports"}, [], "has a field 'topic', and every line --out writes holds the "
                                                    "predictions of the run"),
    ({"sentence": "a fine day", "text": "kept apart"}, ["--text-field", "sentence"],
     "has a field 'text', and every line --out writes holds the text predicted under that name"),
])
def test_a_field_the_output_writes_too_is_refused_before_loading(runs, tmp_path, monkeypatch, line, option,
                                                                 fragment):
    import layercache.live.bundle as bundle

    def never(*args, **kwargs):
        raise AssertionError("the backbone was loaded")

    monkeypatch.setattr(bundle, "load_backbone", never)
    texts = tmp_path / "texts.jsonl"
    texts.write_text(json.dumps(line) + "\n")
    out = tmp_path / "pred.jsonl"
    assert_refused(invoke("predict", runs["bert"]["topic"], "--file", texts, *option, "--out", out, "--threads", "1"),
                   fragment, "so that neither is lost")
    assert not out.exists()
