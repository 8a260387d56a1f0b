"""Pictures of predictions: an HTML view colouring each cluster, a t-SNE map of span representations."""

from __future__ import annotations

import colorsys
import html
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from coref_pipeline.files import atomic_write_text


class Viewable(Protocol):
    """What a view needs of a document's predictions (``coref_pipeline.serving.results.CorefResult`` has it)."""

    doc_key: str
    text: str
    char_clusters: list[list[tuple[int, int]]]


_STYLE = """<style>
.coref-doc { font-family: Georgia, serif; line-height: 2.1; white-space: pre-wrap; max-width: 60em; }
.coref-doc h3 { font-family: sans-serif; font-size: 1em; margin: 1.2em 0 0.2em 0; white-space: normal; }
.coref-mention { border: 2px solid; border-radius: 4px; padding: 0 2px; }
.coref-mention sub { font-family: sans-serif; font-size: 0.6em; font-weight: bold; }
</style>"""


def cluster_colours(count: int) -> list[tuple[str, str]]:
    """``(background, border)`` CSS colours, one pair per cluster, hues spread by the golden angle."""
    colours = []
    for index in range(count):
        hue = (index * 0.618033988749895) % 1.0
        background = colorsys.hls_to_rgb(hue, 0.88, 0.75)
        border = colorsys.hls_to_rgb(hue, 0.40, 0.75)
        colours.append(tuple("#" + "".join(f"{round(255 * c):02x}" for c in rgb) for rgb in (background, border)))
    return colours


def html_document(result: Viewable) -> str:
    """One document's text, each mention boxed in its cluster's colour with the cluster number.

    Nested mentions nest; a mention crossing another is closed and reopened around it.
    """
    colours = cluster_colours(len(result.char_clusters))
    mentions = sorted(
        ((start, end, cluster) for cluster, spans in enumerate(result.char_clusters) for start, end in spans),
        key=lambda mention: (mention[0], -mention[1], mention[2]),
    )
    text = result.text
    opening: dict[int, list[tuple[int, int, int]]] = {}
    for mention in mentions:
        opening.setdefault(mention[0], []).append(mention)  # outer mentions first
    boundaries = sorted({position for start, end, _ in mentions for position in (start, end)})
    pieces = [f'<div class="coref-doc"><h3>{html.escape(str(result.doc_key))}</h3>']
    stack: list[tuple[int, int, int]] = []
    written = 0
    for position in boundaries:
        pieces.append(html.escape(text[written:position]))
        written = position
        ending = {mention for mention in stack if mention[1] == position}
        crossing: list[tuple[int, int, int]] = []
        while ending:
            top = stack.pop()
            if top in ending:
                pieces.append(_close_tag(top))
                ending.remove(top)
            else:
                pieces.append("</span>")  # it crosses a mention that ends here: reopened below
                crossing.append(top)
        for mention in reversed(crossing):
            pieces.append(_open_tag(mention, colours))
            stack.append(mention)
        for mention in opening.get(position, ()):
            pieces.append(_open_tag(mention, colours))
            stack.append(mention)
    pieces.append(html.escape(text[written:]))
    pieces.append("</div>")
    return "".join(pieces)


def _open_tag(mention: tuple[int, int, int], colours: Sequence[tuple[str, str]]) -> str:
    background, border = colours[mention[2]]
    return (
        f'<span class="coref-mention" style="background:{background};border-color:{border}" '
        f'title="cluster {mention[2]}">'
    )


def _close_tag(mention: tuple[int, int, int]) -> str:
    return f"<sub>{mention[2]}</sub></span>"


def html_documents(results: Sequence[Viewable]) -> str:
    """Every document's view, one after the other (needs ``_STYLE`` around it)."""
    return "\n".join(html_document(result) for result in results)


def html_page(results: Sequence[Viewable], title: str = "coref-pipeline predictions") -> str:
    """A self-contained HTML page with every document's view."""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"{_STYLE}</head>\n<body>\n{html_documents(results)}\n</body></html>\n"
    )


class HtmlView:
    """Predictions shown as HTML in a notebook (``_repr_html_``), or saved as a page."""

    def __init__(self, results: Sequence[Viewable], title: str = "coref-pipeline predictions") -> None:
        self.results = list(results)
        self.title = title

    def _repr_html_(self) -> str:
        return _STYLE + html_documents(self.results)

    def save(self, path: Any) -> None:
        atomic_write_text(path, html_page(self.results, self.title))


def tsne_figure(
    embeddings: np.ndarray,
    cluster_ids: np.ndarray,
    labels: Sequence[str] | None = None,
    seed: int = 0,
    title: str = "t-SNE of span representations, coloured by predicted cluster",
) -> Any:
    """A 2-D t-SNE map of span representations (``[num_mentions, D]``), one colour per cluster.

    Perplexity is ``min(30, (num_mentions - 1) / 3)`` (at least 1), so a paragraph's
    few mentions can be mapped; ``labels`` annotate the points.
    """
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    num_mentions = embeddings.shape[0]
    if num_mentions < 3:
        raise ValueError(f"t-SNE needs at least 3 mentions, got {num_mentions}")
    perplexity = max(1.0, min(30.0, (num_mentions - 1) / 3))
    points = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(
        embeddings.astype(np.float64)
    )  # [num_mentions, 2]
    colours = cluster_colours(int(cluster_ids.max()) + 1)
    figure, axes = plt.subplots(figsize=(7, 6))
    for cluster in np.unique(cluster_ids):
        chosen = cluster_ids == cluster
        axes.scatter(
            points[chosen, 0],
            points[chosen, 1],
            s=60,
            color=colours[cluster][1],
            label=f"cluster {cluster}",
            edgecolors="black",
            linewidths=0.4,
        )
    if labels is not None:
        for (x, y), label in zip(points, labels, strict=True):
            axes.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    axes.set_title(title)
    axes.set_xticks([])
    axes.set_yticks([])
    if len(np.unique(cluster_ids)) <= 12:
        axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    return figure
