"""Peak memory and time of prediction against document length, both models: segmented documents or raw text.

Run: python benchmarks/memory/inference_memory.py [--input documents] [--lengths 500,1000,2000,4000,8000,16000,32000]
         [--baseline-dir DIR] [--incremental-dir DIR]
     python benchmarks/memory/inference_memory.py --input text --lengths 1000,5000,20000 [--baseline-dir DIR ...]

Each (model, length) runs in a fresh Python process that loads the model as `predict` loads it
(``for_prediction``), then predicts once; the measure is the prediction's peak resident set size: the high-water
mark restarted just before predicting (Linux's ``/proc/self/clear_refs``, then ``VmHWM``; elsewhere the process's
``ru_maxrss``, which the import and the load may hide it under), in full and as the increase over the resident size
just before predicting (weights and libraries loaded), with the seconds the prediction took.

With glibc each (model, length) runs twice: with the allocator as `predict` sets it (by default, on 16 GiB or more,
freed blocks kept in the heap for reuse: ``runtime.devices.keep_host_memory``), whose resident set holds the heap's
free blocks too, and again with every block of 256 KB or more mapped for itself and handed back when freed
(``COREF_PIPELINE_KEEP_HOST_MEMORY=0`` and ``GLIBC_TUNABLES`` ``mmap_threshold`` and ``trim_threshold``): the
**held** peak, what the prediction's tensors occupy at once, which the kept heap's growth cannot hide or inflate
(slower: each large block is faulted in anew).

* ``--input documents`` (the default): documents of about each length in subtokens, made by concatenating the
  shared LitBank test and train documents (segmented at the model's segment length) and cutting at a segment
  boundary; ``CorefModel.predict_tensors`` on each. Writes ``data/08_reporting/memory.json`` and ``memory.png``
  (a DVC plot).
* ``--input text``: LitBank's words as plain text of about each length in words (sentences joined by a space,
  documents by a blank line, cut after the sentence that reaches it); ``CorefModel.predict(text)``, the sentence
  and word splitting timed apart (after a warm-up that loads NLTK and pySBD). Writes
  ``data/benchmarks/inference_memory_text.json``.

Models: ``--baseline-dir`` (default: the LitBank benchmark's, ``data/benchmarks/baseline_litbank/run/best``) and
``--incremental-dir`` (default: ``data/benchmarks/incremental_litbank/run/best`` when there is one, else the
incremental model initialised from the baseline: memory depends on the sizes, not on training).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time

from benchmarks.common import LITBANK, REPORTING, RESULTS, host, require_litbank, write_results
from coref_pipeline.runtime.devices import HELD_BLOCK_BYTES, held_memory_environment


def concatenated_document(documents: list[dict], length: int) -> dict:
    """One jsonlines document of whole segments, about ``length`` subtokens, from consecutive documents."""
    merged = {"doc_key": f"nw/concatenated_{length}", "sentences": [], "speakers": [], "clusters": []}
    merged["sentence_map"], merged["subtoken_map"] = [], []
    tokens = sentence_offset = word_offset = 0
    for document in documents:
        for index, segment in enumerate(document["sentences"]):
            if tokens >= length:
                break
            start = sum(len(s) for s in document["sentences"][:index])
            stop = start + len(segment)
            merged["sentences"].append(segment)
            merged["speakers"].append(document["speakers"][index])
            merged["sentence_map"] += [s + sentence_offset for s in document["sentence_map"][start:stop]]
            merged["subtoken_map"] += [w + word_offset for w in document["subtoken_map"][start:stop]]
            tokens += len(segment)
        sentence_offset = merged["sentence_map"][-1] + 1
        word_offset = merged["subtoken_map"][-1] + 1
        if tokens >= length:
            break
    if tokens < length:
        raise SystemExit(f"the corpus has only {tokens} subtokens; cannot make a document of {length}")
    return merged


def litbank_text(num_words: int) -> str:
    """About ``num_words`` words of LitBank as plain text (whole sentences)."""
    from coref_pipeline.formats.conll import read_conll

    paragraphs, count = [], 0
    for name in ("train.conll", "test.conll"):
        for document in read_conll(LITBANK / name):
            sentences: dict[int, list[str]] = {}
            for word, sentence in zip(document.words, document.sentence_ids, strict=True):
                sentences.setdefault(sentence, []).append(word)
            kept = []
            for words in sentences.values():
                kept.append(" ".join(words))
                count += len(words)
                if count >= num_words:
                    break
            paragraphs.append(" ".join(kept))
            if count >= num_words:
                return "\n\n".join(paragraphs)
    raise SystemExit(f"LitBank has only {count} words")


def reset_peak_resident() -> bool:
    """Restart this process's resident high-water mark at its current resident set (Linux: ``/proc/self/clear_refs``
    5), so that the peak read after predicting is the prediction's own and not the import's or the load's; False
    where the system cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def peak_resident_mb(since_reset: bool) -> float:
    """The resident high-water mark in MB: since ``reset_peak_resident`` (``VmHWM``), else over the process's life."""
    if since_reset:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(model_dir: str, input_path: str) -> None:
    """Load, then predict a document (``.json``) or a text (``.txt``); print the figures as JSON (a fresh process)."""
    import torch

    from coref_pipeline.formats.text import split_text
    from coref_pipeline.runtime.devices import resident_bytes
    from coref_pipeline.serving.coref_model import CorefModel, DocumentTooLongError

    torch.set_grad_enabled(False)
    path = Path(input_path)
    figures: dict[str, object] = {}
    if path.suffix == ".txt":
        trained = CorefModel.load(model_dir, max_inference_subtokens=10**6, for_prediction=True)  # as `predict`
        text = path.read_text(encoding="utf-8")
        split_text("Warm up. The tools load once.")
        before = resident_bytes() / 2**20
        reset = reset_peak_resident()
        started = time.perf_counter()
        split = split_text(text)
        figures["split_seconds"] = time.perf_counter() - started
        started = time.perf_counter()
        result = trained.predict(text)
        seconds = time.perf_counter() - started
        figures.update(words=len(split.words), sentences=len(split.sentence_ends))
        figures["subtokens"] = len(result.document["subtoken_map"]) if result.document else 0
        clusters = result.clusters
    else:
        trained = CorefModel.load(model_dir, for_prediction=True)  # as `predict` loads it
        tensors = trained.tensorize(json.loads(path.read_text()))
        try:
            trained.check_length(tensors)
        except DocumentTooLongError as error:  # the baseline past max_inference_subtokens: a row that says so
            print(json.dumps({"subtokens": tensors.num_tokens, "refused": str(error).split(" (")[0]}))
            return
        before = resident_bytes() / 2**20
        reset = reset_peak_resident()
        started = time.perf_counter()
        clusters = trained.predict_tensors(tensors)
        seconds = time.perf_counter() - started
        figures["subtokens"] = tensors.num_tokens
    peak = peak_resident_mb(reset)
    figures["peak_since_predict"] = reset  # False: the process's peak (ru_maxrss), load included
    figures.update(
        peak_rss_mb=peak,
        rss_before_predict_mb=before,
        increase_mb=peak - before,
        seconds=seconds,
        clusters=len(clusters),
    )
    print(json.dumps(figures))


def run_worker(model: str, length: int, directory: Path, path: Path, environment: dict[str, str] | None) -> dict:
    """One worker process's figures (``environment``: the held measure's, or None for this process's)."""
    command = [sys.executable, __file__, "--worker", str(directory), str(path)]
    result = subprocess.run(command, capture_output=True, text=True, env=environment)
    if result.returncode != 0:
        sys.exit(f"{model} at {length} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def incremental_dir(baseline_dir: Path, requested: Path | None, scratch: Path) -> Path:
    if requested is not None:
        return requested
    trained = RESULTS / "incremental_litbank" / "run" / "best"
    if (trained / "coref_config.json").is_file():
        return trained
    from coref_pipeline.models.config import IncrementalConfig
    from coref_pipeline.serving.coref_model import CorefModel
    from coref_pipeline.training import build_incremental

    baseline = CorefModel.load(baseline_dir)
    model = build_incremental(baseline, IncrementalConfig.from_baseline(baseline.config, {}))
    model.save(scratch / "incremental")
    return scratch / "incremental"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4))
    for model, marker, color in (("baseline", "o", "tab:blue"), ("incremental", "s", "tab:orange")):
        for key, style, label in (("peak_rss_mb", "-", "resident"), ("held_peak_rss_mb", "--", "held")):
            points = sorted((r["subtokens"], r[key]) for r in rows if r["model"] == model and key in r)
            if points:
                axis.plot(
                    [p[0] for p in points],
                    [p[1] / 1024 for p in points],
                    style,
                    marker=marker,
                    color=color,
                    label=f"{model}, {label}",
                )
    axis.set_xscale("log", base=2)
    axis.set_xlabel("document length (subtokens)")
    axis.set_ylabel("peak resident memory (GiB)")
    axis.set_title("Inference memory against document length (CPU)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", choices=["documents", "text"], default="documents")
    parser.add_argument(
        "--lengths", help="subtokens (documents; default 500,...,32000) or words (text; 1000,5000,20000)"
    )
    parser.add_argument("--baseline-dir", type=Path, default=RESULTS / "baseline_litbank" / "run" / "best")
    parser.add_argument("--incremental-dir", type=Path, default=None)
    parser.add_argument("--worker", nargs=2, metavar=("MODEL_DIR", "INPUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    require_litbank()
    if not (args.baseline_dir / "coref_config.json").is_file():
        sys.exit(f"no baseline model at {args.baseline_dir}: run benchmarks/training/baseline.py first, or name one")
    text = args.input == "text"
    lengths = [
        int(x)
        for x in (args.lengths or ("1000,5000,20000" if text else "500,1000,2000,4000,8000,16000,32000")).split(",")
    ]
    from benchmarks.common import segmented_litbank
    from coref_pipeline.serving.coref_model import CorefModel

    if not text:
        config = CorefModel.load(args.baseline_dir).config
        segmented = segmented_litbank(config.tokenizer_name, config.max_segment_len)
        corpus = segmented.documents("test", config.max_segment_len)
        corpus += segmented.documents("train", config.max_segment_len)
    rows = []
    held = held_memory_environment(os.environ)
    print(f"host: {host()}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        models = {
            "baseline": args.baseline_dir,
            "incremental": incremental_dir(args.baseline_dir, args.incremental_dir, scratch),
        }
        for length in lengths:
            path = scratch / (f"text_{length}.txt" if text else f"document_{length}.json")
            path.write_text(litbank_text(length) if text else json.dumps(concatenated_document(corpus, length)))
            for model, directory in models.items():
                row = {"model": model, "target_length": length, **run_worker(model, length, directory, path, None)}
                if "refused" in row:
                    rows.append(row)
                    print(f"{model:<12} {row['subtokens']:>6} subtokens: refused: {row['refused']}", flush=True)
                    continue
                if held is not None:
                    figures = run_worker(model, length, directory, path, held)
                    row.update(held_peak_rss_mb=figures["peak_rss_mb"], held_increase_mb=figures["increase_mb"])
                    row["held_seconds"] = figures["seconds"]
                rows.append(row)
                split = f", splitting {row['split_seconds']:.1f} s" if text else ""
                held_figure = f"; held {row['held_peak_rss_mb']:>6.0f} MB" if held is not None else ""
                print(
                    f"{model:<12} {row['subtokens']:>6} subtokens: peak RSS {row['peak_rss_mb']:>8.0f} MB "
                    f"(+{row['increase_mb']:.0f} MB while predicting){held_figure}, {row['seconds']:.1f} s{split}",
                    flush=True,
                )
    summary: dict[str, object] = {
        "measure": (
            "peak resident set size while predicting (VmHWM restarted before it), a fresh process per (model, length)"
            if all(row.get("peak_since_predict", True) for row in rows)
            else "peak resident set size of a fresh process per (model, length), ru_maxrss: the high-water mark "
            "could not be restarted before predicting here, so the import's and the load's peak may hide it"
        ),
        "held_measure": (
            f"the same with every block of {HELD_BLOCK_BYTES // 1024} KB or more handed back when freed "
            "(COREF_PIPELINE_KEEP_HOST_MEMORY=0, GLIBC_TUNABLES mmap_threshold and trim_threshold): held_peak_rss_mb"
            if held is not None
            else "not measured: the allocator is not glibc's"
        ),
        "input": args.input,
        "rows": rows,
    }
    if text:
        write_results(summary, RESULTS / "inference_memory_text.json")
        return
    for key, label in (("peak_rss_mb", ""), ("held_peak_rss_mb", "_held")):
        for model in ("incremental", "baseline"):
            peaks = {r["target_length"]: r[key] for r in rows if r["model"] == model and key in r}
            for longer in (16000, 32000):
                if 1000 in peaks and longer in peaks:
                    name = f"{model}{label}_{longer // 1000}k_over_1k"
                    summary[name] = peaks[longer] / peaks[1000]
                    print(f"{name}: {summary[name]:.3f}")
    write_results(summary, REPORTING / "memory.json")
    plot(rows, REPORTING / "memory.png")
    print(f"wrote {REPORTING / 'memory.png'}")


if __name__ == "__main__":
    main()
