"""Fail when a module in layercache/ is longer than the limit (issue 27: one idea per module).

Prints each offending file with its line count and the limit, and exits 1 if there is one.
A long module is split along its ideas, not squeezed under the limit.
Usage: python .ci/module_sizes.py [package folder] (default: layercache/ beside .ci/).
"""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 500


def main(argv: list[str]) -> int:
    """Print every module over LIMIT lines under the package folder; return 1 if there is one."""
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "layercache"
    over = []
    for path in sorted(root.rglob("*.py")):
        with path.open("rb") as handle:
            lines = sum(1 for _ in handle)
        if lines > LIMIT:
            over.append((path, lines))
    for path, lines in over:
        print(f"{path.relative_to(root.parent)}: {lines} lines (limit {LIMIT})")
    if over:
        print(f"{len(over)} module(s) over {LIMIT} lines: split each along its ideas")
        return 1
    print(f"every module in {root} has at most {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
