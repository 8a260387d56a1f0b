"""Small CoNLL-2012 files for the evaluation tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from coref_pipeline.formats.conll import format_coref_cells

Span = tuple[int, int]


def write_conll(path: Path, documents: Mapping[str, tuple[int, Sequence[Sequence[Span]]]]) -> Path:
    """Write ``{name: (num_words, clusters)}`` as a 12-column CoNLL-2012 file (part 0, one sentence each)."""
    lines = []
    for name, (num_words, clusters) in documents.items():
        lines.append(f"#begin document ({name}); part 000")
        for word, cell in enumerate(format_coref_cells(clusters, num_words)):
            lines.append("\t".join([name, "0", str(word), f"w{word}", "NN", "*", "-", "-", "-", "-", "*", cell]))
        lines.append("")
        lines.append("#end document")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
