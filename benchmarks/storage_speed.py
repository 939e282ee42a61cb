"""What compressed storage costs in time: extraction ÷ bare forward, and a head's epoch, per storage choice.

MiniLM (CPU) on the first ``--examples`` SST-2 training sentences, for float16, int8, int8 +
``--project K``, int4 and int4 + ``--project K`` storage (``--variants`` picks some), measured side by
side in one process (reps interleaved, the order rotated each rep, so drift on a shared machine falls
on every variant alike):

1. extraction: ``extract()``'s loop time (wall minus data load, model load and tokenizing) over a
   bare forward pass of the same planned batches (``benchmarks/extract.py``'s two passes);
   target: int8's ratio within 5 % of float16's.
2. a head's epoch: the default ``adaptive`` head trained from each cache (same seed, one torch
   thread), the median of its epochs' wall times, ``--head-reps`` times, the variants' fits
   interleaved and rotated as the extractions are; each rep's epoch is divided by float16's of the
   same rep, and the median of those ratios is reported; target: int8 and int4 no slower than float16.

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


def variants(project: int, picked: list[str] | None = None) -> dict[str, dict]:
    """Storage variant name -> extract()'s storage options; ``picked``: those of :data:`VARIANTS` (float16 always)."""
    every = {"float16": {"storage_dtype": "float16"}, "int8": {"storage_dtype": "int8"},
             "int8+project": {"storage_dtype": "int8", "project": project}, "int4": {"storage_dtype": "int4"},
             "int4+project": {"storage_dtype": "int4", "project": project}}
    return {key.replace("+project", f" + project {project}"): options for key, options in every.items()
            if picked is None or key == "float16" or key in picked}


VARIANTS = ("int8", "int8+project", "int4", "int4+project")
"""What ``--variants`` takes (float16, the reference, is always measured)."""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--examples", type=int, default=4000, help="first N SST-2 training sentences (default 4000)")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--project", type=int, default=96, help="K of the projected variant (default 96 = D/4)")
    p.add_argument("--epochs", type=int, default=4, help="head epochs per cache (default 4)")
    p.add_argument("--head-reps", type=int, default=3, help="interleaved head fits per cache (default 3)")
    p.add_argument("--variants", nargs="+", default=None, choices=VARIANTS,
                   help="storage variants to measure beside float16 (default: all)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "storage_speed.json")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)

    import torch

    import layercache as lc
    from layercache.backbone.loader import load_backbone
    from layercache.extraction.forward import pad_windows

    started = time.perf_counter()
    files, split = extraction_bench.split_files(args.data.expanduser().resolve(), "sst2")
    kinds = variants(args.project, args.variants)
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
        # Head epochs, from the last rep's caches: one fit per variant and rep, the variants interleaved and their
        # order rotated each rep, so a busy spell on a shared machine falls on every variant alike.
        from layercache.core.threads import use_threads  # kept by every computing call, even at torch's default count

        use_threads(1)
        last = {name: work / f"{name.replace(' ', '_')}-{args.reps - 1}" for name in kinds}
        fits = {name: [] for name in kinds}  # name -> per rep (median epoch s, fit s, accuracy)
        for rep in range(args.head_reps):
            names = list(kinds)
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                cache = lc.LayerCache.open(last[name])
                t = time.perf_counter()
                head = lc.LayerHead(mixer="adaptive", epochs=args.epochs, seed=0, progress=False).fit(cache)
                wall = time.perf_counter() - t
                epochs = [e.seconds for e in head.history_.epochs]
                metrics, _ = head.evaluate(cache, split)
                fits[name].append((statistics.median(epochs), wall, metrics[head.tasks_[0].name].get("accuracy")))
            print(f"head rep {rep + 1}/{args.head_reps}: " + ", ".join(f"{n} {fits[n][-1][0]:.2f}s" for n in kinds)
                  + f"; load avg {loadavg()}", flush=True)
        for name, path in last.items():
            medians = [f[0] for f in fits[name]]
            ratios = [m / f[0] for m, f in zip(medians, fits["float16"])]  # against float16's epoch of the same rep
            results["head_epoch"][name] = {"median_epoch_s_by_rep": medians,
                                           "median_epoch_s": statistics.median(medians),
                                           "ratio_by_rep": ratios, "ratio": statistics.median(ratios),
                                           "fit_s": [f[1] for f in fits[name]],
                                           "bytes": sum(f.stat().st_size for f in path.rglob("*.h5")),
                                           "train_accuracy": fits[name][-1][2]}
    meta["total_s"] = time.perf_counter() - started
    base = results["extraction"]["float16"]["ratio"]
    rows = []
    for name in kinds:
        extracted, epoch = results["extraction"][name], results["head_epoch"][name]
        rows.append([name, f"{epoch['bytes'] / 2**20:.1f} MiB", f"{extracted['ratio']:.3f}",
                     f"{extracted['ratio'] / base:.3f}", f"{epoch['median_epoch_s']:.2f}",
                     f"{epoch['ratio']:.3f}"])
    print_table("storage choices, side by side", ["storage", "cache", "extract / forward", "vs float16",
                                                  "head epoch (s)", "vs float16"], rows)
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
