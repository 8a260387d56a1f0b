"""Benchmark of the coreference scorer on LitBank train (fold 0) with a perturbed response.

Usage::

    python benchmarks/preprocessing/score.py [--seed 13] [--repeats 3] [--reference-scorer /tmp/refscorer/scorer.pl]
        [--keep-response PATH] [--small-documents 400]

The key is ``../shared/corpora/litbank/train.conll`` (beside the repository).
The response is built deterministically from it: about 10% of the mentions
moved to another cluster, 5% dropped and 5% spurious mentions added (new spans,
never repeating a mention and never crossing a mention of their own cluster, so
the file reads back exactly), written with ``write_conll_response``.

Timed (best of ``--repeats``): reading one file, scoring from the two files end
to end, and scoring only (clusters already read), for MUC + B³ + CEAF-e and for
all six metrics. Then the ``coref-pipeline score`` command as a whole process
(start-up and imports included; median and best of ``--repeats``, at least 5),
on that pair and on a generated small pair: ``--small-documents`` documents of
two sentences each and a response perturbed the same way. The command is the
``coref-pipeline`` on PATH; when that is not the interpreter's own script (a
pyenv shim, say), the interpreter's own script is timed too. With
``--reference-scorer`` (the reference ``scorer.pl`` v8.01), the Perl scorer is
run once per metric and its counts are compared with ours.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import logging
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence

from benchmarks.common import ROOT
from coref_pipeline.evaluation import METRIC_NAMES, CorpusScores, read_clusters, score_documents, score_files
from coref_pipeline.files import atomic_write_text
from coref_pipeline.formats.conll import format_conll_document, read_conll, write_conll_response

DEFAULT_KEY = ROOT.parent / "shared" / "corpora" / "litbank" / "train.conll"
CONLL_METRICS = ("muc", "bcub", "ceafe")
PERL_METRICS = ("muc", "bcub", "ceafe", "ceafm", "blanc")

Span = tuple[int, int]


def crosses(span: Span, other: Span) -> bool:
    """Whether two spans overlap without one containing the other."""
    (start, end), (other_start, other_end) = span, other
    return start < other_start <= end < other_end or other_start < start <= other_end < end


def fits(span: Span, cluster: list[Span]) -> bool:
    return all(not crosses(span, member) for member in cluster)


def perturb(
    clusters: list[list[Span]], num_words: int, rng: random.Random, move: float, drop: float, add: float
) -> list[list[Span]]:
    """A response from key clusters: some mentions moved to other clusters, some dropped, some invented."""
    response = [list(cluster) for cluster in clusters]
    mentions = [(index, span) for index, cluster in enumerate(response) for span in cluster]
    num_mentions = len(mentions)
    chosen = rng.sample(mentions, round((move + drop) * num_mentions))
    num_moved = round(move * num_mentions)
    for index, span in chosen[num_moved:]:  # dropped
        response[index].remove(span)
    for index, span in chosen[:num_moved]:  # moved to another cluster it does not cross
        targets = [target for target in range(len(response)) if target != index and fits(span, response[target])]
        if targets:
            response[index].remove(span)
            response[rng.choice(targets)].append(span)
    taken = {span for cluster in clusters for span in cluster}
    added = 0
    while added < round(add * num_mentions):
        start = rng.randrange(num_words)
        span = (start, min(num_words - 1, start + rng.choice((0, 0, 1, 2))))
        if span in taken:
            continue
        if rng.random() < 0.5 or not response:
            response.append([span])  # a new singleton
        else:
            target = rng.randrange(len(response))
            if not fits(span, response[target]):
                continue
            response[target].append(span)
        taken.add(span)
        added += 1
    return [cluster for cluster in response if cluster]


def best_time(function: Callable[[], object], repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def write_small_corpus(key_path: Path, response_path: Path, num_documents: int, rng: random.Random) -> int:
    """A key of ``num_documents`` two-sentence documents and its perturbed response; returns the number of words."""
    vocabulary = [f"w{index}" for index in range(500)]
    documents, response_clusters, num_words = [], {}, 0
    for number in range(num_documents):
        sentences = [[rng.choice(vocabulary) for _ in range(rng.randint(8, 20))] for _ in range(2)]
        length = sum(map(len, sentences))
        clusters: list[list[Span]] = []
        taken: set[Span] = set()
        for _ in range(rng.randint(1, 4)):
            cluster: list[Span] = []
            for _ in range(rng.randint(1, 4)):
                sentence = rng.randrange(2)
                offset = len(sentences[0]) if sentence else 0
                start = offset + rng.randrange(len(sentences[sentence]))
                span = (start, min(offset + len(sentences[sentence]) - 1, start + rng.choice((0, 0, 1, 2))))
                if span not in taken and fits(span, cluster):
                    cluster.append(span)
                    taken.add(span)
            if cluster:
                clusters.append(cluster)
        doc_key = f"small/doc_{number:04d}_0"
        documents.append(format_conll_document(doc_key, sentences, clusters))
        response_clusters[doc_key] = perturb(clusters, length, rng, move=0.10, drop=0.05, add=0.05)
        num_words += length
    atomic_write_text(key_path, "".join(documents))
    write_conll_response(key_path, response_clusters, response_path)
    return num_words


def score_commands() -> list[tuple[str, list[str]]]:
    """The ``coref-pipeline`` commands to time: the one on PATH, and this interpreter's own script if different."""
    own = Path(sys.executable).with_name("coref-pipeline")
    on_path = shutil.which("coref-pipeline")
    commands = []
    if on_path:
        commands.append((on_path, [on_path]))
    if own.is_file() and (not on_path or Path(on_path).resolve() != own.resolve()):
        commands.append((str(own), [str(own)]))
    return commands or [(f"{sys.executable} -m coref_pipeline", [sys.executable, "-m", "coref_pipeline"])]


def process_seconds(command: Sequence[str], repeats: int) -> tuple[float, float]:
    """Median and best wall-clock seconds of a whole process (output discarded; it must succeed)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def time_score_command(pairs: Sequence[tuple[str, Path, Path, Sequence[str]]], repeats: int) -> None:
    """Print the median and best time of ``coref-pipeline score KEY RESPONSE --metrics ...`` per pair."""
    runs = max(repeats, 5)
    print(f"coref-pipeline score as a whole process (start-up and imports included), median / best of {runs}, s:")
    for label, command in score_commands():
        print(f"  {label}")
        for name, key, response, metrics in pairs:
            argv = [*command, "score", str(key), str(response), "--metrics", ",".join(metrics)]
            median, best = process_seconds(argv, runs)
            print(f"    {name:44} {median:.3f} / {best:.3f}")


PERL_COUNTS_RE = re.compile(r"Recall: \(([^ ]+) / ([^ )]+)\).*Precision: \(([^ ]+) / ([^ )]+)\)")
PERL_PERCENT_RE = re.compile(r"Recall: \([^)]*\) ([\d.]+)%\s+Precision: \([^)]*\) ([\d.]+)%\s+F1: ([\d.]+)%")


def run_perl(scorer: Path, metric: str, key: Path, response: Path) -> tuple[float, list[list[float]], list[float]]:
    """Seconds, every counts line (as numbers) and the printed final R/P/F1 (%) of one ``scorer.pl`` run."""
    start = time.perf_counter()
    completed = subprocess.run(
        ["perl", str(scorer), metric, str(key), str(response), "none"], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    lines = [line for line in completed.stdout.splitlines() if "Recall: (" in line]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"scorer.pl {metric} failed: {completed.stderr.strip() or completed.stdout[-500:]}")
    counts = [[float(value) for value in PERL_COUNTS_RE.search(line).groups()] for line in lines]
    printed = [float(value) for value in PERL_PERCENT_RE.search(lines[-1]).groups()]
    return seconds, counts, printed


def truncated_percent(value: float) -> float:
    """A fraction as the reference prints it: ``int(value * 10000) / 100``."""
    return int(value * 10000) / 100


def raw_counts(scores: CorpusScores, metric: str) -> list[float]:
    """Our pooled counts in the order perl prints them (BLANC: coreference then non-coreference links)."""
    parts = (scores[metric].coreference, scores[metric].non_coreference) if metric == "blanc" else (scores[metric],)
    fields = ("recall_num", "recall_den", "precision_num", "precision_den")
    return [float(getattr(part, field)) for part in parts for field in fields]


def compare_with_perl(scorer: Path, key: Path, response: Path, ours: CorpusScores) -> bool:
    """Run perl once per metric; True if its printed R/P/F1 and raw counts equal ours."""
    print("\nreference scorer v8.01 (perl) vs ours on the same pair, R / P / F1 in % as perl prints them:")
    all_agree = True
    perl_conll_seconds = 0.0
    perl_mentions: list[float] = []
    for metric in PERL_METRICS:
        seconds, counts, perl_rpf = run_perl(scorer, metric, key, response)
        perl_conll_seconds += seconds if metric in CONLL_METRICS else 0.0
        if metric == "muc":
            perl_mentions = counts[-2]  # "Identification of Mentions" line
        perl_counts = counts[-3] + counts[-2] if metric == "blanc" else counts[-1]
        our_counts = raw_counts(ours, metric)
        counts_agree = all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(our_counts, perl_counts, strict=True))
        our_rpf = [truncated_percent(value) for value in (ours[metric].recall, ours[metric].precision, ours[metric].f1)]
        agree = counts_agree and our_rpf == perl_rpf
        all_agree &= agree
        print(
            f"  {metric:6} perl {' / '.join(f'{v:6.2f}' for v in perl_rpf)}   "
            f"ours {' / '.join(f'{v:6.2f}' for v in our_rpf)}"
            f"   raw counts {'equal' if counts_agree else 'DIFFER'}   perl {seconds:.2f} s"
        )
    mentions = ours.mentions
    mentions_agree = perl_mentions == [
        mentions.recall_num,
        mentions.recall_den,
        mentions.precision_num,
        mentions.precision_den,
    ]
    all_agree &= mentions_agree
    print(f"  mention identification counts {'equal' if mentions_agree else 'DIFFER'}: {perl_mentions}")
    print(f"  perl muc + bcub + ceafe (three runs, reading included): {perl_conll_seconds:.2f} s")
    print("  all agree" if all_agree else "  DISAGREEMENT")
    return all_agree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key", type=Path, default=DEFAULT_KEY)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-scorer", type=Path, help="path of the reference scorer.pl (run with perl)")
    parser.add_argument("--keep-response", type=Path, help="also copy the perturbed response here")
    parser.add_argument(
        "--small-documents", type=int, default=400, help="documents of the small generated pair (default 400)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    if not args.key.is_file():
        print(
            f"benchmark key file not found: {args.key} (expected LitBank at ../shared/corpora/litbank/)",
            file=sys.stderr,
        )
        return 2
    documents = read_conll(
        args.key, min_columns=1, strict_mentions=False, bracket_order="reference", allow_cross_sentence=True
    )
    rng = random.Random(args.seed)
    response_clusters = {
        document.doc_key: perturb(document.clusters, len(document.words), rng, move=0.10, drop=0.05, add=0.05)
        for document in documents
    }
    num_key = sum(len(cluster) for document in documents for cluster in document.clusters)
    num_response = sum(len(cluster) for clusters in response_clusters.values() for cluster in clusters)
    num_words = sum(len(document.words) for document in documents)

    with tempfile.TemporaryDirectory() as folder:
        response_path = Path(folder) / "response.conll"
        write_conll_response(args.key, response_clusters, response_path)
        if args.keep_response:
            shutil.copyfile(response_path, args.keep_response)
        read_back = read_clusters(response_path)
        for doc_key, clusters in response_clusters.items():
            assert sorted(map(sorted, clusters)) == sorted(map(sorted, read_back[doc_key])), doc_key

        print(f"key: {args.key} ({len(documents)} documents, {num_words} words, {num_key} mentions)")
        print(f"response: seed {args.seed}, {num_response} mentions (10% moved, 5% dropped, 5% added)")
        print(f"best of {args.repeats} runs, seconds:")
        read_seconds, _ = best_time(
            lambda: read_conll(
                args.key, min_columns=1, strict_mentions=False, bracket_order="reference", allow_cross_sentence=True
            ),
            args.repeats,
        )
        read_clusters_seconds, key = best_time(lambda: read_clusters(args.key), args.repeats)
        _, response = best_time(lambda: read_clusters(response_path), 1)
        print(f"  read_conll (one file, the key)                {read_seconds:.3f}")
        print(f"  read_clusters (read_conll + reference order)  {read_clusters_seconds:.3f}")
        results = {}
        for label, metrics in (("(a) muc+bcub+ceafe", CONLL_METRICS), ("(b) all six metrics", METRIC_NAMES)):
            end_to_end, scores = best_time(
                lambda metrics=metrics: score_files(args.key, response_path, metrics), args.repeats
            )
            scoring_only, _ = best_time(lambda metrics=metrics: score_documents(key, response, metrics), args.repeats)
            results[label] = scores
            print(f"  {label:22} end to end {end_to_end:.3f}   scoring only {scoring_only:.3f}")
        scores = results["(b) all six metrics"]
        print("scores (%):")
        for name in ("mentions", *METRIC_NAMES):
            counts = scores.mentions if name == "mentions" else scores[name]
            print(
                f"  {name:8} R {100 * counts.recall:6.2f}  P {100 * counts.precision:6.2f}  F1 {100 * counts.f1:6.2f}"
            )
        print(f"  CoNLL F1 {100 * scores.conll_f1:.2f}")

        small_key, small_response = Path(folder) / "small_key.conll", Path(folder) / "small_response.conll"
        small_words = write_small_corpus(small_key, small_response, args.small_documents, random.Random(args.seed))
        print(f"small pair: {args.small_documents} documents of two sentences, {small_words} words")
        time_score_command(
            [
                (f"{args.key.name} (a) muc+bcub+ceafe", args.key, response_path, CONLL_METRICS),
                (f"{args.key.name} (b) all six metrics", args.key, response_path, METRIC_NAMES),
                ("small pair (a) muc+bcub+ceafe", small_key, small_response, CONLL_METRICS),
            ],
            args.repeats,
        )

        if args.reference_scorer:
            if shutil.which("perl") is None:
                print("perl not found: no comparison with the reference scorer", file=sys.stderr)
            elif not compare_with_perl(args.reference_scorer, args.key, response_path, scores):
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
