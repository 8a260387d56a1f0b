"""Kedro datasets for the project's file formats (CoNLL-2012 text and jsonlines)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from coref_pipeline.conll import atomic_write_text


def partition_name(split: str, language: str, max_segment_len: int) -> str:
    """The jsonlines partition of a split at a segment length, named as ``minimize.py`` names files."""
    return f"{split}.{language}.{max_segment_len}"


def select_partition(partitions: Mapping[str, Any], split: str, language: str, max_segment_len: int) -> list:
    """The documents of one partition of a ``PartitionedDataset`` (loaded if lazy)."""
    name = partition_name(split, language, max_segment_len)
    if name not in partitions:
        raise KeyError(
            f"no segmented documents {name!r} (have {sorted(partitions)}); "
            f"add {max_segment_len} to segment.max_segment_lens"
        )
    partition = partitions[name]
    return partition() if callable(partition) else partition


@dataclass(frozen=True)
class ConllFile:
    """The text of a CoNLL-2012 file and the path it came from (for error messages)."""

    path: str
    text: str


class ConllFileDataset(AbstractDataset[None, ConllFile]):
    """Loads a CoNLL-2012 file as a :class:`ConllFile`; parsing is left to the nodes."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = PurePosixPath(filepath)
        self.metadata = metadata

    def load(self) -> ConllFile:
        path = Path(self._filepath)
        if not path.is_file():
            raise DatasetError(f"CoNLL-2012 file not found: {path}")
        return ConllFile(path=str(path), text=path.read_text(encoding="utf-8"))

    def save(self, data: None) -> None:
        raise DatasetError(f"{self.__class__.__name__} is read-only ({self._filepath})")

    def _exists(self) -> bool:
        return Path(self._filepath).is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class JsonLinesDataset(AbstractDataset[list, list]):
    """A list of JSON objects, one per line; written atomically (temporary file, then rename)."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = PurePosixPath(filepath)
        self.metadata = metadata

    def load(self) -> list[dict[str, Any]]:
        path = Path(self._filepath)
        records = []
        with path.open(encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise DatasetError(f"{path}:{line_number}: not valid JSON: {error}") from None
        return records

    def save(self, data: list[dict[str, Any]]) -> None:
        atomic_write_text(Path(self._filepath), "".join(json.dumps(record) + "\n" for record in data))

    def _exists(self) -> bool:
        return Path(self._filepath).is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class CorefModelDataset(AbstractDataset):
    """A trained model directory (safetensors weights, JSON config, tokenizer)."""

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._path = PurePosixPath(path)
        self.metadata = metadata

    def load(self) -> Any:
        from coref_pipeline.predict import CorefModel

        return CorefModel.load(Path(self._path))

    def save(self, data: Any) -> None:
        data.save(Path(self._path))

    def _exists(self) -> bool:
        return (Path(self._path) / "coref_config.json").is_file()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}
