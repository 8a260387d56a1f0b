"""CoNLL-U files with CorefUD 1.x coreference, read as CoNLL-2012 documents.

A ``.conllu`` file is read wherever a CoNLL-2012 file is (``ConllFile.read`` routes on the suffix): its
text becomes the CoNLL-2012 text of the same documents, so every reader after it (``preprocess``, the
scorer's keys and responses, the named test sets) reads it unchanged.

- Documents start at ``# newdoc id = ID`` (the document key is the id; a file without one is one
  document named after the file); sentences end at a blank line; a sentence's speaker is its
  ``# speaker = ...`` comment (``-`` without one); the words are the syntactic words (integer ids), in
  order: a multiword token's range line (``1-2``) is its surface form and is skipped.
- Mentions are the ``Entity=`` chunks of the MISC column, as CorefUD 1.x writes them (udapi's reader):
  ``(eid-etype-head-...`` opens a mention, ``eid)`` closes the last open mention of ``eid``, ``(eid...)``
  is a one-word mention; ``# global.Entity`` says which field is the eid (the first by default). The
  entities are numbered in the order they appear, and each word's brackets are written in the order of its
  chunks, so clusters come out as the CoNLL-2012 reader builds them.
- Refused in one line naming the file, line, document and sentence (``ConllFormatError``): an unbalanced
  bracket (a closing without its opening, a mention still open when its sentence ends: CorefUD mentions
  stay in their sentence), a discontinuous mention (``e5[1/2]``: a CoNLL-2012 mention is one span), an
  ``Entity=`` on an empty node (``8.1``: not a word of the text; an empty node without one is skipped), a
  word with whitespace in it, and a token line without ten columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from coref_pipeline.formats.columns import NO_SPEAKER, ConllFormatError

SUFFIX = ".conllu"
_CHUNK = re.compile(r"\([^()]+\)?|[^()]+\)")
_DISCONTINUOUS = re.compile(r"\[\d+/\d+\]$")
_NEWDOC = re.compile(r"#\s*newdoc(?:\s+id\s*=\s*(?P<id>.*?))?\s*$")
_COMMENT = re.compile(r"#\s*(?P<key>[\w.]+)\s*=\s*(?P<value>.*?)\s*$")


def is_conllu(path: str | Path) -> bool:
    """Whether ``path`` names a CoNLL-U file (by its suffix)."""
    return Path(path).suffix.lower() == SUFFIX


@dataclass
class _Document:
    key: str
    entities: dict[str, int] = field(default_factory=dict)  # eid -> cluster number, in order of appearance
    lines: list[str] = field(default_factory=list)
    sentences: int = 0


@dataclass
class _Sentence:
    speaker: str = NO_SPEAKER
    rows: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (word, POS, coreference pieces)
    open: dict[str, list[int]] = field(default_factory=dict)  # eid -> the lines of its open mentions
    first_line: int = 0


def conllu_to_conll2012(text: str, source: str) -> str:
    """The CoNLL-2012 text of a CoNLL-U file's documents (see the module's rules)."""
    reader = _Reader(source)
    for number, line in enumerate(text.splitlines(), start=1):
        reader.line(number, line)
    reader.end_sentence(len(text.splitlines()) + 1)
    reader.end_document()
    return "".join(reader.out)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.out: list[str] = []
        self.document: _Document | None = None
        self.sentence = _Sentence()
        self.eid_field = 0
        self.pending_speaker = NO_SPEAKER
        self.unnamed = 0

    def fail(self, line: int, what: str) -> ConllFormatError:
        where = ""
        if self.document is not None:
            where = f"document {self.document.key}, sentence {self.document.sentences + 1}: "
        return ConllFormatError(self.source, line, where + what)

    def line(self, number: int, line: str) -> None:
        if not line.strip():
            self.end_sentence(number)
            return
        if line.startswith("#"):
            self.comment(number, line)
            return
        columns = line.rstrip("\r\n").split("\t")
        if len(columns) != 10:
            raise self.fail(number, f"a token line of {len(columns)} tab-separated columns, not 10")
        identifier, form, _, upos, xpos, *_, misc = columns
        entity = next((item[len("Entity=") :] for item in misc.split("|") if item.startswith("Entity=")), None)
        if "-" in identifier:  # a multiword token: its words follow
            return
        if "." in identifier:
            if entity:
                raise self.fail(
                    number, f"Entity={entity} on the empty node {identifier}: an empty node is not a word of the text"
                )
            return
        if not form or any(character.isspace() for character in form):
            raise self.fail(number, f"the word {form!r}: a CoNLL-2012 word has no whitespace")
        if self.document is None:
            self.start_document(Path(self.source).stem)
        if not self.sentence.rows:
            self.sentence.first_line = number
            self.sentence.speaker = self.pending_speaker
        pos = xpos if xpos != "_" else upos if upos != "_" else "-"
        self.sentence.rows.append((form, pos, self.brackets(number, entity) if entity else []))

    def comment(self, number: int, line: str) -> None:
        newdoc = _NEWDOC.match(line)
        if newdoc is not None:
            self.end_sentence(number)
            self.end_document()
            self.unnamed += not newdoc["id"]
            self.start_document(newdoc["id"] or f"{Path(self.source).stem}_{self.unnamed}")
            return
        match = _COMMENT.match(line)
        if match is None:
            return
        key, value = match["key"], match["value"]
        if key == "global.Entity":
            fields = value.split("-")
            self.eid_field = fields.index("eid") if "eid" in fields else 0
        elif key == "speaker":
            self.pending_speaker = "_".join(value.split()) or NO_SPEAKER

    def brackets(self, number: int, entity: str) -> list[str]:
        """The CoNLL-2012 coreference pieces of a word's ``Entity=`` chunks, in their order."""
        assert self.document is not None
        chunks = _CHUNK.findall(entity)
        if "".join(chunks) != entity:
            raise self.fail(number, f"Entity={entity}: not a sequence of (eid..., eid) and (eid...) chunks")
        pieces = []
        for chunk in chunks:
            opening, closing = chunk[0] == "(", chunk[-1] == ")"
            content = chunk.strip("()")
            fields = content.split("-")
            eid = fields[self.eid_field] if opening and self.eid_field < len(fields) else content
            if _DISCONTINUOUS.search(eid):
                raise self.fail(
                    number, f"Entity={entity}: the discontinuous mention {eid} (a CoNLL-2012 mention is one span)"
                )
            cluster = self.document.entities.setdefault(eid, len(self.document.entities))
            if opening and closing:
                pieces.append(f"({cluster})")
            elif opening:
                self.sentence.open.setdefault(eid, []).append(number)
                pieces.append(f"({cluster}")
            else:
                if not self.sentence.open.get(eid):
                    raise self.fail(
                        number, f"unbalanced Entity= bracket: '{eid})' closes a mention of {eid} that is not open"
                    )
                self.sentence.open[eid].pop()
                pieces.append(f"{cluster})")
        return pieces

    def end_sentence(self, number: int) -> None:
        sentence, self.sentence = self.sentence, _Sentence()
        self.pending_speaker = NO_SPEAKER
        if not sentence.rows:
            return
        for eid, lines in sentence.open.items():
            if lines:
                raise self.fail(
                    lines[-1], f"unbalanced Entity= bracket: '({eid}' opened here is not closed in its sentence"
                )
        assert self.document is not None
        for index, (word, pos, pieces) in enumerate(sentence.rows):
            coreference = "|".join(pieces) or "-"
            self.document.lines.append(
                f"{self.document.key}\t0\t{index}\t{word}\t{pos}\t-\t-\t-\t-\t{sentence.speaker}\t*\t{coreference}\n"
            )
        self.document.lines.append("\n")
        self.document.sentences += 1

    def start_document(self, key: str) -> None:
        if any(character.isspace() for character in key):
            raise ConllFormatError(
                self.source, None, f"document id {key!r}: a CoNLL-2012 document name has no whitespace"
            )
        self.document = _Document(key)

    def end_document(self) -> None:
        document, self.document = self.document, None
        if document is None or not document.sentences:
            return
        self.out.append(f"#begin document ({document.key})\n")
        self.out.extend(document.lines)
        self.out.append("#end document\n")
