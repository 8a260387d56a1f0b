"""CoNLL-2012 skeletons: where they are, and each filled with its document's words.

A skeleton (``*_gold_skel``) is a CoNLL-2012 file whose word column reads ``[WORD]``; the CoNLL-2012
scripts fill it from the document's ``.parse`` file in the OntoNotes release (``skeleton2conll.py``).
They come as the distributed archives (``conll-2012-train.v4.tar.gz``, ``conll-2012-development.v4.tar.gz``,
``conll-2012-test-key.tar.gz``), extracted (``conll-2012/v4/data/<partition>/data/<language>/annotations/
<genre>/<source>/<nn>/<name>.v4_gold_skel``) or as the v12 tree of the ``conll-formatted-ontonotes-5.0``
repository (``.../data/<partition>/data/<language>/annotations/.../<name>.gold_skel``).
"""

from __future__ import annotations

import logging
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from coref_pipeline.formats.conll import parse_header
from coref_pipeline.formats.ontonotes.layout import format_rows
from coref_pipeline.formats.ontonotes.text import OntonotesError
from coref_pipeline.formats.ontonotes.trees import ParseTrees

logger = logging.getLogger(__name__)

WORD_COLUMN = 3  # the 0-based column the scripts fill
V12 = "v12"  # the version of the skeletons whose names carry none (the conll-formatted-ontonotes-5.0 tree)
SKELETON_PATH = re.compile(
    r"(?:^|/)data/(?P<partition>[^/]+)/data/(?P<language>[^/]+)/annotations/"
    r"(?P<document>[^/]+/[^/]+/[^/]+/[^/.][^/]*?)\.(?:(?P<version>v\d+)_)?gold_(?P<kind>skel|conll)$"
)
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2")


@dataclass(frozen=True)
class Skeleton:
    """One document's skeleton (``kind="skel"``), or its CoNLL file already filled (``kind="conll"``)."""

    partition: str
    language: str
    document: str  # genre/source/nn/name, as the release's annotations tree names it
    version: str  # v4, v9, v12 ...
    kind: str
    source: str  # the file, or ARCHIVE:MEMBER

    @property
    def conll_name(self) -> str:
        """The name of the filled file under ``annotations/``: the scripts compile files in the order of these."""
        suffix = "gold_conll" if self.version == V12 else f"{self.version}_gold_conll"
        return f"{self.document}.{suffix}"


def skeleton_of(path: str, source: str) -> Skeleton | None:
    """The skeleton a relative path (``/``-separated) names, or None for any other file."""
    match = SKELETON_PATH.search(path)
    if match is None:
        return None
    return Skeleton(
        match["partition"], match["language"], match["document"], match["version"] or V12, match["kind"], source
    )


def find_skeletons(
    skeleton_dir: Path, wanted: Callable[[Skeleton], bool]
) -> tuple[str, Iterator[tuple[Skeleton, bytes]]]:
    """The gold skeletons in ``skeleton_dir`` that ``wanted`` keeps, with their bytes, and where they were found.

    The extracted files when there are any (a folder where the archives were unpacked holds both),
    else the archives in the folder (or ``skeleton_dir`` itself when it is one), read as streams.
    """
    if skeleton_dir.is_file():
        return f"the archive {skeleton_dir}", _archive_skeletons([skeleton_dir], wanted)
    if not skeleton_dir.is_dir():
        raise OntonotesError(f"{skeleton_dir}: no such folder (the CoNLL-2012 skeletons)")
    extracted = [
        (skeleton, path)
        for path in sorted(skeleton_dir.rglob("*gold_*"))
        if path.is_file() and (skeleton := skeleton_of(path.relative_to(skeleton_dir).as_posix(), str(path)))
        if wanted(skeleton)
    ]
    if extracted:
        return f"the extracted files in {skeleton_dir}", ((skeleton, path.read_bytes()) for skeleton, path in extracted)
    archives = sorted(
        path for path in skeleton_dir.iterdir() if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)
    )
    return f"the archives {', '.join(path.name for path in archives)} in {skeleton_dir}", _archive_skeletons(
        archives, wanted
    )


def _archive_skeletons(archives: list[Path], wanted: Callable[[Skeleton], bool]) -> Iterator[tuple[Skeleton, bytes]]:
    for archive in archives:
        try:
            with tarfile.open(archive, "r|*") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    skeleton = skeleton_of(member.name, f"{archive}:{member.name}")
                    if skeleton is None or not wanted(skeleton):
                        continue
                    handle = tar.extractfile(member)
                    yield skeleton, handle.read() if handle else b""
        except (tarfile.TarError, EOFError, OSError) as error:
            raise OntonotesError(f"{archive}: not a readable tar archive ({error})") from None


def fill_skeleton(skeleton: str, source: str, trees: ParseTrees) -> str:
    """The skeleton's text with each sentence's word column filled from its tree, laid out as the scripts write it.

    Sentence ``i`` of the file (counted over its parts) takes tree ``i``'s words; ``#`` lines are written
    stripped; a sentence is the rows before a blank line. A sentence whose word count is not its tree's, a
    tree missing, or a row without a word column is an :class:`OntonotesError` naming the skeleton's line,
    document and sentence.
    """
    out: list[str] = []
    rows: list[list[str]] = []
    tree = 0
    document, sentence, first_row = "(no document)", 0, 0
    lines = skeleton.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            if not rows:
                raise OntonotesError(f"{source}:{number}: document {document}: a blank line that ends no sentence")
            if tree >= len(trees):
                raise OntonotesError(
                    f"{source}:{first_row}: document {document}, sentence {sentence + 1}: no tree for it "
                    f"({trees.source} has {len(trees)})"
                )
            words = trees.words[tree]
            if len(words) != len(rows):
                shown = " ".join(words[:8]) + (" ..." if len(words) > 8 else "")
                raise OntonotesError(
                    f"{source}:{first_row}: document {document}, sentence {sentence + 1}: {len(rows)} words, but its "
                    f"tree ({trees.source}:{trees.starts[tree]}) has {len(words)}: {shown}"
                )
            for row, word in zip(rows, words, strict=True):
                row[WORD_COLUMN] = word
            if "" in words:  # the scripts join the row and split it again: an empty word leaves no cell
                rows = [" ".join(row).split() for row in rows]
            out.extend(format_rows(rows))
            out.append("")
            rows = []
            tree += 1
            sentence += 1
        elif line.startswith("#"):
            if rows:
                raise OntonotesError(f"{source}:{number}: document {document}: a sentence not ended by a blank line")
            out.append(line.strip())
            if line.startswith("#begin document"):
                name, part = parse_header(line.strip())
                document = name if part is None else f"{name} part {part}"
                sentence = 0
        else:
            columns = line.split()
            if len(columns) <= WORD_COLUMN:
                raise OntonotesError(
                    f"{source}:{number}: document {document}, sentence {sentence + 1}: a row of {len(columns)} "
                    f"columns (the word is column {WORD_COLUMN + 1})"
                )
            if not rows:
                first_row = number
            rows.append(columns)
    if rows:
        raise OntonotesError(f"{source}:{len(lines)}: document {document}: a sentence not ended by a blank line")
    if tree < len(trees):
        logger.warning("%s: %d trees, %s uses the first %d", trees.source, len(trees), source, tree)
    return "\n".join(out) + "\n" if out else ""
