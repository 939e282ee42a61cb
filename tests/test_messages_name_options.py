"""The library's messages name an option as their reader passes it (layercache/core/option_names.py).

A refusal, warning or log line of the library reaches a Python caller as often as a command line, so it never
writes a flag (``--overwrite``) itself: it asks :func:`~layercache.core.option_names.option` (``overwrite=True``
to Python, ``--overwrite`` inside a command). Checked here over the source of every module but ``cli/``:

- no string of the library but a docstring writes a flag, except inside a backticked command line that anyone
  can run (```layercache info --check```) and in an options spec's ``Flag(...)``, which declares the flag;
- every option a message names is a keyword of a public library call and, spelled as
  :func:`~layercache.core.option_names.flag` spells it, a flag of a command: a misspelt keyword, or a keyword
  whose flag differs with no entry in ``FLAGS``, is caught here and not by a user.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "layercache"
NOT_MESSAGES = {"cli", "core/option_names.py"}
"""The commands themselves (they speak to the command line only) and the module that spells the flags."""
FLAG = re.compile(r"(?<![\w-])--[a-z]")
COMMAND_LINE = re.compile(r"`layercache [a-z-]+(?: [^`]*)?`")
"""A whole command line in backticks (```layercache info --check```): a real command, named as such."""
NAMING = {"option", "flag", "options", "call"}
"""The functions of core/option_names.py through which a message names an option."""


def library_modules(root: Path = LIBRARY) -> list[Path]:
    """Every module of the library whose strings are messages (all but :data:`NOT_MESSAGES`)."""
    return [path for path in sorted(root.rglob("*.py"))
            if not any(path.relative_to(root).as_posix().startswith(skip) for skip in NOT_MESSAGES)]


def _docstrings(tree: ast.AST) -> set[int]:
    """The string nodes that document (a module's, class's or function's first statement, an attribute's)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _declarations(tree: ast.AST) -> set[int]:
    """The string nodes inside a ``Flag(...)`` (:mod:`layercache.core.option_specs`): how the command line types an
    option, declared beside the option itself, not a message."""
    return {id(inner) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Flag"
            for inner in ast.walk(node)}


def literal_flags(root: Path = LIBRARY) -> list[str]:
    """``path:line: text`` for each string of the library (an f-string's literal parts included) that writes a flag
    outside a backticked command line (and outside the ``Flag`` declarations of an options spec)."""
    found = []
    for path in library_modules(root):
        tree = ast.parse(path.read_text(), str(path))
        documents = _docstrings(tree) | _declarations(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documents:
                text = COMMAND_LINE.sub("", node.value)
                if FLAG.search(text):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.value.strip()[:100]!r}")
    return found


def named_options(root: Path = LIBRARY) -> dict[str, set[str]]:
    """Each keyword the library's messages name through :data:`NAMING` -> the flags it is given as (``--no-x`` for
    a False value); a keyword named through :func:`~layercache.core.option_names.flag` only (a message of a
    command's own arguments, such as ``predict --text``) as ``flag:<keyword>``, and each command a
    :func:`~layercache.core.option_names.call` runs as ``call:<function>``."""
    from layercache.core.option_names import flag

    named: dict[str, set[str]] = {}
    for path in library_modules(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NAMING):
                continue
            first = node.args[0] if node.args and isinstance(node.args[0], ast.Constant) else None
            if node.func.id in ("option", "flag") and first is not None:
                value = node.args[1] if len(node.args) > 1 else None
                negated = isinstance(value, ast.Constant) and value.value is False
                key = first.value if node.func.id == "option" else f"flag:{first.value}"
                named.setdefault(key, set()).add(flag(first.value, False) if negated else flag(first.value))
            for keyword in node.keywords if node.func.id in ("options", "call") else ():
                if keyword.arg is None:  # options(**choice.keywords): names the test cannot see
                    continue
                named.setdefault(keyword.arg, set()).add(flag(keyword.arg))
            if node.func.id == "call" and first is not None:
                named.setdefault(f"call:{first.value}", set())
    return named


def test_no_library_message_writes_a_flag():
    found = literal_flags()
    assert not found, ("a message of the library writes a command-line flag; name the option with "
                       "layercache.core.option_names.option(keyword, value) instead:\n" + "\n".join(found))


def test_the_guard_finds_a_flag_in_a_message_and_passes_a_command_line(tmp_path):
    package = tmp_path / "layercache"
    (package / "cli").mkdir(parents=True)
    (package / "cli" / "commands.py").write_text('HELP = "--out is the folder"\n')  # the commands may
    (package / "store.py").write_text('"""Docstrings may say --overwrite."""\n\n\ndef f(out):\n'
                                      '    """So may this one: --out."""\n'
                                      '    raise ValueError(f"{out} is a file; check it with `layercache info '
                                      '--check` and choose another --out.")\n')
    (found,) = literal_flags(package)
    assert found.startswith("layercache/store.py:6:") and "choose another --out" in found
    (package / "store.py").write_text('def f():\n    return "check it with `layercache info --check CACHE`"\n')
    assert literal_flags(package) == []


def _public_keywords() -> set[str]:
    """Every keyword parameter of the library's public calls that take options."""
    from layercache.backbone.loader import load_backbone
    from layercache.core.threads import use_threads
    from layercache.extraction.run import extract
    from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec
    from layercache.heads import LayerHead, evaluate_run, sweep, train_head
    from layercache.live import train_head_live, verify_cache
    from layercache.live.predict import predict_texts
    from layercache.live.verify import load_cache_backbone
    from layercache.planning.plan import plan_cache
    from layercache.report.compare import CompareOptions
    from layercache.report.probing import build_probe_report, probe_report

    calls = (extract, plan_cache, DataSpec, StorageSpec, BatchSpec, load_backbone, use_threads, train_head,
             LayerHead, evaluate_run, sweep, train_head_live, verify_cache, load_cache_backbone, predict_texts,
             probe_report, build_probe_report, CompareOptions)
    return {name for call in calls for name in inspect.signature(call).parameters}


def _command_flags() -> dict[str, set[str]]:
    """Each command's name -> every flag it takes (both spellings of a flag pair)."""
    import typer

    from layercache.cli import app

    group = typer.main.get_command(app)
    return {name: {o for p in command.params for o in [*p.opts, *p.secondary_opts] if o.startswith("--")}
            for name, command in group.commands.items()}


def test_every_option_a_message_names_is_a_keyword_and_a_flag():
    # the public calls and the commands first: importing them declares every spec's flags (core/option_names's
    # registry), which is how a message spells a keyword; alone, this test read the default spellings before
    keywords, commands = _public_keywords(), _command_flags()
    named = named_options()
    flags = set().union(*commands.values())
    assert {"overwrite", "out", "storage_dtype", "call:extract"} <= set(named), "the scan lost the messages"
    problems = []
    for keyword, spelled in sorted(named.items()):
        if keyword.startswith("call:"):
            command = keyword.removeprefix("call:").replace("_", "-")
            problems += [] if command in commands else [f"call({keyword[5:]!r}): layercache has no command {command}"]
            continue
        if not keyword.startswith("flag:") and keyword not in keywords:
            problems.append(f"{keyword!r} is no keyword of a public call")
        problems += [f"{keyword!r} is spelled {flag}, which no command takes (add it to FLAGS)"
                     for flag in sorted(spelled - flags)]
    assert not problems, "\n".join(problems)
