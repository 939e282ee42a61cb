"""What a cache's model fingerprint costs: every weight file hashed (XXH3-128), plus the tokenizer.

A cache refuses states from another model by comparing fingerprints of the config, every byte of
every checkpoint file and the tokenizer (issue 13). This measures that hash on a real model,
warm (files in the page cache, the case after loading the model) and cold (page cache dropped for
those files with ``posix_fadvise``, so the disk is read), and extrapolates to 1 GB. Everything through
:mod:`layercache.backbone`'s public names (``load_backbone``, ``weight_files``, ``model_fingerprint``,
``tokenizer_fingerprint``).

    python benchmarks/fingerprint.py [--model minilm] [--repeats 5] [--json benchmarks/results/fingerprint.json]
    python benchmarks/fingerprint.py --quick      # 2 repeats, a few seconds

Every run checks what does not depend on timing: the model is loaded twice and both loads give the same model and
tokenizer fingerprints, each equal to the one the backbone recorded, the hash of the weight files (not of the
tensors: the files were found), every hash of the repeats the same. Nothing needs a GPU; the cold case is skipped
(and said so) where the kernel cannot be asked to drop pages (no ``posix_fadvise``).
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
    p.add_argument("--repeats", type=int, default=None, help="timed hashes per case (default 5; --quick: 2)")
    p.add_argument("--quick", action="store_true", help="2 repeats: a few seconds")
    p.add_argument("--json", type=Path, default=_common.HERE / "results" / "fingerprint.json")
    args = p.parse_args(argv)
    args.repeats = args.repeats or (2 if args.quick else 5)
    _common.quiet_transformers()
    from layercache.backbone import load_backbone, model_fingerprint, tokenizer_fingerprint, weight_files

    started = time.perf_counter()
    backbone = load_backbone(args.model, device="cpu")
    files = weight_files(backbone.source, backbone.revision, False)
    if not files:
        raise SystemExit(f"No weight files found for {args.model}: its fingerprint hashes tensors, not files.")
    n_bytes = sum(os.path.getsize(f) for f in files)
    hashes: dict[str, set[str]] = {"model": set(), "tokenizer": set()}

    def timed(fn, kind: str) -> float:
        t = time.perf_counter()
        hashes[kind].add(fn())
        return time.perf_counter() - t

    warm = [timed(lambda: model_fingerprint(backbone.model, files), "model") for _ in range(args.repeats)]
    cold = []
    for _ in range(args.repeats):
        if not _drop_from_page_cache(files):
            print("  cold case skipped: this system cannot drop a file's pages (no posix_fadvise)")
            break
        cold.append(timed(lambda: model_fingerprint(backbone.model, files), "model"))
    tokenizer_s = statistics.median(
        timed(lambda: tokenizer_fingerprint(backbone.tokenizer), "tokenizer") for _ in range(args.repeats))
    again = load_backbone(args.model, device="cpu")  # a second load: the fingerprints a cache compares
    checks = {
        "same model fingerprint across two loads": backbone.fingerprint == again.fingerprint,
        "same tokenizer fingerprint across two loads": backbone.tokenizer_fingerprint == again.tokenizer_fingerprint,
        "the files' hash, as recorded": backbone.fingerprint.startswith("xxh3_128-files:"),
        "every repeat hashes the model to the recorded fingerprint": hashes["model"] == {backbone.fingerprint},
        "every repeat hashes the tokenizer to the recorded fingerprint":
            hashes["tokenizer"] == {backbone.tokenizer_fingerprint},
    }
    del again

    rows, results = [], {"bytes": n_bytes, "files": [str(f) for f in files]}
    for name, times in (("warm (page cache)", warm), ("cold (disk)", cold)):
        if not times:
            continue
        median = statistics.median(times)
        results[name.split()[0]] = {"seconds": times, "median_s": median, "s_per_GB": median / n_bytes * 1e9}
        rows.append([name, n_bytes, median, n_bytes / median / 1e9, median / n_bytes * 1e9])
    results["tokenizer_s"] = tokenizer_s
    results["checks"] = checks
    _common.print_table(f"Model fingerprint of {args.model} (median of {args.repeats})",
                        ["case", "bytes", "seconds", "GB/s", "s per GB"], rows, digits=3,
                        note=f"tokenizer fingerprint: {tokenizer_s:.3f} s")
    _common.print_table("Checks (independent of timing)", ["check", "holds"], [[k, v] for k, v in checks.items()])
    results["figures"] = {"tokenizer_s": tokenizer_s, **{f"{case}_s": results[case]["median_s"]
                                                         for case in ("warm", "cold") if case in results},
                          **{f"{case}_per_GB_s": results[case]["s_per_GB"] for case in ("warm", "cold")
                             if case in results}}
    results["meta"] = {**_common.machine_meta(args.quick, args.model, "cpu"), "repeats": args.repeats,
                       "total_s": time.perf_counter() - started}
    _common.write_results(results, args.json)
    failed = [k for k, ok in checks.items() if not ok]
    assert not failed, f"fingerprint checks failed: {failed}"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
