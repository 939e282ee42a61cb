"""What compressed storage costs in time: extraction ÷ bare forward, and a head's epoch, per storage choice.

MiniLM (CPU) on the first ``--examples`` SST-2 training sentences, for float16, int8 and int8 +
``--project K`` storage, measured side by side in one process (reps interleaved, the order rotated
each rep, so drift on a shared machine falls on every variant alike):

1. extraction: ``extract()``'s loop time (wall minus data load, model load and tokenizing) over a
   bare forward pass of the same planned batches (``benchmarks/extract.py``'s two passes);
   target: int8's ratio within 5 % of float16's.
2. a head's epoch: the default ``adaptive`` head trained from each cache (same seed, one torch
   thread), the median of its epochs' wall times; target: int8 no slower than float16.

Run ``python benchmarks/storage_speed.py`` (a few minutes on 2 idle cores). Prints a table and writes
JSON (default ``benchmarks/results/storage_speed.json``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as extraction_bench  # noqa: E402
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, print_table, work_folder, write_results  # noqa: E402


def variants(project: int) -> dict[str, dict]:
    """Storage variant name -> extract()'s storage options."""
    return {"float16": {"storage_dtype": "float16"}, "int8": {"storage_dtype": "int8"},
            f"int8 + project {project}": {"storage_dtype": "int8", "project": project}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--examples", type=int, default=4000, help="first N SST-2 training sentences (default 4000)")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--project", type=int, default=96, help="K of the projected variant (default 96 = D/4)")
    p.add_argument("--epochs", type=int, default=4, help="head epochs per cache (default 4)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "storage_speed.json")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)

    import torch

    import layercache as lc
    from layercache.backbone.loader import load_backbone
    from layercache.extraction.forward import pad_windows

    started = time.perf_counter()
    files, split = extraction_bench.split_files(args.data.expanduser().resolve(), "sst2")
    kinds = variants(args.project)
    meta = {**machine_meta(False, extraction_bench.MODEL, "cpu"), "examples": args.examples, "reps": args.reps,
            "threads": torch.get_num_threads()}
    results: dict = {"meta": meta, "extraction": {}, "head_epoch": {}}
    with work_folder(args.workdir, "storage-speed-") as work:
        backbone = load_backbone(extraction_bench.MODEL, device="cpu")
        extraction_bench.bare_pass_warmup(backbone, files, split, pad_windows)
        bares, loops = [], {name: [] for name in kinds}
        for rep in range(args.reps):
            names = list(kinds)
            names = names[rep % len(names):] + names[:rep % len(names)]  # rotate the order each rep
            bares.append(extraction_bench.bare_pass(backbone, files, split, args.examples)["forward_s"])
            for name in names:
                extraction_bench.STORAGE.clear()
                extraction_bench.STORAGE.update(kinds[name])
                out = work / f"{name.replace(' ', '_')}-{rep}"
                timing, _ = extraction_bench.extract_pass(files, args.examples, out)
                loops[name].append(timing["loop_s"])
                if rep < args.reps - 1:
                    shutil.rmtree(out, ignore_errors=True)
            print(f"rep {rep + 1}/{args.reps}: bare {bares[-1]:.1f}s, "
                  + ", ".join(f"{n} {loops[n][-1]:.1f}s" for n in kinds) + f"; load avg {loadavg()}", flush=True)
        bare = statistics.median(bares)
        for name in kinds:
            results["extraction"][name] = {"loop_s": loops[name], "bare_forward_s": bares,
                                           "ratio": statistics.median(loops[name]) / bare}
        # Head epochs, from the last rep's caches, interleaved epoch by epoch across the variants.
        from layercache.core.threads import use_threads  # kept by every computing call, even at torch's default count

        use_threads(1)
        last = {name: work / f"{name.replace(' ', '_')}-{args.reps - 1}" for name in kinds}
        for name, path in last.items():
            cache = lc.LayerCache.open(path)
            t = time.perf_counter()
            head = lc.LayerHead(mixer="adaptive", epochs=args.epochs, seed=0, progress=False).fit(cache)
            wall = time.perf_counter() - t
            epochs = [e.seconds for e in head.history_.epochs]
            metrics, _ = head.evaluate(cache, split)
            size = sum(f.stat().st_size for f in path.rglob("*.h5"))
            results["head_epoch"][name] = {"epoch_s": epochs, "median_epoch_s": statistics.median(epochs),
                                           "fit_s": wall, "bytes": size,
                                           "train_accuracy": metrics[head.tasks_[0].name].get("accuracy")}
    meta["total_s"] = time.perf_counter() - started
    base = results["extraction"]["float16"]["ratio"]
    base_epoch = results["head_epoch"]["float16"]["median_epoch_s"]
    rows = []
    for name in kinds:
        extracted, epoch = results["extraction"][name], results["head_epoch"][name]
        rows.append([name, f"{epoch['bytes'] / 2**20:.1f} MiB", f"{extracted['ratio']:.3f}",
                     f"{extracted['ratio'] / base:.3f}", f"{epoch['median_epoch_s']:.2f}",
                     f"{epoch['median_epoch_s'] / base_epoch:.3f}"])
    print_table("storage choices, side by side", ["storage", "cache", "extract / forward", "vs float16",
                                                  "head epoch (s)", "vs float16"], rows)
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
