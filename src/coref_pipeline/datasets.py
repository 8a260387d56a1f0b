"""Kedro datasets for the project's file formats: CoNLL-2012 text, jsonlines, model directories.

These adapt the library's readers and writers to Kedro's catalog; the library never imports them.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from coref_pipeline.conll import ConllFile
from coref_pipeline.files import JsonLinesError, read_jsonlines, write_jsonlines


class _FileDataset(AbstractDataset):
    """A dataset stored at one path."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = PurePosixPath(filepath)
        self.metadata = metadata

    @property
    def path(self) -> Path:
        return Path(self._filepath)

    def _exists(self) -> bool:
        return self.path.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class ConllFileDataset(_FileDataset):
    """Loads a CoNLL-2012 file as a :class:`~coref_pipeline.conll.ConllFile`; parsing is left to the nodes."""

    def load(self) -> ConllFile:
        if not self.path.is_file():
            raise DatasetError(f"CoNLL-2012 file not found: {self.path}")
        return ConllFile.read(self.path)

    def save(self, data: None) -> None:
        raise DatasetError(f"{self.__class__.__name__} is read-only ({self._filepath})")


class JsonLinesDataset(_FileDataset):
    """A list of JSON objects, one per line; written atomically (temporary file, then rename)."""

    def load(self) -> list[dict[str, Any]]:
        try:
            return read_jsonlines(self.path)
        except JsonLinesError as error:
            raise DatasetError(str(error)) from None

    def save(self, data: list[dict[str, Any]]) -> None:
        write_jsonlines(self.path, data)


class CorefModelDataset(AbstractDataset):
    """A trained model directory (safetensors weights, JSON config, tokenizer)."""

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._path = PurePosixPath(path)
        self.metadata = metadata

    def load(self) -> Any:
        from coref_pipeline.inference import CorefModel

        return CorefModel.load(Path(self._path))

    def save(self, data: Any) -> None:
        data.save(Path(self._path))

    def _exists(self) -> bool:
        return (Path(self._path) / "coref_config.json").is_file()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}
