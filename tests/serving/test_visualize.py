"""The HTML view (well-formed, text intact, one box per mention) and the t-SNE figure."""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np

from coref_pipeline.formats.text import split_text
from coref_pipeline.serving.results import result_from_split
from coref_pipeline.serving.visualize import HtmlView, cluster_colours, html_document, tsne_figure


class ViewParser(HTMLParser):
    """The text of a view (without headings and cluster numbers) and the mentions' boxes."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.boxes: list[tuple[int, list[str]]] = []  # (cluster, text pieces)
        self.open_boxes: list[tuple[int, list[str]]] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("meta", "br"):
            return  # void elements
        attributes = dict(attrs)
        self.stack.append((tag, attributes.get("class")))
        if attributes.get("class") == "coref-mention":
            box = (int(attributes["title"].split()[-1]), [])
            self.open_boxes.append(box)

    def handle_endtag(self, tag):
        opened, css = self.stack.pop()
        assert opened == tag, f"</{tag}> closes <{opened}>"
        if css == "coref-mention":
            self.boxes.append(self.open_boxes.pop())

    def handle_data(self, data):
        if any(tag in ("sub", "h3", "style", "title") for tag, _ in self.stack):
            return
        if any(tag == "div" for tag, _ in self.stack):
            self.text.append(data)
            for _, pieces in self.open_boxes:
                pieces.append(data)


def parse_view(page: str) -> ViewParser:
    parser = ViewParser()
    parser.feed(page)
    parser.close()
    assert not parser.stack or all(tag in ("html", "body", "head") for tag, _ in parser.stack)
    return parser


TEXT = "Ada <met> & greeted   her sister.\nShe said “hi” to Bob & him."


def test_view_keeps_the_text_and_boxes_each_mention_in_its_cluster():
    split = split_text(TEXT)
    assert split.words[:4] == ("Ada", "<", "met", ">")
    # Nested: "her sister" contains "her"; "him ." nests nothing; one mention per cluster boundary.
    clusters = [[(0, 0), (7, 7), (10, 10)], [(7, 8), (17, 17)], [(13, 15), (16, 16)]]
    result = result_from_split("doc <1>", split, clusters, None)
    view = parse_view(html_document(result))
    assert "".join(view.text) == TEXT  # escaped and unescaped back, nothing lost
    boxes = sorted((cluster, "".join(pieces)) for cluster, pieces in view.boxes)
    expected = sorted((cluster, string) for cluster, strings in enumerate(result.mention_strings) for string in strings)
    assert boxes == expected
    assert "doc &lt;1&gt;" in html_document(result)


def test_crossing_mentions_are_closed_and_reopened():
    split = split_text("one two three four five")
    result = result_from_split("d", split, [[(0, 2), (4, 4)], [(1, 3), (4, 4)]], None)
    markup = html_document(result)
    view = parse_view(markup)  # well-formed although the mentions cross
    assert "".join(view.text) == "one two three four five"
    pieces = ["".join(p) for c, p in view.boxes if c == 1]
    assert "two three" in pieces and " four" in pieces  # cluster 1's mention, split where cluster 0's ends


def test_page_and_notebook_view(tmp_path):
    result = result_from_split("d", split_text("Ada came. She left."), [[(0, 0), (3, 3)]], None)
    view = HtmlView([result, result], title="t")
    view.save(tmp_path / "v.html")
    page = (tmp_path / "v.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.count('class="coref-doc"') == 2
    assert view._repr_html_().count('class="coref-mention"') == 4
    assert result._repr_html_().count('class="coref-mention"') == 2
    assert result._repr_html_().startswith("<style>")  # boxes need the style in a notebook too
    colours = cluster_colours(30)
    assert len(set(colours)) == 30


def test_tsne_figure_has_one_point_per_mention_coloured_by_cluster():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 16)) * 10
    cluster_ids = np.repeat(np.arange(3), 4)
    embeddings = centres[cluster_ids] + rng.normal(size=(12, 16))
    figure = tsne_figure(embeddings, cluster_ids, labels=[f"m{i}" for i in range(12)])
    [axes] = figure.axes
    offsets = np.concatenate([collection.get_offsets() for collection in axes.collections])
    assert offsets.shape == (12, 2)
    assert len(axes.collections) == 3 and len(axes.texts) == 12
    import matplotlib.pyplot as plt

    plt.close(figure)
