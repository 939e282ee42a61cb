"""The ``layercache`` command line: parse options, make one library call, render the result.

One module per group of commands (:mod:`.cache`: extract, info, list; :mod:`.plan`: plan; :mod:`.heads`: train-head,
eval; :mod:`.sweep`: sweep; :mod:`.report`: probe-report;
:mod:`.live`: predict), each a thin typer wrapper over a public library call;
:mod:`.parsing` turns option text into arguments, :mod:`.choices` gives every fixed list of values from its registry
and :mod:`.options` declares each option several commands share once, its default read from the library.
"""

from __future__ import annotations

# Each module registers its commands on the app; --help lists them in this order.
from . import cache, live  # noqa: F401

# isort: split
from . import compare, heads, plan, report, sweep  # noqa: F401
from .base import app, err_console, friendly, out_console
from .parsing import parse_assignments, parse_size, parse_splits, split_list

__all__ = ["app", "main", "friendly", "out_console", "err_console", "parse_size", "parse_splits",
           "parse_assignments", "split_list"]


def main() -> None:
    """Console-script entry point."""
    app()

