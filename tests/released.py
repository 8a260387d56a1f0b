"""The fixture checkpoint of the original model imported, and a small corpus in its vocabulary."""

from __future__ import annotations

from pathlib import Path

from coref_pipeline.formats.conll import ConllFile
from tests.paths import FIXTURES

CHECKPOINTS = FIXTURES / "tf_checkpoints"
TINY_CHECKPOINT = (
    CHECKPOINTS / "tiny_coref"
)  # a training checkpoint of the original, a tiny BERT (write_tf_checkpoint.py)
BERT_ONLY_CHECKPOINT = CHECKPOINTS / "bert_only"  # a plain BERT checkpoint, no coreference variables

# Sentences in the fixture's vocabulary; a word's mark opens and closes a mention of that cluster.
SENTENCES = [
    [("John", 1), ("met", None), ("Mary", 2), ("in", None), ("Paris", 3), (".", None)],
    [("He", 1), ("gave", None), ("her", 2), ("the book", 4), (".", None)],
    [("She", 2), ("read", None), ("the book", 4), ("in", None), ("the train", None), (".", None)],
    [("Ada", 5), ("and", None), ("Charles", 6), ("saw", None), ("the city", 3), (".", None)],
    [("They", None), ("met", None), ("John", 1), ("in", None), ("the train", None), (".", None)],
    [("Charles", 6), ("gave", None), ("his", 6), ("book", None), ("to", None), ("Mary", 2), (".", None)],
    [("It", None), ("said", None), ("the", None), ("engine", None), ("of", None), ("the train", None), (".", None)],
]


def conll_document(name: str, speakers: tuple[str, str] = ("Ann", "Bob")) -> list[str]:
    lines = [f"#begin document ({name}); part 000"]
    for index, sentence in enumerate(SENTENCES):
        position = 0
        for phrase, cluster in sentence:
            words = phrase.split()
            for offset, word in enumerate(words):
                coref = "-"
                if cluster is not None:
                    if len(words) == 1:
                        coref = f"({cluster})"
                    elif offset == 0:
                        coref = f"({cluster}"
                    elif offset == len(words) - 1:
                        coref = f"{cluster})"
                speaker = speakers[index % 2]
                lines.append(f"{name}\t0\t{position}\t{word}\tNN\t*\t-\t-\t-\t{speaker}\t*\t{coref}")
                position += 1
        lines.append("")
    lines.append("#end document")
    return lines


def released_conll(split: str, documents: int = 2) -> ConllFile:
    """A gold CoNLL-2012 file of ``documents`` documents in the broadcast-news genre."""
    lines = []
    for index in range(documents):
        lines += conll_document(f"bn/tiny/{split}/doc_{index}")
    return ConllFile(f"{split}.english.v4_gold_conll", "\n".join(lines) + "\n")


def write_corpus(directory: Path) -> Path:
    """The three splits as files, as a corpus folder holds them."""
    directory.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        (directory / f"{split}.english.v4_gold_conll").write_text(released_conll(split).text)
    return directory
