"""Coreference metrics of the CoNLL-2012 reference scorer v8.01, plus LEA.

Every metric works on one document and returns raw counts (recall numerator and
denominator, precision numerator and denominator) so that a corpus score pools
them exactly as the reference does: counts are summed over documents and
recall, precision and F1 are computed once from the sums.

All metrics are computed from a :class:`ClusterOverlap`: the sizes of the key
and response clusters and, for each (key cluster, response cluster) pair that
shares mentions, how many it shares. Mentions are exact ``(start, end)`` spans;
a mention in only one side (twinless) simply shares nothing.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache, reduce
from itertools import chain, repeat

import numpy as np

logger = logging.getLogger(__name__)

Span = tuple[int, int]
Cluster = Sequence[Span]


def sum_in_order(values: Iterable[float]) -> float:
    """``values`` added left to right: the same bits on every Python. ``sum()`` of floats compensates its rounding
    since Python 3.12, so that a mean of the same floats could differ in its last bit between 3.11 and 3.13."""
    return reduce(operator.add, values, 0.0)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _harmonic_mean(recall: float, precision: float) -> float:
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


@dataclass(frozen=True)
class Counts:
    """Raw recall and precision counts of one metric; ``+`` pools them."""

    recall_num: float
    recall_den: float
    precision_num: float
    precision_den: float

    @property
    def recall(self) -> float:
        return _ratio(self.recall_num, self.recall_den)

    @property
    def precision(self) -> float:
        return _ratio(self.precision_num, self.precision_den)

    @property
    def f1(self) -> float:
        return _harmonic_mean(self.recall, self.precision)

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.recall_num + other.recall_num,
            self.recall_den + other.recall_den,
            self.precision_num + other.precision_num,
            self.precision_den + other.precision_den,
        )

    def to_dict(self) -> dict[str, float]:
        return {
            "recall_num": self.recall_num,
            "recall_den": self.recall_den,
            "precision_num": self.precision_num,
            "precision_den": self.precision_den,
            "recall": self.recall,
            "precision": self.precision,
            "f1": self.f1,
        }


@dataclass(frozen=True)
class BlancCounts:
    """BLANC's coreference-link and non-coreference-link counts; ``+`` pools them.

    Recall, precision and F1 follow the reference: the mean of the two link
    types' values (F1 is the mean of the two F1s); when the key has no
    coreference links only the non-coreference part counts, and vice versa;
    with neither, everything is 0.
    """

    coreference: Counts
    non_coreference: Counts

    def _combined(self) -> tuple[float, float, float]:
        coref, non_coref = self.coreference, self.non_coreference
        if not coref.recall_den and not non_coref.recall_den:
            return 0.0, 0.0, 0.0
        if not coref.recall_den:
            return non_coref.recall, non_coref.precision, non_coref.f1
        if not non_coref.recall_den:
            return coref.recall, coref.precision, coref.f1
        return (
            (coref.recall + non_coref.recall) / 2,
            (coref.precision + non_coref.precision) / 2,
            (coref.f1 + non_coref.f1) / 2,
        )

    @property
    def recall(self) -> float:
        return self._combined()[0]

    @property
    def precision(self) -> float:
        return self._combined()[1]

    @property
    def f1(self) -> float:
        return self._combined()[2]

    def __add__(self, other: BlancCounts) -> BlancCounts:
        return BlancCounts(self.coreference + other.coreference, self.non_coreference + other.non_coreference)

    def to_dict(self) -> dict[str, object]:
        recall, precision, f1 = self._combined()
        return {
            "coreference": self.coreference.to_dict(),
            "non_coreference": self.non_coreference.to_dict(),
            "recall": recall,
            "precision": precision,
            "f1": f1,
        }


MetricCounts = Counts | BlancCounts


@dataclass(frozen=True)
class ClusterOverlap:
    """Key and response cluster sizes and the mentions each cluster pair shares (one document).

    Only pairs sharing at least one mention are listed: ``key_index[i]`` and
    ``response_index[i]`` share ``shared[i]`` mentions.
    """

    key_sizes: np.ndarray  # [num_key_clusters] int64
    response_sizes: np.ndarray  # [num_response_clusters] int64
    key_index: np.ndarray  # [num_pairs] int64
    response_index: np.ndarray  # [num_pairs] int64
    shared: np.ndarray  # [num_pairs] int64, >= 1


def cluster_overlap(key_clusters: Sequence[Cluster], response_clusters: Sequence[Cluster]) -> ClusterOverlap:
    """Build the overlap of two clusterings from a mention -> key cluster map.

    Each side must list every span once (see ``scoring.deduplicate_mentions``);
    a repeated span raises ``ValueError``. Empty clusters are not allowed.
    """
    key_sizes = np.fromiter(map(len, key_clusters), dtype=np.int64, count=len(key_clusters))  # [num_key_clusters]
    response_sizes = np.fromiter(map(len, response_clusters), dtype=np.int64, count=len(response_clusters))
    if (key_sizes == 0).any() or (response_sizes == 0).any():
        raise ValueError("empty clusters cannot be scored; drop them first")
    num_response_clusters = len(response_sizes)
    key_cluster_ids = np.repeat(np.arange(len(key_sizes)), key_sizes).tolist()  # [num_key_mentions]
    key_cluster_of = dict(zip(chain.from_iterable(key_clusters), key_cluster_ids, strict=True))
    if len(key_cluster_of) != len(key_cluster_ids):
        raise ValueError("the key clusters repeat a mention; remove duplicates before scoring")
    response_mentions = list(chain.from_iterable(response_clusters))
    if len(set(response_mentions)) != len(response_mentions):
        raise ValueError("the response clusters repeat a mention; remove duplicates before scoring")

    # Key cluster of each response mention, -1 when the mention is not in the key.
    key_of_mention = np.fromiter(
        map(key_cluster_of.get, response_mentions, repeat(-1)), dtype=np.int64, count=len(response_mentions)
    )  # [num_response_mentions]
    response_of_mention = np.repeat(np.arange(num_response_clusters), response_sizes)  # [num_response_mentions]
    in_key = key_of_mention >= 0
    pair_codes = key_of_mention[in_key] * num_response_clusters + response_of_mention[in_key]  # [num_shared_mentions]
    unique_codes, shared = np.unique(pair_codes, return_counts=True)  # [num_pairs] each
    return ClusterOverlap(
        key_sizes,
        response_sizes,
        unique_codes // max(num_response_clusters, 1),
        unique_codes % max(num_response_clusters, 1),
        shared.astype(np.int64),
    )


def _links(sizes: np.ndarray) -> np.ndarray:
    """Number of mention pairs in groups of the given sizes."""
    return sizes * (sizes - 1) // 2


def mention_identification(overlap: ClusterOverlap) -> Counts:
    """Exact-span mention detection: shared mentions over key / response mentions."""
    matched = int(overlap.shared.sum())
    return Counts(matched, int(overlap.key_sizes.sum()), matched, int(overlap.response_sizes.sum()))


def muc(overlap: ClusterOverlap) -> Counts:
    """MUC (Vilain et al. 1995): links kept when each cluster is split by the other side."""
    # Per cluster pair sharing c mentions, c - 1 links survive; twinless mentions keep none.
    correct = int(overlap.shared.sum()) - len(overlap.shared)
    key_links = int(np.maximum(overlap.key_sizes - 1, 0).sum())
    response_links = int(np.maximum(overlap.response_sizes - 1, 0).sum())
    return Counts(correct, key_links, correct, response_links)


def b_cubed(overlap: ClusterOverlap) -> Counts:
    """B³ (Bagga and Baldwin 1998) over all mentions, twinless ones included."""
    shared_squared = overlap.shared.astype(np.float64) ** 2  # [num_pairs]
    recall_num = float((shared_squared / overlap.key_sizes[overlap.key_index]).sum())
    precision_num = float((shared_squared / overlap.response_sizes[overlap.response_index]).sum())
    return Counts(recall_num, int(overlap.key_sizes.sum()), precision_num, int(overlap.response_sizes.sum()))


@cache
def _linear_sum_assignment() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """``scipy.optimize.linear_sum_assignment``, imported on first use and without the rest of ``scipy.optimize``.

    The function lives in the compiled module ``scipy.optimize._lsap``; importing
    it the ordinary way runs ``scipy/optimize/__init__.py``, which imports all of
    ``scipy.optimize`` and ``scipy.linalg`` (about 0.5 s, more than scoring a
    corpus). The compiled module is loaded from its file alone when it is there:
    the same function, without the 0.5 s. Otherwise (``scipy.optimize`` already
    imported, another layout of scipy) the ordinary import is used.
    """
    import sys

    if "scipy.optimize" in sys.modules:
        return sys.modules["scipy.optimize"].linear_sum_assignment
    try:
        import importlib.machinery
        import importlib.util
        from pathlib import Path

        scipy_spec = importlib.util.find_spec("scipy")
        folders = scipy_spec.submodule_search_locations if scipy_spec is not None else None
        for folder in folders or ():
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = Path(folder) / "optimize" / f"_lsap{suffix}"
                if path.is_file():
                    loader = importlib.machinery.ExtensionFileLoader("scipy.optimize._lsap", str(path))
                    spec = importlib.util.spec_from_file_location("scipy.optimize._lsap", path, loader=loader)
                    module = importlib.util.module_from_spec(spec)
                    loader.exec_module(module)
                    return module.linear_sum_assignment
    except (ImportError, OSError, AttributeError):
        pass
    from scipy.optimize import linear_sum_assignment

    return linear_sum_assignment


def best_alignment_similarity(overlap: ClusterOverlap, similarity: np.ndarray) -> float:
    """Total similarity of the best one-to-one alignment of key and response clusters.

    ``similarity[i]`` belongs to pair ``i`` of ``overlap``; pairs sharing no
    mention have similarity 0, so only clusters that share mentions enter the
    assignment. A pair whose two clusters overlap nothing else is aligned
    directly; the remaining clusters go to one ``linear_sum_assignment``.
    """
    if len(similarity) == 0:
        return 0.0
    key_degree = np.bincount(overlap.key_index, minlength=len(overlap.key_sizes))  # [num_key_clusters]
    response_degree = np.bincount(overlap.response_index, minlength=len(overlap.response_sizes))
    isolated = (key_degree[overlap.key_index] == 1) & (response_degree[overlap.response_index] == 1)  # [num_pairs]
    total = float(similarity[isolated].sum())
    tangled = ~isolated
    if tangled.any():
        rows, row_of_pair = np.unique(overlap.key_index[tangled], return_inverse=True)
        columns, column_of_pair = np.unique(overlap.response_index[tangled], return_inverse=True)
        matrix = np.zeros((len(rows), len(columns)))  # [tangled key clusters, tangled response clusters]
        matrix[row_of_pair, column_of_pair] = similarity[tangled]
        assigned_rows, assigned_columns = _linear_sum_assignment()(matrix, maximize=True)
        total += float(matrix[assigned_rows, assigned_columns].sum())
    return total


def ceaf_mention(overlap: ClusterOverlap) -> Counts:
    """CEAF-m (Luo 2005): similarity = shared mentions; denominators are mention counts."""
    aligned = best_alignment_similarity(overlap, overlap.shared.astype(np.float64))
    return Counts(aligned, int(overlap.key_sizes.sum()), aligned, int(overlap.response_sizes.sum()))


def ceaf_entity(overlap: ClusterOverlap) -> Counts:
    """CEAF-e (Luo 2005, φ4): similarity = 2·shared / (|key| + |response|); denominators are cluster counts."""
    sizes_sum = overlap.key_sizes[overlap.key_index] + overlap.response_sizes[overlap.response_index]  # [num_pairs]
    aligned = best_alignment_similarity(overlap, 2.0 * overlap.shared / sizes_sum)
    return Counts(aligned, len(overlap.key_sizes), aligned, len(overlap.response_sizes))


def blanc(overlap: ClusterOverlap) -> BlancCounts:
    """BLANC (Recasens and Hovy 2011, Luo et al. 2014 for predicted mentions), as the reference counts it.

    Coreference links are mention pairs in one cluster, non-coreference links
    pairs in different clusters of the same side; a link is correct when it is
    of the same type on both sides (so both its mentions are in both sides).
    """
    key_mentions = int(overlap.key_sizes.sum())
    response_mentions = int(overlap.response_sizes.sum())
    key_coref = int(_links(overlap.key_sizes).sum())
    response_coref = int(_links(overlap.response_sizes).sum())
    key_non_coref = key_mentions * (key_mentions - 1) // 2 - key_coref
    response_non_coref = response_mentions * (response_mentions - 1) // 2 - response_coref

    both_coref = int(_links(overlap.shared).sum())
    # Pairs of mentions present on both sides, minus those in one key cluster or one
    # response cluster (inclusion-exclusion) = pairs separated on both sides.
    shared_mentions = int(overlap.shared.sum())
    shared_per_key = np.bincount(overlap.key_index, weights=overlap.shared).astype(np.int64)  # [num_key_clusters]
    shared_per_response = np.bincount(overlap.response_index, weights=overlap.shared).astype(np.int64)
    both_non_coref = (
        shared_mentions * (shared_mentions - 1) // 2
        - int(_links(shared_per_key).sum())
        - int(_links(shared_per_response).sum())
        + both_coref
    )
    return BlancCounts(
        Counts(both_coref, key_coref, both_coref, response_coref),
        Counts(both_non_coref, key_non_coref, both_non_coref, response_non_coref),
    )


def _lea_side(
    sizes: np.ndarray, index: np.ndarray, shared: np.ndarray, other_sizes: np.ndarray, other_index: np.ndarray
) -> tuple[float, int]:
    """LEA numerator and denominator of one side (key for recall, response for precision)."""
    resolved = np.bincount(index, weights=_links(shared), minlength=len(sizes))  # [num_clusters]
    # A singleton's self-link is resolved when its mention is a singleton on the other side too.
    singleton_pair = (sizes[index] == 1) & (other_sizes[other_index] == 1)  # [num_pairs]
    resolved_singleton = np.bincount(index[singleton_pair], minlength=len(sizes))  # [num_clusters] 0/1
    is_singleton = sizes == 1
    resolved = np.where(is_singleton, resolved_singleton, resolved)
    all_links = np.where(is_singleton, 1, _links(sizes))  # [num_clusters]
    numerator = float((sizes * resolved / all_links).sum()) if len(sizes) else 0.0
    return numerator, int(sizes.sum())


def lea(overlap: ClusterOverlap) -> Counts:
    """LEA (Moosavi and Strube 2016): importance = cluster size, resolution = fraction of its links found."""
    recall_num, recall_den = _lea_side(
        overlap.key_sizes, overlap.key_index, overlap.shared, overlap.response_sizes, overlap.response_index
    )
    precision_num, precision_den = _lea_side(
        overlap.response_sizes, overlap.response_index, overlap.shared, overlap.key_sizes, overlap.key_index
    )
    return Counts(recall_num, recall_den, precision_num, precision_den)


METRICS: dict[str, Callable[[ClusterOverlap], MetricCounts]] = {
    "muc": muc,
    "bcub": b_cubed,
    "ceafe": ceaf_entity,
    "ceafm": ceaf_mention,
    "blanc": blanc,
    "lea": lea,
}
METRIC_NAMES: tuple[str, ...] = tuple(METRICS)
CONLL_METRICS: tuple[str, ...] = ("muc", "bcub", "ceafe")


def evaluate(metric: str, key_clusters: Sequence[Cluster], response_clusters: Sequence[Cluster]) -> MetricCounts:
    """One metric's counts for one document (clusters without repeated mentions)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRIC_NAMES)}")
    return METRICS[metric](cluster_overlap(key_clusters, response_clusters))
