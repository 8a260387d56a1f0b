"""Raw text -> sentences and words: offsets into the original string, layout rules, errors."""

from __future__ import annotations

import pytest

from coref_pipeline.formats import text as text_module
from coref_pipeline.formats.text import join_words, split_text

MESSY = (
    "  Dr. Ada Lovelace met\tCharles Babbage in 1833 — she was “seventeen”.\n"
    "He   showed her his engine; she didn’t   forget it…\r\n\r\n"
    "«Bonjour», said Zoë (née Müller)!  Was it 5 p.m.?\n\n\n   "
)


def check_offsets(split) -> None:
    assert len(split.words) == len(split.word_spans)
    previous_end = 0
    for word, (start, end) in zip(split.words, split.word_spans, strict=True):
        assert split.text[start:end] == word
        assert word and not any(ch.isspace() for ch in word)
        assert start >= previous_end  # in order, no overlap
        previous_end = end


def test_offsets_point_into_the_original_string():
    split = split_text(MESSY)
    check_offsets(split)
    assert split.text is MESSY
    # Every non-space character belongs to a word: nothing is dropped.
    covered = set()
    for start, end in split.word_spans:
        covered.update(range(start, end))
    assert {i for i, ch in enumerate(MESSY) if not ch.isspace()} == covered
    assert split.words[:4] == ("Dr.", "Ada", "Lovelace", "met")
    assert split.words[8:15] == ("—", "she", "was", "“", "seventeen", "”", ".")
    assert split.words[26:30] == ("«", "Bonjour", "»", ",")
    # Penn Treebank contractions, with the curly apostrophe kept as written.
    assert ("did", "n’t") == split.words[split.words.index("n’t") - 1 : split.words.index("n’t") + 1]


def test_sentences_paragraphs_and_hard_wrapped_lines():
    split = split_text(MESSY)
    sentences = split.sentences
    # A single line break is a space: the first sentence runs over it; a blank line ends a sentence.
    assert sentences[0][-1] == "."
    assert sentences[0][:2] == ["Dr.", "Ada"] and "He" in sentences[1]
    assert sentences[1][-1] == "it…"  # NLTK keeps the Unicode ellipsis on its word
    assert sentences[2][0] == "«"
    assert sentences[-1] == ["Was", "it", "5", "p.m.", "?"]
    assert sum(len(sentence) for sentence in sentences) == len(split.words)
    assert split.sentence_ids == [i for i, sentence in enumerate(sentences) for _ in sentence]
    wrapped = split_text("The cat sat\non the mat. It slept.")
    assert wrapped.sentences == [["The", "cat", "sat", "on", "the", "mat", "."], ["It", "slept", "."]]
    no_stop = split_text("First paragraph without a stop\n\nSecond one")
    assert no_stop.sentences == [["First", "paragraph", "without", "a", "stop"], ["Second", "one"]]


@pytest.mark.parametrize("blank", ["", " ", "\n\n", " \t\r\n \u00a0 "])
def test_empty_and_whitespace_only_text(blank):
    split = split_text(blank)
    assert split.words == () and split.sentences == [] and split.word_spans == ()


def test_long_paragraphs_are_split_in_windows_with_the_same_result(monkeypatch):
    body = " ".join(f"Sentence number {i} is here, said Mr. Smith." for i in range(60))
    whole = split_text(body)
    monkeypatch.setattr(text_module, "SENTENCE_WINDOW_CHARS", 150)
    windowed = split_text(body)
    assert windowed == whole
    assert len(whole.sentences) == 60
    # A single sentence longer than the window widens it instead of cutting.
    long_sentence = " ".join(["word"] * 200) + "."
    assert split_text(long_sentence).sentences == [["word"] * 200 + ["."]]


def test_pre_split_words_are_joined_with_offsets():
    split = join_words([["Ada", "met", "him", "."], [], ["She", "smiled"]])
    assert split.text == "Ada met him .\nShe smiled"
    check_offsets(split)
    assert split.sentences == [["Ada", "met", "him", "."], ["She", "smiled"]]


@pytest.mark.parametrize("bad", ["", "two words", 3])
def test_a_bad_word_names_its_position(bad):
    with pytest.raises(ValueError, match=r"doc: sentence 1, word 2 is"):
        join_words([["a"], ["b", "c", bad]], "doc")
    with pytest.raises(TypeError, match="sentence 0 is a str"):
        join_words(["not a list"])


# What a fresh process sees after split_text: which NLTK, scipy and scikit-learn modules stay imported, the words
# of MESSY, and then the words of the whole package's tokenizer (``import nltk``) and its scikit-learn classifier.
_FRESH_PROCESS = """
import json, sys
from coref_pipeline.formats.text import split_text
TEXT = sys.stdin.read()
ours = split_text(TEXT)
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("nltk", "scipy", "sklearn"))
import nltk
from nltk.classify import SklearnClassifier
from nltk.tokenize import NLTKWordTokenizer
from sklearn.linear_model import LogisticRegression
from coref_pipeline.formats.text import _SAME_LENGTH_FOR_TOOLS, sentence_spans
tools = TEXT.translate(_SAME_LENGTH_FOR_TOOLS)
tokenizer = NLTKWordTokenizer()
package = [(s + a, s + b) for s, e in sentence_spans(TEXT) for a, b in tokenizer.span_tokenize(tools[s:e])]
classifier = SklearnClassifier(LogisticRegression()).train([({"a": 1}, "x"), ({"a": 0}, "y")])
print(
    json.dumps({"loaded": loaded, "ours": ours.word_spans, "package": package, "label": classifier.classify({"a": 1})})
)
"""


def test_split_text_loads_nltks_tokenizer_without_the_package_and_leaves_nltk_importable_whole():
    import json
    import subprocess
    import sys

    text = MESSY * 3 + "I can't say they'd've known. \"Quoted,\" he said -- twice... (Yes!) $5.00 at 3:45pm."
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS], input=text, capture_output=True, text=True, check=True
    )
    seen = json.loads(result.stdout)
    assert seen["loaded"] == []  # no NLTK module left behind, and neither scipy nor scikit-learn imported
    assert seen["ours"] == seen["package"]  # the same words as the package's own tokenizer
    assert len(seen["ours"]) > 100
    assert seen["label"] == "x"  # the package imported afterwards is whole


def test_split_text_uses_nltk_as_imported_when_the_process_has_it(monkeypatch):
    import nltk.tokenize

    text_module._word_tokenizer.cache_clear()
    monkeypatch.setattr(
        text_module, "_import_under_placeholders", lambda *args: pytest.fail("placeholders with NLTK imported")
    )
    try:
        assert type(text_module._word_tokenizer()) is nltk.tokenize.NLTKWordTokenizer
    finally:
        text_module._word_tokenizer.cache_clear()


def test_split_text_falls_back_to_the_usual_import_when_the_placeholders_fail(monkeypatch):
    import sys

    def failing(module, packages):
        raise ImportError("another layout")

    def nltk_modules() -> dict:
        return {name: module for name, module in sys.modules.items() if name.split(".")[0] == "nltk"}

    imported = nltk_modules()
    text_module._word_tokenizer.cache_clear()
    monkeypatch.setattr(text_module, "_import_under_placeholders", failing)
    for name in imported:
        del sys.modules[name]
    try:
        assert split_text("She didn't.").words == ("She", "did", "n't", ".")
        assert "nltk.tokenize" in nltk_modules()  # the usual import ran
    finally:
        text_module._word_tokenizer.cache_clear()
        for name in nltk_modules():
            del sys.modules[name]
        sys.modules.update(imported)


# Rounds of threads splitting their first text at once in one process, NLTK removed from sys.modules before each.
_THREADS_AT_ONCE = """
import sys, threading
from coref_pipeline.formats import text
failures, words = [], set()
for round in range(20):
    text._word_tokenizer.cache_clear()
    for name in [name for name in sys.modules if name.split(".")[0] == "nltk"]:
        del sys.modules[name]
    barrier = threading.Barrier(8)
    def split():
        barrier.wait()
        try:
            words.add(text.split_text("She didn't come. He said so.").words)
        except Exception as error:
            failures.append(repr(error))
    threads = [threading.Thread(target=split) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
print(failures[:1], sorted(words))
"""


def test_threads_splitting_their_first_texts_at_once_all_get_the_words():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _THREADS_AT_ONCE], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[] [('She', 'did', \"n't\", 'come', '.', 'He', 'said', 'so', '.')]"


# Rounds of the tokenizer's first load while another thread adds and removes modules (as threads importing do),
# the interpreter switching threads as often as it can; then whether the usual import of NLTK (and with it scipy)
# was ever needed.
_WHILE_A_THREAD_IMPORTS = """
import sys, threading, types
sys.setswitchinterval(1e-6)
from coref_pipeline.formats import text
stop = False
def churn():
    count = 0
    while not stop:
        name = f"_churn_{count % 50}"
        if name in sys.modules:
            del sys.modules[name]
        else:
            sys.modules[name] = types.ModuleType(name)
        count += 1
thread = threading.Thread(target=churn)
thread.start()
failures = []
try:
    for round in range(30):
        text._word_tokenizer.cache_clear()
        for name in [name for name in list(sys.modules) if name.split(".")[0] == "nltk"]:
            del sys.modules[name]
        try:
            text.split_text("She didn't.")
        except Exception as error:
            failures.append(repr(error))
finally:
    stop = True
    thread.join()
print(failures[:1], "scipy" in sys.modules)
"""


def test_the_tokenizers_first_load_holds_while_another_thread_imports():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _WHILE_A_THREAD_IMPORTS], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[] False"  # no error, and never the usual import as a fallback
