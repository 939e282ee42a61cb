"""Did a change make layercache faster or slower? A benchmark, or a command, on this checkout and REV side by side.

    python benchmarks/compare.py --against 35f1445 --only probes              # the benchmark's --quick figures
    python benchmarks/compare.py --against HEAD~3 --only heads --full         # its full run
    python benchmarks/compare.py --against 35f1445 --reps 4 -- layercache train-head CACHE --epochs 5 --out {out}

REV is checked out into a temporary git worktree. Each side runs in a temporary virtual environment that shares
this one's installed packages (torch, transformers, ...) and imports layercache from its own source: this
checkout's, or the worktree's (REV's own code; nothing to build, layercache is pure Python). A REV whose
dependencies differ from this environment's cannot be compared this way. Both sides run the same thing, one fresh
process per run, interleaved and alternating (this, REV, REV, this, ...), so that what else the machine does
falls on both alike:

- ``--only NAME``: this checkout's ``benchmarks/NAME.py`` (``--quick`` unless ``--full``), the same script on
  both sides. Its figures: the ``figures`` of the JSON it writes, or else every number in it whose key ends in
  ``_s`` or ``seconds`` (the result file goes where ``LAYERCACHE_BENCH_JSON`` says; ``_common.write_results``
  honours it).
- ``-- COMMAND ...``: any command (``layercache ...`` runs the side's own CLI); ``{out}`` is replaced by a fresh
  empty folder for each run. Its figures: wall seconds and peak memory (max RSS) of the process.

Each figure's ratio is this checkout's over REV's, per rep (the two runs of a rep ran back to back), reported as
the median and min-max over the reps; it is flagged when every rep's ratio lies beyond ``--noise`` (default
10 %): a change the machine's drift does not explain. Which way is worse is the figure's direction: lower is
better unless the result file says otherwise (``figure_directions`` beside ``figures``: ``"higher"`` for a score
or a similarity, ``"either"`` for a count or a closeness to 1 that should not move), so a flagged figure reads
"worse", "better" or "changed", and the exit status is 1 when one is worse. Prints the table and writes JSON
(``--json``) with both commits and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, REPO, commit, cpu_model, loadavg, print_table  # noqa: E402

RESULT_ENV = "LAYERCACHE_BENCH_JSON"
"""Where a benchmark run by this script writes its results (read by ``_common.write_results``)."""
TIME_KEYS = ("_s", "seconds")
DIRECTIONS = ("lower", "higher", "either")
"""What a figure's ``figure_directions`` entry may say: lower is better (every figure not named: seconds, memory,
ratios turned so that larger is worse), higher is better, or either way is a change to look at, not a verdict."""
CLI = "import sys; from layercache.cli import main; sys.argv[0] = 'layercache'; sys.exit(main())"
"""The console script ``layercache`` (``layercache.cli:main``), run by the side's own python (older commits have no
``python -m layercache``)."""


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def make_env(folder: Path, source: Path) -> Path:
    """A virtual environment in ``folder`` with this one's packages and layercache from ``source``; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # .pth lines are appended to sys.path in file-name order: the side's source first, then the shared packages
    # (whose own .pth files, such as this checkout's editable install, are not read: they are not a site dir)
    Path(purelib, "a-layercache-source.pth").write_text(f"{source}\n")
    Path(purelib, "b-shared-packages.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n")
    found = subprocess.run([str(python), "-c", "import layercache, sys; print(layercache.__file__)"],
                           capture_output=True, text=True, cwd=folder, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(source.resolve()):
        raise SystemExit(f"the environment for {source} imports layercache from {found}")
    return python


def run_once(python: Path, command: list[str], work: Path, figures_from_json: bool
             ) -> tuple[dict[str, float], dict[str, str]]:
    """One run in a fresh process: its figures, and the directions its result file declares."""
    out = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    result = out / "result.json"
    argv = [str(python), "-c", CLI, *command[1:]] if command[0] == "layercache" else \
        [str(python) if part == "python" else part for part in command]
    argv = [part.replace("{out}", str(out / "out")) for part in argv]
    env = {**os.environ, RESULT_ENV: str(result)}
    t0 = time.perf_counter()
    process = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)  # reaped here, with its own resource usage
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if process.returncode:
        raise SystemExit(f"{' '.join(argv)} failed (exit {process.returncode}):\n{output[-3000:]}")
    figures, directions = {"wall_s": wall, "max_rss_mib": usage.ru_maxrss / 1024}, {}  # Linux: kilobytes
    if figures_from_json:
        from_json, directions = read_figures(result)
        figures = from_json or figures
    shutil.rmtree(out, ignore_errors=True)
    return figures, directions


def read_figures(path: Path) -> tuple[dict[str, float], dict[str, str]]:
    """A result file's ``figures`` and ``figure_directions``, or every number in it whose key ends in a time suffix
    (by its path; lower is better)."""
    if not path.exists():
        return {}, {}
    data = json.loads(path.read_text())
    if isinstance(data.get("figures"), dict):
        directions = data.get("figure_directions") or {}
        wrong = {k: v for k, v in directions.items() if v not in DIRECTIONS}
        if wrong:
            raise SystemExit(f"{path}: figure_directions may say {', '.join(DIRECTIONS)}, not {wrong}")
        return {k: float(v) for k, v in data["figures"].items() if isinstance(v, (int, float))}, directions
    found: dict[str, float] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key != "meta":
                    walk(value, f"{prefix}/{key}" if prefix else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{prefix}[{i}]")
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and prefix.endswith(TIME_KEYS):
            found[prefix] = float(node)

    walk(data, "")
    return found, {}


def judge(this: list[float | None], rev: list[float | None], direction: str, noise: float) -> dict:
    """One figure's verdict from its values per rep on each side: the ratios this / REV, and ``verdict`` "worse",
    "better" or "changed" when every rep's ratio lies beyond 1 +- ``noise`` the same way ("" otherwise)."""
    ratios = [a / b for a, b in zip(this, rev) if a is not None and b]  # a rep without the figure is left out
    up = all(r > 1 + noise for r in ratios)
    down = all(r < 1 - noise for r in ratios)
    verdict = ""
    if ratios and (up or down):
        verdict = "changed" if direction == "either" else "worse" if up == (direction == "lower") else "better"
    return {"this": this, "rev": rev, "direction": direction,
            "ratio_median": statistics.median(ratios) if ratios else None,
            "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None),
            "flagged": bool(verdict), "verdict": verdict}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", required=True, metavar="REV", help="the commit to compare with (any git revision)")
    p.add_argument("--only", metavar="NAME", help="a benchmark: benchmarks/NAME.py")
    p.add_argument("--full", action="store_true", help="the benchmark's full run (default: --quick)")
    p.add_argument("--reps", type=int, default=3, help="runs of each side (default 3)")
    p.add_argument("--noise", type=float, default=0.10, help="flag a ratio whose every rep is beyond 1 ± this")
    p.add_argument("--json", type=Path, default=HERE / "results" / "compare.json")
    p.add_argument("command", nargs=argparse.REMAINDER, help="after --: a command to time instead of a benchmark")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(args.only) == bool(command):
        p.error("give one of --only NAME or -- COMMAND")
    if args.only:
        script = HERE / f"{args.only}.py"
        if not script.exists():
            p.error(f"no benchmark {script}")
        command = ["python", str(script), *([] if args.full else ["--quick"])]
    try:
        rev = git("rev-parse", "--verify", "--quiet", f"{args.against}^{{commit}}")
    except subprocess.CalledProcessError:
        p.error(f"--against {args.against!r} names no commit of this repository; give a hash, tag or branch "
                "(git log --oneline lists them)")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="layercache-compare-") as tmp:
        tmp = Path(tmp)
        git("worktree", "add", "--detach", str(tmp / "rev"), rev)
        try:
            pythons = {"this": make_env(tmp / "env-this", REPO), "rev": make_env(tmp / "env-rev", tmp / "rev")}
            work = tmp / "work"
            work.mkdir()
            runs: dict[str, list[dict[str, float]]] = {"this": [], "rev": []}
            directions: dict[str, str] = {}  # the same script runs on both sides; this side's declarations win
            load = [loadavg()]
            for rep in range(args.reps):
                for side in (("this", "rev") if rep % 2 == 0 else ("rev", "this")):
                    t = time.perf_counter()
                    figures, declared = run_once(pythons[side], command, work, bool(args.only))
                    runs[side].append(figures)
                    directions = {**declared, **directions} if side == "rev" else {**directions, **declared}
                    # the run's own wall time: a benchmark's figures (--only) need not hold one
                    print(f"  rep {rep + 1}/{args.reps} {side}: {time.perf_counter() - t:.1f} s wall "
                          f"({len(runs[side][-1])} figures)", flush=True)
                load.append(loadavg())
        finally:
            git("worktree", "remove", "--force", str(tmp / "rev"))
    rows, table = {}, []
    for name in sorted(set(runs["this"][0]) & set(runs["rev"][0])):
        row = judge([r.get(name) for r in runs["this"]], [r.get(name) for r in runs["rev"]],
                    directions.get(name, "lower"), args.noise)
        if row["ratio_median"] is None:
            continue
        rows[name] = row
        verdict = f"worse ({row['direction']} is better)" if row["verdict"] == "worse" else row["verdict"]
        medians = [statistics.median(v for v in row[side] if v is not None) for side in ("this", "rev")]
        table.append([name, *medians, row["ratio_median"],
                      f"{row['ratio_min']:.3f}-{row['ratio_max']:.3f}", verdict])
    this_commit = commit(REPO)
    shown = f"{this_commit[:12]}{'+dirty' if this_commit.endswith('+dirty') else ''}" if this_commit else "?"
    print_table(f"this ({shown}) against {args.against} ({rev[:12]}), "
                f"{args.reps} reps interleaved", ["figure", "this", "REV", "this / REV", "min-max", "beyond noise"],
                table, note=f"flagged: every rep's ratio beyond 1 ± {args.noise:g}; load average before and after "
                            f"each rep: {load}")
    results = {"meta": {"this": this_commit, "against": args.against, "against_commit": rev, "cpu": cpu_model(),
                        "cpu_count": os.cpu_count(), "reps": args.reps, "noise": args.noise, "command": command,
                        "loadavg": load, "total_s": round(time.perf_counter() - started, 1),
                        "max_rss_note": "of the measured process (ru_maxrss of the child)"},
               "figures": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"JSON written to {args.json}")
    return 1 if any(r["verdict"] == "worse" for r in rows.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
