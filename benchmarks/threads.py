"""Head training on a quiet and on a loaded machine, by torch thread setting: why ``--threads auto``.

torch's OpenMP threads wait for one another at the end of every parallel region; when another busy
process holds one of the cores, the thread that lost its core stalls all of them, thousands of
times a step. This benchmark trains the same head (``--mixer``, default ``adaptive``, the
``sentiment`` task of the built-in set, ``--epochs`` epochs after a one-epoch warm-up, token states)
in a fresh interpreter per measurement, beside 0, 1, ... busy processes (``while True: pass``),
under each setting:

- ``2 threads`` (the torch default on 2 cores: what every command did before ``--threads``);
- ``1 thread``;
- ``2, OMP_WAIT_POLICY=PASSIVE`` and ``2, GOMP_SPINCOUNT=1000``: libgomp's wait policy, the usual
  suspect (set before torch loads);
- ``auto``: :func:`layercache.core.threads.use_threads` (the idle cores, sampled at start), the
  default of every command now.

The cache is the built-in task set through all-MiniLM-L6-v2, extracted into ``--cache`` when
missing (about 30 s). Prints a table of wall seconds (and the slowdown against the quiet machine
with the same setting) and writes JSON (default ``benchmarks/results/threads.json``).

    python benchmarks/threads.py                   # loads 0 and 1, about 3 minutes
    python benchmarks/threads.py --loads 0 1 2 --mixer last
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, loadavg, machine_meta, print_table, write_results  # noqa: E402

SETTINGS = {  # name -> (--threads value for the child, environment set before torch loads)
    "2 threads": ("2", {}),
    "1 thread": ("1", {}),
    "2, OMP_WAIT_POLICY=PASSIVE": ("2", {"OMP_WAIT_POLICY": "PASSIVE"}),
    "2, GOMP_SPINCOUNT=1000": ("2", {"GOMP_SPINCOUNT": "1000"}),
    "auto": ("auto", {}),
}


def child(cache: str, mixer: str, threads: str, epochs: int) -> dict:
    """Runs in the child: one warm-up epoch, then ``epochs`` timed epochs of one head."""
    from layercache import LayerCache, LayerHead
    from layercache.core.threads import use_threads

    choice = use_threads(None if threads == "auto" else int(threads))
    with LayerCache.open(cache) as handle:
        options = dict(tasks=["sentiment"], source="tokens", progress=False, solver="adamw", patience=0)
        LayerHead(mixer, epochs=1, **options).fit(handle)  # warm-up: page cache, kernels
        t0, c0 = time.perf_counter(), time.process_time()
        LayerHead(mixer, epochs=epochs, **options).fit(handle)
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "threads": choice.threads}


def spinners(n: int) -> list[subprocess.Popen]:
    """``n`` busy processes, each holding one core for as long as it runs."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def measure(cache: Path, mixer: str, setting: str, epochs: int) -> dict:
    threads, env = SETTINGS[setting]
    cmd = [sys.executable, __file__, "--child", str(cache), "--mixer", mixer, "--threads", threads,
           "--epochs", str(epochs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        raise RuntimeError(f"the child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/lc-bench-caches/builtin-minilm"),
                        help="built-in MiniLM cache (extracted when missing)")
    parser.add_argument("--mixer", default="adaptive")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 1], help="busy processes beside the training")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--out", type=Path, default=HERE / "results" / "threads.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--threads", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.mixer, args.threads, args.epochs)))
        return

    from layercache import extract

    started = time.perf_counter()
    results = {"meta": machine_meta(False, "minilm", "cpu"), "mixer": args.mixer, "epochs": args.epochs, "runs": []}
    extract("minilm", "builtin", args.cache, progress=False)  # a no-op when complete
    for load in args.loads:
        busy = spinners(load)
        try:
            time.sleep(0.5)  # let them reach full speed before the child samples the idle cores
            for setting in args.settings:
                run = {"load": load, "setting": setting, **measure(args.cache, args.mixer, setting, args.epochs),
                       "loadavg": loadavg()}
                results["runs"].append(run)
                print(f"  beside {load} busy process(es), {setting}: {run['wall_s']:.2f} s "
                      f"({run['threads']} thread(s))", flush=True)
        finally:
            for process in busy:
                process.kill()
                process.wait()
    quiet = {r["setting"]: r["wall_s"] for r in results["runs"] if r["load"] == 0}
    rows = []
    for setting in args.settings:
        row = [setting]
        for load in args.loads:
            run = next(r for r in results["runs"] if r["load"] == load and r["setting"] == setting)
            slowdown = run["wall_s"] / quiet[setting] if setting in quiet and load else None
            row.append(f"{run['wall_s']:.2f} s ({run['threads']})" + (f", {slowdown:.1f}x" if slowdown else ""))
        rows.append(row)
    print_table(f"{args.mixer} head, {args.epochs} epochs of the built-in sentiment task: wall seconds (threads used)"
                ", slowdown against the quiet machine",
                ["setting", *[f"beside {n} busy" for n in args.loads]], rows)
    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["total_s"] = time.perf_counter() - started
    write_results(results, args.out)


if __name__ == "__main__":
    main()
