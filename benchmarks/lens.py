"""The tuned lens from a cache: its curve on a real (small, trained here) decoder, and its speed against the matmul
bound on a SmolLM-135M-shaped one.

**Curve.** A byte-level BPE tokenizer (a vocabulary of 4,096) and a GPT-2 (6 layers x 192) are trained
here on the shared data's text (SST-2 train, AG News dev, MPQA and CR) for ``--train-seconds`` (180 s: a few
minutes on 2 cores); the model's cache of AG News test headlines (a train split of 1,500 to fit the lenses on, a
test split of 500 to score them on) is extracted with ``layercache.extract``; a tuned lens (``TunedLens()``, KL,
3 epochs) and the linear shortcut (``objective="least_squares"``) are fitted on train and scored on test beside the
logit lens. Expected (Belrose et al. 2023, Fig. 2): the tuned lens's KL to the final distribution lies below the
logit lens's at every layer but the last and falls with depth.

**Speed.** A decoder of SmolLM-135M's shape with random weights (30 layers, width 576, vocabulary 49,152; the
timing does not depend on the weights) over 2,048 tokens (256 in ``--quick``): the time of one epoch of the KL fit
(``batch_tokens`` 256) against its matmul bound. Per token and translated layer the fit computes the logits
(``2 D V`` FLOPs) and, backward, the gradient of the states (``2 D V``; the unembedding is frozen), and per token the
final distribution once (``2 D V``); the bound is those FLOPs at the rate this machine reaches on the same two
matmul shapes, measured in the same run. Target: within 2x of the bound. With ``--bf16`` (and always in ``--quick``)
the same epoch again with bfloat16 logits (``logits_dtype="bfloat16"``), against the bfloat16 matmuls' bound: a GPU's
setting (``gpu_check.py`` measures it there), slower than float32 on a CPU without bfloat16 units.

    python benchmarks/lens.py                  # both parts, about 10 minutes
    python benchmarks/lens.py --only speed
    python benchmarks/lens.py --only speed --bf16   # and one epoch with bfloat16 logits
    python benchmarks/lens.py --quick          # tiny shapes, seconds: asserts the mechanics, not the figures

Writes JSON (``benchmarks/results/lens.json``) with ``meta`` (commit, machine) and the headline ``figures``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_DATA,
    HERE,
    loadavg,
    machine_meta,
    print_table,
    quiet_transformers,
    work_folder,
    write_results,
)

FULL = {"vocab": 4096, "layers": 6, "width": 192, "train_seconds": 180.0, "lens_train": 1500, "lens_test": 500,
        "speed_layers": 30, "speed_width": 576, "speed_vocab": 49152, "speed_tokens": 2048, "lens_epochs": 3}
QUICK = {"vocab": 512, "layers": 3, "width": 32, "train_seconds": 5.0, "lens_train": 120, "lens_test": 40,
         "speed_layers": 3, "speed_width": 64, "speed_vocab": 2048, "speed_tokens": 256, "lens_epochs": 2}
BATCH_TOKENS = 256
TARGET_BOUND_RATIO = 2.0


def texts(data: Path) -> list[str]:
    """The shared data's sentences (first column of each TSV but AG News test, held out for the lens)."""
    out = []
    for name in ("sst2/train.tsv", "agnews/dev.tsv", "mpqa/train.tsv", "cr/train.tsv"):
        for line in (data / name).read_text().splitlines():
            text = line.split("\t")[0] if not name.startswith("sst2") else line.split("\t", 1)[-1]
            if text.strip():
                out.append(text.strip())
    return out


def make_tokenizer(corpus: list[str], vocab: int, folder: Path):
    """A byte-level BPE tokenizer trained on ``corpus``, saved into ``folder`` as a transformers fast tokenizer."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                                       show_progress=False))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                bos_token="<|endoftext|>", model_max_length=128)
    fast.save_pretrained(folder)
    return fast


def train_gpt2(corpus: list[str], settings: dict, folder: Path, seed: int = 0) -> dict:
    """Train a small GPT-2 on ``corpus`` for ``train_seconds``; save it (with its tokenizer) into ``folder``."""
    import numpy as np
    import torch
    import transformers

    tokenizer = make_tokenizer(corpus, settings["vocab"], folder)
    ids = np.concatenate([np.asarray(tokenizer(t)["input_ids"] + [tokenizer.eos_token_id]) for t in corpus])
    length, batch = 64, 32
    windows = torch.from_numpy(ids[: len(ids) // length * length].reshape(-1, length)).long()  # (n, 64)
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=settings["width"],
                                     n_layer=settings["layers"], n_head=max(1, settings["width"] // 32),
                                     bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = transformers.GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    started, steps, losses = time.perf_counter(), 0, []
    model.train()
    while time.perf_counter() - started < settings["train_seconds"]:
        rows = torch.randint(len(windows), (batch,), generator=generator)
        loss = model(windows[rows], labels=windows[rows]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        steps += 1
    model.eval()
    model.save_pretrained(folder)
    return {"steps": steps, "tokens_seen": steps * batch * length, "corpus_tokens": int(len(ids)),
            "final_loss_nats": float(np.mean(losses[-20:])), "seconds": time.perf_counter() - started,
            "parameters": sum(p.numel() for p in model.parameters())}


def lens_data(data: Path, folder: Path, n_train: int, n_test: int) -> dict[str, str]:
    """AG News test headlines and descriptions (never trained on) as a train and a test split file."""
    lines = [line.split("\t")[0] for line in (data / "agnews/test.tsv").read_text().splitlines() if line.strip()]
    files = {}
    for split, part in (("train", lines[:n_train]), ("test", lines[n_train:n_train + n_test])):
        path = folder / f"lens-{split}.tsv"
        path.write_text("text\n" + "".join(f"{t.replace(chr(9), ' ')}\n" for t in part))
        files[split] = str(path)
    return files


def curve(data: Path, folder: Path, settings: dict) -> dict:
    """Train the GPT-2, cache it, fit and score the lenses: per layer KL and bits of each lens."""
    from layercache import LayerCache, extract
    from layercache.depth import TunedLens

    corpus = texts(data)
    if settings is QUICK:
        corpus = corpus[:400]
    model_dir = folder / "gpt2"
    model_dir.mkdir(parents=True, exist_ok=True)
    trained = train_gpt2(corpus, settings, model_dir)
    t0 = time.perf_counter()
    cache_dir = folder / "gpt2-cache"
    extract(str(model_dir), split_files=lens_data(data, folder, settings["lens_train"], settings["lens_test"]),
            out=cache_dir, no_labels=True, progress=False)
    extract_s = time.perf_counter() - t0
    cache = LayerCache.open(cache_dir)
    fits = {}
    lenses = []
    for objective, epochs in (("kl", settings["lens_epochs"]), ("least_squares", 1)):
        t0 = time.perf_counter()
        lens = TunedLens(objective=objective, epochs=epochs, progress=False).fit(cache, "train")
        fits[objective] = {"seconds": time.perf_counter() - t0, "train_tokens": lens.n_tokens_,
                           "loss_history": getattr(lens, "history_", None)}
        lenses.append(lens)
    scores = {**lenses[0].score(cache, "test"), **lenses[1].score(cache, "test")}
    return {"model": trained, "extract_s": extract_s, "fits": fits,
            "scores": {name: s.to_json() for name, s in scores.items()}}


def matmul_rates(tokens: int, width: int, vocab: int, repeats: int = 5, *, device: str = "cpu",
                 dtype: str = "float32") -> dict:
    """GFLOP/s of ``device`` on the fit's two matmul shapes in ``dtype``: states (b, D) x unembedding^T (D, V), and
    the backward's (b, V) x (V, D); best of ``repeats``."""
    import torch

    kind = getattr(torch, dtype)
    h, w, g = (torch.randn(*shape, device=device).to(kind) for shape in ((tokens, width), (vocab, width),
                                                                         (tokens, vocab)))
    rates = {}
    for name, run in (("forward", lambda: h @ w.T), ("backward", lambda: g @ w)):
        run()
        best = math.inf
        for _ in range(repeats):
            synchronize(device)
            t0 = time.perf_counter()
            run()
            synchronize(device)
            best = min(best, time.perf_counter() - t0)
        rates[name] = 2 * tokens * width * vocab / best / 1e9
    return rates


def synchronize(device: str) -> None:
    """Wait for ``device``'s queued work (a GPU's kernels run asynchronously), so that a clock around it is true."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def random_decoder_cache(data: Path, folder: Path, layers: int, width: int, vocab: int, tokens: int, *,
                         device: str = "auto"):
    """A Llama-shaped decoder with random weights (the fit's time does not depend on them), saved into ``folder``, and
    its cache of about ``tokens`` tokens of AG News test headlines extracted on ``device``: (cache, seconds)."""
    import torch
    import transformers

    from layercache import LayerCache, extract

    model_dir = folder / "random-decoder"
    model_dir.mkdir(parents=True, exist_ok=True)
    make_tokenizer(texts(data)[:2000], 1024, model_dir)  # ids below 1,024: any vocabulary reads them
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                                      intermediate_size=width * 8 // 3, num_attention_heads=max(1, width // 64),
                                      num_key_value_heads=max(1, width // 192), max_position_embeddings=256,
                                      tie_word_embeddings=True)
    transformers.LlamaForCausalLM(config).save_pretrained(model_dir)
    lines = [line.split("\t")[0] for line in (data / "agnews/test.tsv").read_text().splitlines()]
    text_file = folder / "speed.tsv"
    words = tokens // 40 + 1  # about 40 tokens a headline
    text_file.write_text("text\n" + "".join(f"{t.replace(chr(9), ' ')}\n" for t in lines[:words]))
    t0 = time.perf_counter()
    extract(str(model_dir), str(text_file), out=folder / "random-cache", no_labels=True, progress=False,
            device=device, overwrite=True)
    return LayerCache.open(folder / "random-cache"), time.perf_counter() - t0


def timed_fit(cache, rates: dict, *, tokens: int, batch_tokens: int = BATCH_TOKENS, device: str = "cpu",
              logits_dtype: str = "float32") -> tuple:
    """One epoch of the KL fit on ``tokens`` tokens of ``cache``, against its matmul bound at ``rates`` (GFLOP/s of
    the two shapes, :func:`matmul_rates`): (the fitted lens, its figures).

    Per token and translated layer the fit computes the logits (``2 D V`` FLOPs) and, backward, the gradient of the
    states (``2 D V``; the unembedding is frozen), and per token the final distribution once (``2 D V``)."""
    from layercache.depth import TunedLens

    D, V = cache.manifest.model.hidden_size, cache.lens_weights().vocab_size
    lens = TunedLens(epochs=1, batch_tokens=batch_tokens, max_tokens=tokens, device=device,
                     logits_dtype=logits_dtype, progress=False)
    t0 = time.perf_counter()
    lens.fit(cache, "train")  # the translators come back to the CPU at the end: the device has finished
    fit_s = time.perf_counter() - t0
    fitted_tokens, translated = lens.n_tokens_, len(lens.positions_)
    flops_forward = 2 * D * V * fitted_tokens * (translated + 1)  # each layer's logits, and the final distribution's
    flops_backward = 2 * D * V * fitted_tokens * translated  # each layer's state gradient
    bound_s = flops_forward / (rates["forward"] * 1e9) + flops_backward / (rates["backward"] * 1e9)
    return lens, {"tokens": fitted_tokens, "translated": translated, "fit_s": fit_s, "matmul_gflops": rates,
                  "bound_s": bound_s, "bound_ratio": fit_s / bound_s,
                  "tflop": (flops_forward + flops_backward) / 1e12}


def speed(data: Path, folder: Path, settings: dict, bf16: bool = False) -> dict:
    """One epoch of the KL fit on a random decoder of the given shape, against its matmul bound (``bf16``: beside it,
    one with bfloat16 logits, against the bfloat16 matmuls' bound)."""
    L, D, V = settings["speed_layers"], settings["speed_width"], settings["speed_vocab"]
    cache, extract_s = random_decoder_cache(data, folder, L, D, V, settings["speed_tokens"])
    _, fit = timed_fit(cache, matmul_rates(BATCH_TOKENS, D, V), tokens=settings["speed_tokens"])
    out = {"shape": {"layers": L, "width": D, "vocab": V}, "extract_s": extract_s, **fit}
    if bf16:
        _, out["bfloat16"] = timed_fit(cache, matmul_rates(BATCH_TOKENS, D, V, dtype="bfloat16"),
                                       tokens=settings["speed_tokens"], logits_dtype="bfloat16")
    return out


def check(results: dict, quick: bool) -> list[str]:
    """What must hold: every lens scored every layer, the final layer's KL is 0; on the full run, the tuned lens
    below the logit lens at every layer but the last and falling with depth, and the fit within 2x its bound."""
    failed = []
    if "curve" in results:
        scores = results["curve"]["scores"]
        for name, s in scores.items():
            if s["kl"][-1] != 0.0 or sum(s["depth_counts"]) != s["n_tokens"]:
                failed.append(f"{name} lens: the last layer's KL is not 0, or the depth counts miss tokens")
        tuned, logit = scores["tuned"]["kl"][:-1], scores["logit"]["kl"][:-1]
        if not quick and not all(t < g for t, g in zip(tuned, logit)):
            failed.append("the tuned lens is not below the logit lens at every layer but the last")
        if not quick and not all(a >= b for a, b in zip(tuned, tuned[1:])):
            failed.append("the tuned lens's KL does not fall with depth")
    if "speed" in results and not quick and results["speed"]["bound_ratio"] > TARGET_BOUND_RATIO:
        failed.append(f"the KL fit took {results['speed']['bound_ratio']:.1f}x its matmul bound "
                      f"(target {TARGET_BOUND_RATIO:.0f}x)")
    return failed


def tables(results: dict) -> dict[str, str]:
    """Markdown tables for ``render.py``: ``curve`` (KL and bits per layer of each lens) and ``speed``."""
    out = {}
    if "curve" in results:
        c = results["curve"]
        scores = c["scores"]
        names = scores["logit"]["layer_names"]
        rows = ["| layer | KL logit | KL tuned | KL linear | bits logit | bits tuned | bits linear |",
                "|---|---|---|---|---|---|---|"]
        for i, name in enumerate(names):
            rows.append(f"| {name} | " + " | ".join(f"{scores[k]['kl'][i]:.3f}" for k in ("logit", "tuned", "linear"))
                        + " | " + " | ".join(f"{scores[k]['cross_entropy_bits'][i]:.2f}"
                                             for k in ("logit", "tuned", "linear")) + " |")
        m = c["model"]
        out["curve"] = "\n".join(rows) + (
            f"\n\nGPT-2 of {m['parameters']:,} parameters trained here for {m['seconds']:.0f} s ({m['steps']:,} steps, "
            f"{m['tokens_seen']:,} tokens; final loss {m['final_loss_nats']:.2f} nats); lenses fitted on "
            f"{c['fits']['kl']['train_tokens']:,} tokens of AG News test headlines ({c['fits']['kl']['seconds']:.0f} s "
            f"tuned, {c['fits']['least_squares']['seconds']:.1f} s linear) and scored on "
            f"{scores['logit']['n_tokens']:,} others. KL in nats to the final layer's distribution, bits per "
            "next token.\n")
    if "speed" in results:
        s = results["speed"]
        shape = s["shape"]
        out["speed"] = (
            "| decoder | tokens | KL fit, 1 epoch | matmul bound | ratio | matmul GFLOP/s (forward, backward) |\n"
            "|---|---|---|---|---|---|\n"
            f"| {shape['layers']} layers x {shape['width']}, vocabulary {shape['vocab']:,} (random) | "
            f"{s['tokens']:,} | "
            f"{s['fit_s']:.1f} s | {s['bound_s']:.1f} s ({s['tflop']:.1f} TFLOP) | **{s['bound_ratio']:.2f}x** | "
            f"{s['matmul_gflops']['forward']:.0f}, {s['matmul_gflops']['backward']:.0f} |\n")
        if "bfloat16" in s:  # asked for (--bf16, and --quick): the recorded run has none, so its table is unchanged
            b = s["bfloat16"]
            out["speed"] += (f"| the same, bfloat16 logits | {b['tokens']:,} | {b['fit_s']:.1f} s | "
                             f"{b['bound_s']:.1f} s | **{b['bound_ratio']:.2f}x** | "
                             f"{b['matmul_gflops']['forward']:.0f}, {b['matmul_gflops']['backward']:.0f} |\n")
    return out


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``compare.py`` compares them)."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    if "curve" in results:
        scores = results["curve"]["scores"]
        out["tuned_mean_kl"] = sum(scores["tuned"]["kl"][:-1]) / max(1, len(scores["tuned"]["kl"]) - 1)
        out["logit_mean_kl"] = sum(scores["logit"]["kl"][:-1]) / max(1, len(scores["logit"]["kl"]) - 1)
        out["tuned_fit_s"] = results["curve"]["fits"]["kl"]["seconds"]
    if "speed" in results:
        out["speed_fit_s"] = results["speed"]["fit_s"]
        out["speed_bound_ratio"] = results["speed"]["bound_ratio"]
        if "bfloat16" in results["speed"]:
            out["speed_bf16_fit_s"] = results["speed"]["bfloat16"]["fit_s"]
            out["speed_bf16_bound_ratio"] = results["speed"]["bfloat16"]["bound_ratio"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes and a 5-second model: the mechanics")
    parser.add_argument("--only", choices=("curve", "speed"), default=None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--train-seconds", type=float, default=None, help="the GPT-2's training time (default 180)")
    parser.add_argument("--bf16", action="store_true",
                        help="also fit with bfloat16 logits (always in --quick; slow on a CPU without bfloat16 units)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the models and caches here")
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default benchmarks/results/lens.json)")
    args = parser.parse_args()
    quiet_transformers()
    settings = dict(QUICK if args.quick else FULL)
    if args.train_seconds is not None:
        settings["train_seconds"] = args.train_seconds
    started = time.perf_counter()
    results: dict = {"meta": {**machine_meta(args.quick, "gpt2 trained here; random 30x576 decoder", "cpu"),
                              "settings": settings}}
    with work_folder(args.workdir, "lc-lens-") as folder:
        if args.only in (None, "curve"):
            results["curve"] = curve(args.data, folder, QUICK if args.quick else settings)
        if args.only in (None, "speed"):
            results["speed"] = speed(args.data, folder, settings, bf16=args.bf16 or args.quick)
    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["total_s"] = time.perf_counter() - started
    results["figures"] = figures(results)
    failed = check(results, args.quick)
    results["checks_failed"] = failed
    for name, table in tables(results).items():
        print(f"\n{name}:\n{table}")
    print_table("headline figures", ["figure", "value"], [[k, v] for k, v in results["figures"].items()], digits=3)
    write_results(results, args.out or HERE / "results" / ("lens-quick.json" if args.quick else "lens.json"))
    if failed:
        print("\nFAILED:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
