"""Tables written from results: the figures quoted in README.md and benchmarks/README.md, rendered from recorded runs.

A recorded run is a benchmark's result file kept in git under ``benchmarks/recorded/NAME.json`` (its ``meta``
names the commit, the machine, the load and the date). A document marks each table it quotes::

    <!-- rendered: plan_check_cost.summary -->
    ...whatever is here is replaced...
    <!-- end rendered -->

and this script fills the block from ``benchmarks/NAME.py``'s ``tables(results)`` (a dict of markdown tables by
name) over the recorded run, followed by a line naming that run's commit, machine and date. So no figure in a
rendered block is typed by hand, and each names where it was measured.

    python benchmarks/render.py                      # rewrite every rendered block
    python benchmarks/render.py --check              # exit 1 if a block differs from its recorded run (CI)
    python benchmarks/render.py --record plan_check_cost [--from results/plan_check_cost.json]
                                                     # keep a run (default: benchmarks/results/NAME.json), render
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDED = HERE / "recorded"
DOCUMENTS = (HERE.parent / "README.md", HERE / "README.md")
BLOCK = re.compile(r"(<!-- rendered: (?P<name>[\w]+)\.(?P<table>[\w]+) -->\n)(?P<body>.*?)(<!-- end rendered -->)",
                   re.DOTALL)


def tables_of(name: str) -> dict[str, str]:
    """``benchmarks/NAME.py``'s tables over its recorded run."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(HERE))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(HERE))
    recorded = RECORDED / f"{name}.json"
    if not (HERE / f"{name}.py").exists() or not recorded.exists():
        raise SystemExit(f"a block renders {name!r}, but benchmarks/{name}.py or its recorded run {recorded} is "
                         f"missing: record one with python benchmarks/render.py --record {name}")
    results = json.loads(recorded.read_text())
    return {table: text.rstrip("\n") + "\n\n" + provenance(results) for table, text in module.tables(results).items()}


def provenance(results: dict) -> str:
    """The line under a rendered table: which run, on what, when."""
    meta = results.get("meta", {})
    commit = (meta.get("commit") or "an unknown commit")[:12]
    load = meta.get("loadavg_start")
    return (f"*Rendered from `benchmarks/recorded/`: measured at {commit} on {meta.get('cpu') or 'an unknown CPU'} "
            f"({meta.get('cpu_count', '?')} cores, torch {meta.get('torch', '?')}"
            f"{f', load {load[0]:.1f} at the start' if load else ''}), {meta.get('date', '?')}.*\n")


def render(text: str, cache: dict[str, dict[str, str]]) -> str:
    def fill(match: re.Match) -> str:
        name, table = match["name"], match["table"]
        if name not in cache:
            cache[name] = tables_of(name)
        if table not in cache[name]:
            raise SystemExit(f"benchmarks/{name}.py renders no table {table!r} (it has {sorted(cache[name])})")
        return match.group(1) + cache[name][table] + match.group(5)

    return BLOCK.sub(fill, text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a rendered block differs from its recorded run")
    p.add_argument("--record", metavar="NAME", help="keep a run of benchmarks/NAME.py as its recorded run first")
    p.add_argument("--from", dest="source", type=Path, help="the run to record (default results/NAME.json)")
    args = p.parse_args(argv)
    if args.record:
        source = args.source or HERE / "results" / f"{args.record}.json"
        if not source.exists():
            p.error(f"no run to record at {source}: run python benchmarks/{args.record}.py first, or give --from")
        RECORDED.mkdir(exist_ok=True)
        shutil.copyfile(source, RECORDED / f"{args.record}.json")
        print(f"recorded {source} as {RECORDED / (args.record + '.json')}")
    cache: dict[str, dict[str, str]] = {}
    stale = []
    for document in DOCUMENTS:
        text = document.read_text()
        new = render(text, cache)
        if new != text:
            stale.append(document)
            if not args.check:
                document.write_text(new)
    if args.check and stale:
        print(f"rendered blocks differ from their recorded runs in {', '.join(str(d) for d in stale)}: "
              "run python benchmarks/render.py (never edit a rendered block by hand)")
        return 1
    print(("checked" if args.check else "rendered") + f" {sum(len(t) for t in cache.values())} table(s) from "
          f"{len(cache)} recorded run(s)" + ("" if args.check else f"; rewrote {len(stale)} document(s)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
