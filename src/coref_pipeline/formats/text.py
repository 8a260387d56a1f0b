"""Raw text -> sentences and words with character offsets into the caller's string.

Sentences come from pySBD (the Golden Rules sentence segmenter), words from NLTK's
Penn-Treebank-style tokenizer (``NLTKWordTokenizer.span_tokenize``): the tokenization
OntoNotes uses ("don't" -> "do" "n't", punctuation split off). Both run offline.

Layout rules, applied before those tools see the text:

* a blank line (a paragraph break) always ends a sentence;
* a single line break inside a paragraph is a space (hard-wrapped text such as
  Project Gutenberg books keeps its sentences whole);
* curly apostrophes are read as ``'`` so that "can’t" splits as "ca" "n’t".

The tools only ever see a copy of the text with characters replaced one for one,
so every offset they return is an offset into the original string: ``text[start:end]``
is the word, whatever spaces, tabs, newlines or Unicode punctuation surround it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

# pySBD's run time grows faster than linearly with the length of its input; longer
# paragraphs are segmented in windows of this many characters (see ``_sentence_spans``).
SENTENCE_WINDOW_CHARS = 8000

# Replacements of one character by one character (offsets stay valid).
_SAME_LENGTH_FOR_TOOLS = str.maketrans({"\u2019": "'", "\u2018": "'", "\n": " ", "\r": " ", "\u2028": " "})
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")


@dataclass(frozen=True)
class SplitText:
    """A text split into words (with their character spans) and sentences (runs of words).

    ``word_spans[i] = (start, end)``: ``text[start:end] == words[i]`` (end exclusive);
    ``sentence_ends[j]``: one past the index of sentence ``j``'s last word.
    """

    text: str
    words: tuple[str, ...]
    word_spans: tuple[tuple[int, int], ...]
    sentence_ends: tuple[int, ...]

    @property
    def sentences(self) -> list[list[str]]:
        """The words of each sentence."""
        starts = (0, *self.sentence_ends)[: len(self.sentence_ends)]
        return [list(self.words[start:end]) for start, end in zip(starts, self.sentence_ends, strict=True)]

    @property
    def sentence_ids(self) -> list[int]:
        """Each word's sentence index."""
        ids: list[int] = []
        start = 0
        for sentence, end in enumerate(self.sentence_ends):
            ids.extend([sentence] * (end - start))
            start = end
        return ids


@lru_cache(maxsize=1)
def _sentence_segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


_WORD_TOKENIZER_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _word_tokenizer():
    with _WORD_TOKENIZER_LOCK:  # threads splitting their first texts at once: the placeholders one at a time
        return _nltk_word_tokenizer_class()()


# NLTK's word tokenizer and the package modules it imports. ``import nltk`` runs the package's ``__init__``, which
# imports most of NLTK and, through it, scipy.stats and scikit-learn: 1.9 s of a 3 s ``coref-pipeline predict`` on
# one short text; the tokenizer's own modules import none of that (0.1 s).
_NLTK_TOKENIZER_MODULE = "nltk.tokenize.destructive"
_NLTK_PACKAGES = ("nltk", "nltk.tokenize")


def _nltk_word_tokenizer_class() -> type:
    """``NLTKWordTokenizer``, its module run as NLTK ships it. Where the process has not imported NLTK, its two
    packages stand in as empty placeholders (their ``__init__`` not run) while the tokenizer's module is imported,
    and every NLTK module is then removed from ``sys.modules`` again: the process's modules are as they were, and a
    later ``import nltk`` imports the whole package as usual. Where NLTK is imported already, or the placeholders
    fail (another NLTK layout), the usual import. The placeholders stand for about 0.1 s, once a process: a thread
    of the caller's own importing NLTK for the first time in that instant would get them."""
    if not _modules_under(_NLTK_PACKAGES[0]):
        try:
            return _import_under_placeholders(_NLTK_TOKENIZER_MODULE, _NLTK_PACKAGES).NLTKWordTokenizer
        except Exception:  # another layout of NLTK: the usual import below, which reports its own errors
            pass
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer


def _import_under_placeholders(module: str, packages: Sequence[str]):
    """``module`` imported with ``packages`` (outermost first) as placeholders whose ``__init__`` is not run; every
    module under the outermost package is removed from ``sys.modules`` afterwards, whether or not it imported."""
    import importlib
    import importlib.machinery
    import importlib.util
    import os
    import sys
    import types

    root = packages[0]
    spec = importlib.util.find_spec(root)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"no package {root}")
    directory = list(spec.submodule_search_locations)[0]
    try:
        for package in packages:
            placeholder_spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            placeholder_spec.submodule_search_locations = [os.path.join(directory, *package.split(".")[1:])]
            placeholder = types.ModuleType(package)
            placeholder.__spec__ = placeholder_spec
            placeholder.__path__ = placeholder_spec.submodule_search_locations
            sys.modules[package] = placeholder
        return importlib.import_module(module)
    finally:
        for name in _modules_under(root):
            del sys.modules[name]


def _modules_under(package: str) -> list[str]:
    """The names in ``sys.modules`` of ``package`` and its submodules, read through a copy: a loop over the dict
    itself fails when another thread's import changes it."""
    import sys

    return [name for name in list(sys.modules) if name == package or name.startswith(package + ".")]


def split_text(text: str) -> SplitText:
    """Sentences and words of raw ``text``, with character offsets into ``text``.

    Empty or whitespace-only text gives no words and no sentences.
    """
    if not isinstance(text, str):
        raise TypeError(f"split_text takes a str, got {type(text).__name__}")
    for_tools = text.translate(_SAME_LENGTH_FOR_TOOLS)
    tokenizer = _word_tokenizer()
    words: list[str] = []
    spans: list[tuple[int, int]] = []
    sentence_ends: list[int] = []
    for sentence_start, sentence_end in sentence_spans(text):
        for word_start, word_end in tokenizer.span_tokenize(for_tools[sentence_start:sentence_end]):
            span = (sentence_start + word_start, sentence_start + word_end)
            words.append(text[span[0] : span[1]])
            spans.append(span)
        if not sentence_ends or sentence_ends[-1] != len(words):
            sentence_ends.append(len(words))
    return SplitText(text, tuple(words), tuple(spans), tuple(sentence_ends))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the sentences of raw ``text`` under the layout rules above: what
    ``split_text`` tokenizes, and what the spaCy component sentences another tokenizer's words by."""
    for_tools = text.translate(_SAME_LENGTH_FOR_TOOLS)
    return [
        (paragraph_start + start, paragraph_start + end)
        for paragraph_start, paragraph_end in _paragraphs(text)
        for start, end in _sentence_spans(for_tools[paragraph_start:paragraph_end])
    ]


def join_words(sentences: Sequence[Sequence[str]], what: str = "input") -> SplitText:
    """Pre-split sentences of words as a text: words joined by a space, sentences by a newline.

    A word that is empty or contains whitespace is an error naming its position.
    """
    words: list[str] = []
    spans: list[tuple[int, int]] = []
    sentence_ends: list[int] = []
    pieces: list[str] = []
    position = 0
    for sentence_index, sentence in enumerate(sentences):
        if isinstance(sentence, str):
            raise TypeError(f"{what}: sentence {sentence_index} is a str; give each sentence as a list of words")
        if not sentence:
            continue  # an empty sentence has no words to keep
        for word_index, word in enumerate(sentence):
            if not isinstance(word, str) or not word or any(ch.isspace() for ch in word):
                raise ValueError(
                    f"{what}: sentence {sentence_index}, word {word_index} is {word!r}; "
                    f"words must be non-empty strings without whitespace"
                )
            if words and word_index == 0:
                pieces.append("\n")
                position += 1
            elif word_index:
                pieces.append(" ")
                position += 1
            words.append(word)
            spans.append((position, position + len(word)))
            pieces.append(word)
            position += len(word)
        sentence_ends.append(len(words))
    return SplitText("".join(pieces), tuple(words), tuple(spans), tuple(sentence_ends))


def _paragraphs(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of text between blank lines."""
    bounds = []
    start = 0
    for match in _PARAGRAPH_BREAK.finditer(text):
        bounds.append((start, match.start()))
        start = match.end()
    bounds.append((start, len(text)))
    return [(start, end) for start, end in bounds if text[start:end].strip()]


def _sentence_spans(paragraph: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence of a paragraph (no line breaks), surrounding spaces excluded.

    pySBD runs on windows of ``SENTENCE_WINDOW_CHARS``: every sentence of a window but
    its last (which the window may cut) is kept, and the next window starts at that
    last sentence. A window holding a single sentence is widened.
    """
    segmenter = _sentence_segmenter()
    spans: list[tuple[int, int]] = []
    start = 0
    window = SENTENCE_WINDOW_CHARS
    while start < len(paragraph):
        end = min(len(paragraph), start + window)
        pieces = _aligned(paragraph, start, segmenter.segment(paragraph[start:end]))
        if end < len(paragraph):
            if len(pieces) < 2:
                window *= 2
                continue
            pieces = pieces[:-1]
        for piece_start, piece_end in pieces:
            stripped = paragraph[piece_start:piece_end]
            left = len(stripped) - len(stripped.lstrip())
            right = len(stripped.rstrip())
            if right > left:
                spans.append((piece_start + left, piece_start + right))
        if end == len(paragraph):
            break
        start = pieces[-1][1]
        window = SENTENCE_WINDOW_CHARS
    return spans


def _aligned(text: str, offset: int, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Spans of pySBD's pieces in ``text`` from ``offset`` on (it keeps the text as given)."""
    spans = []
    position = offset
    for piece in pieces:
        if text.startswith(piece, position):
            spans.append((position, position + len(piece)))
            position += len(piece)
            continue
        found = text.find(piece.strip(), position)
        if not piece.strip() or found < 0:
            raise RuntimeError(f"sentence splitter returned text not found in its input: {piece[:60]!r}")
        spans.append((found, found + len(piece.strip())))
        position = found + len(piece.strip())
    return spans
