"""What a cache's model fingerprint costs: every weight file hashed (XXH3-128), plus the tokenizer.

A cache refuses states from another model by comparing fingerprints of the config, every byte of
every checkpoint file and the tokenizer (issue 13). This measures that hash on a real model,
warm (files in the page cache, the case after loading the model) and cold (page cache dropped for
those files with ``posix_fadvise``, so the disk is read), and extrapolates to 1 GB.

    python benchmarks/fingerprint.py [--model minilm] [--repeats 5] [--json benchmarks/results/fingerprint.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import _common


def _drop_from_page_cache(files: list[str]) -> bool:
    """Ask the kernel to forget these files' cached pages; False where it cannot be asked."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in files:
        with open(path, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm", help="model name or folder (default: the bundled MiniLM)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", type=Path, default=_common.HERE / "results" / "fingerprint.json")
    args = p.parse_args(argv)
    _common.quiet_transformers()
    from layercache.backbone.loader import load_backbone, model_fingerprint, tokenizer_fingerprint, weight_files

    started = time.perf_counter()
    backbone = load_backbone(args.model, device="cpu")
    files = weight_files(backbone.source, backbone.revision, False)
    n_bytes = sum(os.path.getsize(f) for f in files)

    def timed(fn) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    warm = [timed(lambda: model_fingerprint(backbone.model, files)) for _ in range(args.repeats)]
    cold = []
    for _ in range(args.repeats):
        if not _drop_from_page_cache(files):
            break
        cold.append(timed(lambda: model_fingerprint(backbone.model, files)))
    tokenizer_s = statistics.median(
        timed(lambda: tokenizer_fingerprint(backbone.tokenizer)) for _ in range(args.repeats))

    rows, results = [], {"bytes": n_bytes, "files": [str(f) for f in files]}
    for name, times in (("warm (page cache)", warm), ("cold (disk)", cold)):
        if not times:
            continue
        median = statistics.median(times)
        results[name.split()[0]] = {"seconds": times, "median_s": median, "s_per_GB": median / n_bytes * 1e9}
        rows.append([name, n_bytes, median, n_bytes / median / 1e9, median / n_bytes * 1e9])
    results["tokenizer_s"] = tokenizer_s
    _common.print_table(f"Model fingerprint of {args.model} (median of {args.repeats})",
                        ["case", "bytes", "seconds", "GB/s", "s per GB"], rows, digits=3,
                        note=f"tokenizer fingerprint: {tokenizer_s:.3f} s")
    results["meta"] = {**_common.machine_meta(False, args.model, "cpu"), "total_s": time.perf_counter() - started}
    _common.write_results(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
