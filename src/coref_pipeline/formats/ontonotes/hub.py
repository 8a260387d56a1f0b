"""The Hub's ``conll2012_ontonotesv5`` Parquet export as CoNLL-2012 files.

Its configs (``english_v4``, ``english_v12``, ``chinese_v4``, ``arabic_v4``) are folders of Parquet files
per split (``train``, ``validation``, ``test``: ``<split>/*.parquet`` or ``<split>-*.parquet``). A row is
one document file of the CoNLL-2012 release: ``document_id`` and its ``sentences``, each with its
``part_id`` (the part number), ``words``, ``pos_tags`` and ``named_entities`` (class labels), the
``parse_tree`` built from the parse bits, ``predicate_lemmas``, ``predicate_framenet_ids``,
``word_senses``, ``speaker``, ``srl_frames`` (BIO tags per predicate) and ``coref_spans``
(``[cluster, first word, last word]`` within the sentence). Rows come in the order of the release's files.

Each sentence is written back in the CoNLL-2012 columns and layout: the parse bits cut from the tree
(``(TOP* ... *)`` when the row has none, as the release marks a sentence without a parse), the class
labels by their names (the file's own, else the dataset script's), ``-`` where the row has no value,
named entities and arguments as brackets again, and each word's coreference brackets in the release's
order (openings by ascending cluster, one-word mentions, closings by descending cluster).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from coref_pipeline.formats.conll import NO_SPEAKER
from coref_pipeline.formats.ontonotes.layout import format_rows
from coref_pipeline.formats.ontonotes.output import SPLITS, OntonotesCorpus
from coref_pipeline.formats.ontonotes.text import OntonotesError

CONFIG_NAME = re.compile(r"(?P<language>english|chinese|arabic)_(?P<version>v\d+)")
HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
DATASET = "conll2012_ontonotesv5"

# The class labels of the dataset's script (huggingface/datasets, datasets/conll2012_ontonotesv5), used
# when a file does not carry its features (the ``huggingface`` schema metadata).
NAMED_ENTITY_TAGS = ("O",) + tuple(
    f"{prefix}-{kind}"
    for kind in (
        "PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "DATE", "TIME", "PERCENT", "MONEY",
        "QUANTITY", "ORDINAL", "CARDINAL", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE",
    )
    for prefix in ("B", "I")
)  # fmt: skip
_ENGLISH_V4_POS = (
    "XX", "``", "$", "''", ",", "-LRB-", "-RRB-", ".", ":", "ADD", "AFX", "CC", "CD", "DT", "EX", "FW", "HYPH",
    "IN", "JJ", "JJR", "JJS", "LS", "MD", "NFP", "NN", "NNP", "NNPS", "NNS", "PDT", "POS", "PRP", "PRP$", "RB",
    "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB",
)  # fmt: skip
POS_TAGS = {
    "english_v4": _ENGLISH_V4_POS,
    "english_v12": (*_ENGLISH_V4_POS[:4], "*", *_ENGLISH_V4_POS[4:46], "VERB", *_ENGLISH_V4_POS[46:]),
    "chinese_v4": (
        "X", "AD", "AS", "BA", "CC", "CD", "CS", "DEC", "DEG", "DER", "DEV", "DT", "ETC", "FW", "IJ", "INF", "JJ",
        "LB", "LC", "M", "MSP", "NN", "NR", "NT", "OD", "ON", "P", "PN", "PU", "SB", "SP", "URL", "VA", "VC", "VE",
        "VV",
    ),
}  # fmt: skip

# What a sentence must hold: field -> (what it is, the Arrow type's test)
_STRING = ("a string", lambda t: _pa().types.is_string(t) or _pa().types.is_large_string(t))
_INTEGER = ("an integer", lambda t: _pa().types.is_integer(t))


def _pa() -> Any:
    import pyarrow

    return pyarrow


def _list_of(test: Any) -> Any:
    def check(arrow_type: Any) -> bool:
        types = _pa().types
        lists = types.is_list(arrow_type) or types.is_large_list(arrow_type) or types.is_fixed_size_list(arrow_type)
        return lists and test(arrow_type.value_type)

    return check


def _struct_with(fields: Mapping[str, Any]) -> Any:
    def check(arrow_type: Any) -> bool:
        if not _pa().types.is_struct(arrow_type):
            return False
        names = {arrow_type.field(i).name: arrow_type.field(i).type for i in range(arrow_type.num_fields)}
        return all(name in names and test(names[name]) for name, test in fields.items())

    return check


SENTENCE_FIELDS: dict[str, tuple[str, Any]] = {
    "part_id": _INTEGER,
    "words": ("a list of strings", _list_of(_STRING[1])),
    "pos_tags": ("a list of class labels", _list_of(lambda t: _INTEGER[1](t) or _STRING[1](t))),
    "parse_tree": _STRING,
    "predicate_lemmas": ("a list of strings", _list_of(_STRING[1])),
    "predicate_framenet_ids": ("a list of strings", _list_of(_STRING[1])),
    "word_senses": ("a list of numbers", _list_of(lambda t: _pa().types.is_floating(t))),
    "speaker": _STRING,
    "named_entities": ("a list of class labels", _list_of(_INTEGER[1])),
    "srl_frames": (
        "a list of {verb, frames}",
        _list_of(_struct_with({"verb": _STRING[1], "frames": _list_of(_STRING[1])})),
    ),
    "coref_spans": ("a list of [cluster, start, end]", _list_of(_list_of(_INTEGER[1]))),
}


def read_hub_corpus(
    parquet_dir: Path, language: str | None, version: str | None, progress: bool = True
) -> OntonotesCorpus:
    """The three CoNLL-2012 files of one config folder of the export (or of the folder holding the configs)."""
    from tqdm.auto import tqdm

    folder, language, version = _config_folder(parquet_dir, language, version)
    files = {split: _split_files(folder, split) for split in SPLITS}
    texts: dict[str, str] = {}
    counts: dict[str, int] = {}
    for split in SPLITS:
        parts: list[str] = []
        for path in files[split]:
            parquet = _open(path)
            pos_names, entity_names = _label_names(parquet, path, f"{language}_{version}")
            rows = tqdm(
                _rows(parquet),
                total=parquet.metadata.num_rows,
                desc=f"ontonotes {path.parent.name}/{path.name}",
                unit="doc",
                disable=None if progress else True,
            )
            parts += [document_text(row, pos_names, entity_names, str(path)) for row in rows]
        texts[split], counts[split] = "".join(parts), len(parts)
    return OntonotesCorpus(language, version, texts, counts)


def _config_folder(parquet_dir: Path, language: str | None, version: str | None) -> tuple[Path, str, str]:
    if not parquet_dir.is_dir():
        raise OntonotesError(f"{parquet_dir}: no such folder (the Hub's {DATASET} Parquet files)")
    named = CONFIG_NAME.fullmatch(parquet_dir.name)
    if named or any(_split_files(parquet_dir, split, required=False) for split in SPLITS):
        language = language or (named["language"] if named else None)
        version = version or (named["version"] if named else None)
        if named and (language, version) != (named["language"], named["version"]):
            raise OntonotesError(f"{parquet_dir}: the {named.group(0)} config, not {language}_{version}")
        if language is None or version is None:
            raise OntonotesError(
                f"{parquet_dir}: which config is it? Name the folder as the Hub does (english_v4, english_v12) "
                "or give the language and the version"
            )
        return parquet_dir, language, version
    configs = sorted(
        (match["language"], match["version"], path)
        for path in parquet_dir.iterdir()
        if path.is_dir() and (match := CONFIG_NAME.fullmatch(path.name))
        if (language is None or match["language"] == language) and (version is None or match["version"] == version)
    )
    if len(configs) != 1:
        found = ", ".join(path.name for *_, path in configs) or "none"
        raise OntonotesError(
            f"{parquet_dir}: {'no' if not configs else 'more than one'} {DATASET} config folder for "
            f"{language or 'any language'}{f' {version}' if version else ''} (found: {found}); give the config's "
            "folder (e.g. english_v4)"
        )
    language, version, path = configs[0]
    return path, language, version


def _split_files(folder: Path, split: str, required: bool = True) -> list[Path]:
    name = HUB_SPLITS[split]
    files = sorted((folder / name).glob("*.parquet")) or sorted(folder.glob(f"{name}-*.parquet"))
    files = files or ([folder / f"{name}.parquet"] if (folder / f"{name}.parquet").is_file() else [])
    if not files and required:
        raise OntonotesError(f"{folder}: no Parquet file of the {name} split ({name}/*.parquet or {name}-*.parquet)")
    return files


def _open(path: Path) -> Any:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, _pa().ArrowException) as error:
        raise OntonotesError(f"{path}: not a Parquet file ({' '.join(str(error).split())})") from None
    check_schema(parquet.schema_arrow, str(path))
    return parquet


def check_schema(schema: Any, source: str) -> None:
    """The export's columns and sentence fields, or an error naming the first that is missing or of another type."""
    expected = f"not the Hub's {DATASET} schema"
    names = schema.names
    for column, (what, test) in (
        ("document_id", _STRING),
        ("sentences", ("a list of sentences", _list_of(lambda t: _pa().types.is_struct(t)))),
    ):
        if column not in names:
            raise OntonotesError(f"{source}: {expected}: no column {column!r} (its columns: {', '.join(names)})")
        if not test(schema.field(column).type):
            raise OntonotesError(f"{source}: {expected}: {column} is {schema.field(column).type}, not {what}")
    sentence = schema.field("sentences").type.value_type
    fields = {sentence.field(i).name: sentence.field(i).type for i in range(sentence.num_fields)}
    for name, (what, test) in SENTENCE_FIELDS.items():
        if name not in fields:
            raise OntonotesError(
                f"{source}: {expected}: its sentences have no {name!r} (they have {', '.join(fields)})"
            )
        if not test(fields[name]):
            raise OntonotesError(f"{source}: {expected}: a sentence's {name} is {fields[name]}, not {what}")


def _label_names(parquet: Any, path: Path, config: str) -> tuple[Sequence[str] | None, Sequence[str]]:
    """The names of the POS and named-entity class labels: the file's own features, else the script's lists."""
    features: dict[str, list[str]] = {}
    metadata = parquet.schema_arrow.metadata or {}
    if b"huggingface" in metadata:
        try:
            _find_class_labels(json.loads(metadata[b"huggingface"]), features)
        except ValueError:
            pass
    sentence = parquet.schema_arrow.field("sentences").type.value_type
    pos_is_text = _STRING[1](sentence.field("pos_tags").type.value_type)
    pos_names = None if pos_is_text else features.get("pos_tags") or POS_TAGS.get(config)
    if pos_names is None and not pos_is_text:
        raise OntonotesError(f"{path}: no names for the POS class labels of {config} (the file carries none)")
    return pos_names, features.get("named_entities") or NAMED_ENTITY_TAGS


def _find_class_labels(node: Any, found: dict[str, list[str]], key: str = "") -> None:
    if isinstance(node, dict):
        if node.get("_type") == "ClassLabel" and key and "names" in node:
            found.setdefault(key, list(node["names"]))
            return
        for name, value in node.items():
            _find_class_labels(value, found, key if name in ("feature", "_type") else name)
    elif isinstance(node, list):
        for value in node:
            _find_class_labels(value, found, key)


def _rows(parquet: Any) -> Iterator[dict[str, Any]]:
    for batch in parquet.iter_batches(batch_size=32):
        yield from batch.to_pylist()


def document_text(
    row: Mapping[str, Any], pos_names: Sequence[str] | None, entity_names: Sequence[str], source: str
) -> str:
    """One row (a document file) in the CoNLL-2012 layout: its parts, each ``#begin document`` ... ``#end document``."""
    name = row["document_id"]
    lines: list[str] = []
    part = None
    for number, sentence in enumerate(row["sentences"], start=1):
        if sentence["part_id"] != part:
            if part is not None:
                lines.append("#end document")
            part = sentence["part_id"]
            lines.append(f"#begin document ({name}); part {part:03d}")
        try:
            lines += format_rows(sentence_rows(name, sentence, pos_names, entity_names))
        except (ValueError, IndexError) as error:
            raise OntonotesError(f"{source}: document {name}, sentence {number}: {error}") from None
        lines.append("")
    if part is not None:
        lines.append("#end document")
    return "\n".join(lines) + "\n" if lines else ""


def sentence_rows(
    name: str, sentence: Mapping[str, Any], pos_names: Sequence[str] | None, entity_names: Sequence[str]
) -> list[list[str]]:
    """The CoNLL-2012 cells of each word of one sentence of a row."""
    words = sentence["words"]
    size = len(words)
    for field in ("pos_tags", "named_entities", "predicate_lemmas", "predicate_framenet_ids", "word_senses"):
        if len(sentence[field]) != size:
            raise ValueError(f"{size} words but {len(sentence[field])} {field}")
    pos = [pos_names[tag] for tag in sentence["pos_tags"]] if pos_names is not None else sentence["pos_tags"]
    bits = parse_bits(sentence["parse_tree"], size)
    speaker = "_".join((sentence["speaker"] or "").split()) or NO_SPEAKER
    entities = bio_brackets([entity_names[tag] for tag in sentence["named_entities"]], entities=True)
    arguments = [bio_brackets(frame["frames"]) for frame in sentence["srl_frames"]]
    if any(len(column) != size for column in arguments):
        raise ValueError(f"{size} words but a predicate's frames of another length")
    coreference = coref_cells(sentence["coref_spans"], size)
    part = str(sentence["part_id"])
    return [
        [
            name,
            part,
            str(index),
            words[index],
            pos[index],
            bits[index],
            sentence["predicate_lemmas"][index] or "-",
            sentence["predicate_framenet_ids"][index] or "-",
            _sense(sentence["word_senses"][index]),
            speaker,
            entities[index],
            *(column[index] for column in arguments),
            coreference[index],
        ]
        for index in range(size)
    ]


_PIECE = re.compile(r"\(([^\s()]+) ([^\s()]+)\)|\(([^\s()]+)|\)")


def parse_bits(tree: str | None, size: int) -> list[str]:
    """Each word's parse bit (``(TOP(S(NP*``, ``*))``) from the tree the export built of them."""
    if tree is None:  # no parse: the release marks the sentence (TOP* ... *)
        return ["(TOP*)"] if size == 1 else ["(TOP*", *["*"] * (size - 2), "*)"]
    bits: list[str] = []
    opened = ""
    for match in _PIECE.finditer(tree):
        if match.group(1) is not None:
            bits.append(opened + "*")
            opened = ""
        elif match.group(3) is not None:
            opened += "(" + match.group(3)
        elif bits:
            bits[-1] += ")"
        else:
            raise ValueError(f"a parse tree that closes before its first word: {tree[:40]!r}")
    if len(bits) != size:
        raise ValueError(f"{size} words but {len(bits)} leaves in its parse tree")
    return bits


def bio_brackets(tags: Sequence[str], entities: bool = False) -> list[str]:
    """BIO tags (``B-ARG0``, ``I-ARG0``, ``O``) as the CoNLL-2012 bracket cells (``(ARG0*``, ``*)``, ``*``).

    A one-word span is ``(ARG0*)`` in an argument column, ``(PERSON)`` in the named-entity column (``entities``).
    """
    cells = []
    for index, tag in enumerate(tags):
        if tag[:2] not in ("B-", "I-"):
            cells.append("*")
            continue
        label = tag[2:]
        following = tags[index + 1] if index + 1 < len(tags) else "O"
        ends = following != f"I-{label}"
        if tag[0] == "B" and ends and entities:
            cells.append(f"({label})")
        else:
            cells.append(("(" + label + "*" if tag[0] == "B" else "*") + (")" if ends else ""))
    return cells


def coref_cells(spans: Sequence[Sequence[int]], size: int) -> list[str]:
    """Each word's coreference cell from ``[cluster, first, last]`` mentions, in the release's bracket order."""
    openings: dict[int, list[int]] = {}
    singles: dict[int, list[int]] = {}
    closings: dict[int, list[int]] = {}
    for cluster, start, end in spans:
        if not 0 <= start <= end < size:
            raise ValueError(f"a mention [{start}, {end}] outside its {size} words")
        if start == end:
            singles.setdefault(start, []).append(cluster)
        else:
            openings.setdefault(start, []).append(cluster)
            closings.setdefault(end, []).append(cluster)
    cells = []
    for word in range(size):
        pieces = [f"({cluster}" for cluster in sorted(openings.get(word, ()))]
        pieces += [f"({cluster})" for cluster in sorted(singles.get(word, ()))]
        pieces += [f"{cluster})" for cluster in sorted(closings.get(word, ()), reverse=True)]
        cells.append("|".join(pieces) or "-")
    return cells


def _sense(value: float | None) -> str:
    if value is None:
        return "-"
    import numpy as np

    return np.format_float_positional(np.float32(value), trim="-")
