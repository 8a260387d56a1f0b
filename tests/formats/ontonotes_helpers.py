"""OntoNotes in its distributed shapes, made from CoNLL-2012 text, for the ``ontonotes`` tests.

- :func:`split_into_release`: a CoNLL-2012 file cut into what the CoNLL-2012 scripts start from, a
  skeleton per document (``[WORD]`` in the word column) and the release's ``.parse`` trees (built from the
  parse bits; a flat tree where a sentence has none);
- :func:`hub_rows` and :func:`write_hub_parquet`: the same text as the Hub's ``conll2012_ontonotesv5``
  export holds it: one row per document file, built as the dataset's script builds it (its reader of
  CoNLL-2012 files: parse trees from the parse bits, BIO tags, ``coref_spans`` as a set, class labels),
  written with pyarrow in the export's schema (its Arrow types and ``huggingface`` metadata).
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from coref_pipeline.formats.ontonotes.hub import NAMED_ENTITY_TAGS, POS_TAGS

PTB_ESCAPES = {"(": "-LRB-", ")": "-RRB-"}


def documents(text: str) -> list[tuple[str, list[str]]]:
    """``(name, lines)`` of each document file: the consecutive parts of one name, ``#begin`` to ``#end``
    (a blank line between two documents belongs to neither: a release's file ends at its ``#end document``)."""
    found: list[tuple[str, list[str]]] = []
    inside = False
    for line in text.splitlines():
        match = re.match(r"#begin document \((.*)\); part \d+", line)
        if match and (not found or found[-1][0] != match.group(1)):
            found.append((match.group(1), []))
        inside = inside or bool(match)
        if inside:
            found[-1][1].append(line)
        inside = inside and not line.startswith("#end document")
    return found


def sentences(lines: list[str]) -> list[list[list[str]]]:
    """The rows (cells) of each sentence of a document's lines."""
    result: list[list[list[str]]] = [[]]
    for line in lines:
        if line.startswith("#"):
            continue
        if line.strip():
            result[-1].append(line.split())
        elif result[-1]:
            result.append([])
    return [sentence for sentence in result if sentence]


def tree_of(rows: list[list[str]]) -> str:
    """The release's tree of a sentence: its parse bits with ``(POS word)`` for each ``*``; flat without bits."""
    if any(row[3] in PTB_ESCAPES or row[4] in PTB_ESCAPES for row in rows):
        raise ValueError("a word or POS that is a parenthesis: escape it as the release does (-LRB-, -RRB-)")
    if all("*" in row[5] for row in rows):
        pieces = []
        for row in rows:
            left, right = row[5].split("*")
            pieces += [f"({label}" for label in re.findall(r"\(([^()]+)", left)]
            pieces.append(f"({row[4]} {row[3]})")
            pieces += [")"] * right.count(")")
        return " ".join(pieces)
    return "(TOP " + " ".join(f"({row[4]} {row[3]})" for row in rows) + ")"


def split_into_release(text: str, root: Path, language: str = "english") -> list[Path]:
    """Each document file of ``text`` as a skeleton (``root/conll-2012/v4/...``) and a ``.parse``
    (``root/release/data/files/data/...``), all in the train, development and test partitions; the files
    are numbered so that the scripts' order is the text's. Returns the skeletons."""
    written = []
    for index, (_, lines) in enumerate(documents(text)):
        document = f"nw/rt/{index // 100:02d}/doc_{index:05d}"
        trees = [tree_of(rows) for rows in sentences(lines)]
        parse = root / "release" / "data" / "files" / "data" / language / "annotations" / f"{document}.parse"
        parse.parent.mkdir(parents=True, exist_ok=True)
        parse.write_text("\n\n".join(trees) + "\n", encoding="utf-8")
        skeleton_lines = []
        for line in lines:
            cells = line.split()
            if line.startswith("#") or not cells:
                skeleton_lines.append(line)
            else:
                skeleton_lines.append(" ".join([*cells[:3], "[WORD]", *cells[4:]]))
        for partition in ("train", "development", "test"):
            skeleton = (
                root / "conll-2012" / "v4" / "data" / partition / "data" / language / "annotations"
                / f"{document}.v4_gold_skel"
            )  # fmt: skip
            skeleton.parent.mkdir(parents=True, exist_ok=True)
            skeleton.write_text("\n".join(skeleton_lines) + "\n", encoding="utf-8")
            written.append(skeleton)
    return written


# ------------------------------------------------------------------ the Hub's export


def _bio(annotations: list[list[str]]) -> list[list[str]]:
    """The script's BIO tags of each bracket column (named entities, then each predicate's arguments)."""
    columns: list[list[str]] = [[] for _ in annotations[0]]
    current: list[str | None] = [None] * len(columns)
    for cells in annotations:
        for index, cell in enumerate(cells):
            label = cell.strip("()*")
            if "(" in cell:
                columns[index].append("B-" + label)
                current[index] = label
            elif current[index] is not None:
                columns[index].append("I-" + current[index])
            else:
                columns[index].append("O")
            if ")" in cell:
                current[index] = None
    return columns


def hub_sentence(rows: list[list[str]], pos_names: list[str], seed: int) -> dict:
    """One sentence as the export's script builds it from the rows of a CoNLL-2012 file."""
    pieces, pos_tags, verbs = [], [], []
    clusters: dict[int, list[tuple[int, int]]] = defaultdict(list)
    stacks: dict[int, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        word, pos, bit = row[3], row[4], row[5]
        if pos != "XX" and word != "XX":
            leaf = PTB_ESCAPES.get(word, word)
            pos = PTB_ESCAPES.get(pos, pos)
            left, right = bit.split("*")
            pieces.append(f"{left} ({pos} {leaf}) {')' * right.count(')')}")
        else:
            pieces.append(None)
        pos_tags.append(pos)
        if any("(V" in cell for cell in row[11:-1]):
            verbs.append(word)
        if row[-1] != "-":
            for piece in row[-1].split("|"):
                if piece[0] == "(" and piece[-1] == ")":
                    clusters[int(piece[1:-1])].append((index, index))
                elif piece[0] == "(":
                    stacks[int(piece[1:])].append(index)
                else:
                    clusters[int(piece[:-1])].append((stacks[int(piece[:-1])].pop(), index))
    columns = _bio([row[10:-1] for row in rows])
    spans = sorted({(cluster, *span) for cluster, found in clusters.items() for span in found})
    random.Random(seed).shuffle(spans)  # a set: the export keeps no order
    return {
        "part_id": int(rows[0][1]),
        "words": [row[3] for row in rows],
        "pos_tags": [pos_names.index(tag) for tag in pos_tags],
        "parse_tree": "".join(pieces) if all(pieces) else None,
        "predicate_lemmas": [None if row[6] == "-" else row[6] for row in rows],
        "predicate_framenet_ids": [None if row[7] == "-" else row[7] for row in rows],
        "word_senses": [None if row[8] == "-" else float(row[8]) for row in rows],
        "speaker": None if rows[0][9] == "-" else rows[0][9],
        "named_entities": [NAMED_ENTITY_TAGS.index(tag) for tag in columns[0]],
        "srl_frames": [{"verb": verb, "frames": frames} for verb, frames in zip(verbs, columns[1:], strict=False)],
        "coref_spans": [list(span) for span in spans],
    }


def hub_rows(text: str, config: str = "english_v4") -> list[dict]:
    """The export's rows of a CoNLL-2012 file: one per document file, its parts' sentences in order."""
    pos_names = list(POS_TAGS[config])
    rows = []
    for number, (name, lines) in enumerate(documents(text)):
        found = [hub_sentence(rows, pos_names, seed=number * 1000 + i) for i, rows in enumerate(sentences(lines))]
        rows.append({"document_id": name, "sentences": found})
    return rows


def _value(dtype: str) -> dict:
    return {"dtype": dtype, "id": None, "_type": "Value"}


def _sequence(feature: dict, length: int = -1) -> dict:
    return {"feature": feature, "length": length, "id": None, "_type": "Sequence"}


def hub_features(config: str) -> dict:
    """The export's features as ``datasets`` writes them in a Parquet file's ``huggingface`` metadata."""
    labels = {"num_classes": len(POS_TAGS[config]), "names": list(POS_TAGS[config]), "id": None, "_type": "ClassLabel"}
    entities = {"num_classes": len(NAMED_ENTITY_TAGS), "names": list(NAMED_ENTITY_TAGS), "id": None}
    return {
        "document_id": _value("string"),
        "sentences": [
            {
                "part_id": _value("int32"),
                "words": _sequence(_value("string")),
                "pos_tags": _sequence(labels),
                "parse_tree": _value("string"),
                "predicate_lemmas": _sequence(_value("string")),
                "predicate_framenet_ids": _sequence(_value("string")),
                "word_senses": _sequence(_value("float32")),
                "speaker": _value("string"),
                "named_entities": _sequence({**entities, "_type": "ClassLabel"}),
                "srl_frames": [{"verb": _value("string"), "frames": _sequence(_value("string"))}],
                "coref_spans": _sequence(_sequence(_value("int32"), length=3)),
            }
        ],
    }


SENTENCE_TYPE = pa.struct(
    [
        ("part_id", pa.int32()),
        ("words", pa.list_(pa.string())),
        ("pos_tags", pa.list_(pa.int64())),
        ("parse_tree", pa.string()),
        ("predicate_lemmas", pa.list_(pa.string())),
        ("predicate_framenet_ids", pa.list_(pa.string())),
        ("word_senses", pa.list_(pa.float32())),
        ("speaker", pa.string()),
        ("named_entities", pa.list_(pa.int64())),
        ("srl_frames", pa.list_(pa.struct([("verb", pa.string()), ("frames", pa.list_(pa.string()))]))),
        ("coref_spans", pa.list_(pa.list_(pa.int32(), 3))),
    ]
)


def hub_schema(config: str = "english_v4", metadata: bool = True) -> pa.Schema:
    """The Arrow schema of the export's files (``datasets``' types for its features)."""
    schema = pa.schema([("document_id", pa.string()), ("sentences", pa.list_(SENTENCE_TYPE))])
    if metadata:
        info = {"info": {"features": hub_features(config)}}
        schema = schema.with_metadata({b"huggingface": json.dumps(info).encode()})
    return schema


def write_hub_parquet(
    folder: Path, texts: dict[str, str], config: str = "english_v4", layout: str = "folders", metadata: bool = True
) -> Path:
    """``folder/<config>/`` with each split's rows: ``train/0000.parquet`` (``layout="folders"``, the parquet
    branch) or ``train-00000-of-00001.parquet`` (``"files"``, the main branch)."""
    root = folder / config
    for split, text in texts.items():
        name = {"dev": "validation"}.get(split, split)
        path = root / name / "0000.parquet" if layout == "folders" else root / f"{name}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(hub_rows(text, config), schema=hub_schema(config, metadata))
        pq.write_table(table, path)
    return root
