"""How long ``make demo`` takes: its commands timed one by one, as a user runs them from an installed venv.

The commands are read from the Makefile's ``demo`` target, the one place they are declared (``$(BIN)/layercache``
becomes this Python's ``layercache``; ``runs/`` becomes a scratch folder), and each runs in a fresh process through
the command line, the public way in: extract the built-in set with MiniLM, ``info``, an adaptive head on its four
tasks, the probe report. Under ``benchmarks/compare.py --only demo --full --against REV`` each side runs these same
commands with its own layercache, so the demo's time is compared with any earlier commit's.

    python benchmarks/demo.py              # the demo as make runs it: about 2 minutes on 2 cores
    python benchmarks/demo.py --quick      # 30 examples a split, 1 epoch, no MDL or cumulative: about a minute

Checks that do not depend on timing: every command exits 0, the cache, the run (metrics.json) and the report
(report.json with every built-in task, report.html) are written. Target (issue 38): at most 2 minutes in all on a
quiet 2-core machine. Writes ``results/demo.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import _common

MAKEFILE = _common.REPO / "Makefile"
CLI = "import sys; from layercache.cli import main; sys.argv[0] = 'layercache'; sys.exit(main())"
"""The console script ``layercache`` (``layercache.cli:main``), run by this Python (the side's own under compare.py)."""
QUICK = {"extract": ["--limit", "30"], "train-head": ["--epochs", "1"], "probe-report": ["--no-mdl", "--no-cumulative",
                                                                                          "--act-epochs", "1"]}
"""What ``--quick`` adds to a command (a later ``--epochs`` overrides the Makefile's)."""


def demo_commands(makefile: Path = MAKEFILE) -> list[list[str]]:
    """The ``layercache`` arguments of each command of the Makefile's ``demo`` target, in order."""
    lines = makefile.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("demo:"))
    commands = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        words = shlex.split(line.strip())
        if not words[0].endswith("/layercache"):
            raise SystemExit(f"the demo target runs {words[0]!r}, which this benchmark cannot time; update it")
        commands.append(words[1:])
    return commands


def in_folder(args: list[str], work: Path) -> list[str]:
    """The command's arguments with its ``runs/`` paths moved into ``work``."""
    return [str(work / a.removeprefix("runs/")) if a.startswith("runs/") else a for a in args]


def run(args: list[str], env: dict) -> float:
    """Seconds ``layercache ARGS`` takes in a fresh process; exits with its output when it fails."""
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"layercache {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                         f"{done.stderr[-2000:]}")
    return seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="30 examples a split, 1 epoch, no MDL or cumulative")
    p.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--json", type=Path, default=_common.HERE / "results" / "demo.json")
    args = p.parse_args(argv)
    started = time.perf_counter()
    load_before = _common.loadavg()
    commands = demo_commands()
    rows, seconds = [], {}
    with _common.work_folder(args.workdir, "layercache-demo-") as work:
        env = {**os.environ, "LAYERCACHE_HOME": str(work / "home")}  # the latest-cache pointer stays in here
        for command in commands:
            argv_ = in_folder(command, work) + (QUICK.get(command[0], []) if args.quick else [])
            seconds[command[0]] = run(argv_, env)
            rows.append([f"layercache {' '.join(command)}", seconds[command[0]]])
        cache = next(Path(a) for a in in_folder(commands[0], work) if a.startswith(str(work)))
        report = json.loads((cache.parent / (cache.name + ".report") / "report.json").read_text())
        runs = list((cache.parent / (cache.name + ".runs")).glob("*/metrics.json"))
        checks = {
            "the cache is complete": json.loads((cache / "manifest.json").read_text()).get("complete") is True,
            "the head's run is written": len(runs) == 1,
            "the report covers the four built-in tasks": sorted(report["tasks"]) == sorted(
                ["topic", "sentiment", "negation_scope", "intensity"]),
            "report.html is written": (cache.parent / (cache.name + ".report") / "report.html").is_file(),
        }
    total = sum(seconds.values())
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    _common.print_table("make demo, one command at a time" + (" (--quick)" if args.quick else ""),
                        ["command", "seconds"], rows + [["in all", total]], digits=1,
                        note=f"largest peak memory of a command: {peak_mib:.0f} MiB; target: 120 s in all")
    _common.print_table("Checks (independent of timing)", ["check", "holds"], [[k, v] for k, v in checks.items()])
    results = {
        "commands": [" ".join(c) for c in commands], "seconds": seconds, "checks": checks,
        "figures": {**{f"{name.replace('-', '_')}_s": s for name, s in seconds.items()}, "total_s": total,
                    "peak_rss_mib": peak_mib},
        "meta": {**_common.machine_meta(args.quick, "minilm", "cpu"), "loadavg_start": load_before,
                 "loadavg_end": _common.loadavg(), "total_s": time.perf_counter() - started},
    }
    _common.write_results(results, args.json)
    failed = [k for k, ok in checks.items() if not ok]
    assert not failed, f"demo checks failed: {failed}"
    return 0


def tables(results: dict) -> dict[str, str]:
    """benchmarks/README's table of a recorded run."""
    lines = ["| command (from the Makefile's demo target) | seconds |", "|---|---|"]
    lines += [f"| `layercache {command}` | {results['seconds'][command.split()[0]]:.1f} |"
              for command in results["commands"]]
    lines.append(f"| in all (target: 120) | **{results['figures']['total_s']:.1f}** |")
    return {"commands": "\n".join(lines)}


if __name__ == "__main__":
    raise SystemExit(main())
