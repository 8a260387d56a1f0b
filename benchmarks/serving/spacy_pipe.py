"""The spaCy component over many short texts: ``nlp.pipe`` (each batch predicted together) against ``nlp(text)`` on
each, in one process.

Run: python benchmarks/serving/spacy_pipe.py [--model DIR] [--texts 1000] [--batch-sizes 32 256] [--rounds 3]
     [--precision 32] [--sentencizer]

1. The texts: ``--texts`` of the 60 pronoun probes' texts, cycled (about 17 words each; ``common.probe_texts``),
   what a user running a spaCy pipeline over many short documents (messages, reviews, paragraphs) passes.
2. The pipeline: ``spacy.blank("en")`` with the ``coref_pipeline`` component on ``--model`` at ``--precision`` (its
   own sentence splitter; with ``--sentencizer``, spaCy's sentencizer before it), built once; three texts
   predicted first, so that no figure holds the model's first call.
3. ``--rounds`` rounds, the order of the settings turned one step each round: ``nlp(text)`` on each text (the peer
   configuration, one document at a time), then ``list(nlp.pipe(texts, batch_size=B))`` for each of
   ``--batch-sizes`` (the component predicts each batch through ``CorefModel.predict_many``: short documents
   grouped in the encoder's passes, up to the device's budget).
4. For each setting: the median seconds and documents/s, the ratio of documents/s to one at a time's (medians of
   the same rounds), and the texts whose clusters differ from one at a time's in the last round (in fp32 none but
   where float32's rounding tips a near tie). Then the host: ``lscpu``'s model name and torch's threads.

Figures go to stdout and to ``--out`` (default ``data/benchmarks/spacy_pipe/results.json``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import statistics
import time
from collections.abc import Callable

from benchmarks.common import RESULTS, ROOT, host, probe_texts, write_results

WARM_UP_TEXTS = 3
ONE_AT_A_TIME = "nlp(text)"


def token_clusters(doc) -> list[list[tuple[int, int]]]:
    """A doc's clusters as token spans ``(start, end)``, end inclusive."""
    return [[(span.start, span.end - 1) for span in cluster] for cluster in doc._.coref_clusters]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "06_models" / "baseline")
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 256], help="nlp.pipe's batch_size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="32")
    parser.add_argument("--sentencizer", action="store_true", help="spaCy's sentencizer before the component")
    parser.add_argument("--out", type=Path, default=RESULTS / "spacy_pipe" / "results.json")
    args = parser.parse_args()
    if not (args.model / "coref_config.json").is_file():
        sys.exit(f"no model at {args.model}: run the main job first (README, 'kedro run ...'), or give --model DIR")
    try:
        import spacy
    except ImportError:
        sys.exit("spaCy is not installed: pip install -e '.[spacy]'")
    import torch

    nlp = spacy.blank("en")
    if args.sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("coref_pipeline", config={"model": str(args.model), "precision": args.precision})
    texts = probe_texts(args.texts)
    for text in texts[:WARM_UP_TEXTS]:
        nlp(text)

    runs: dict[str, Callable[[], list]] = {ONE_AT_A_TIME: lambda: [nlp(text) for text in texts]}
    for size in args.batch_sizes:
        runs[f"nlp.pipe(batch_size={size})"] = lambda size=size: list(nlp.pipe(texts, batch_size=size))
    names = list(runs)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    clusters: dict[str, list] = {}
    for round_index in range(args.rounds):
        turn = round_index % len(names)
        for name in names[turn:] + names[:turn]:
            start = time.perf_counter()
            docs = runs[name]()
            seconds[name].append(time.perf_counter() - start)
            clusters[name] = [token_clusters(doc) for doc in docs]
            print(f"round {round_index + 1}: {name}: {seconds[name][-1]:.2f} s", flush=True)

    reference = statistics.median(seconds[ONE_AT_A_TIME])
    results = {"texts": len(texts), "precision": args.precision, "sentencizer": args.sentencizer, "settings": {}}
    print(f"\n{len(texts)} texts, precision {args.precision}, model {args.model}, {args.rounds} rounds:")
    for name in names:
        median = statistics.median(seconds[name])
        differ = sum(a != b for a, b in zip(clusters[name], clusters[ONE_AT_A_TIME], strict=True))
        results["settings"][name] = {
            "seconds": seconds[name],
            "median_s": median,
            "documents_per_s": len(texts) / median,
            "ratio_to_one_at_a_time": reference / median,
            "texts_whose_clusters_differ": differ,
        }
        print(
            f"  {name:<26} {median:7.2f} s  {len(texts) / median:7.1f} documents/s  "
            f"{reference / median:5.2f}x one at a time  clusters differ on {differ} of {len(texts)}"
        )
    results["host"] = host()
    results["threads"] = torch.get_num_threads()
    print(f"host: {results['host']}, {results['threads']} torch threads")
    write_results(results, args.out)


if __name__ == "__main__":
    main()
