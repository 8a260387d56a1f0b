"""Kedro datasets for the project's file formats: CoNLL-2012 text, jsonlines, model directories,
and :class:`AtomicDataset`, which saves any one-file Kedro dataset whole or not at all.

These adapt the library's readers and writers to Kedro's catalog; the library never imports them.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from coref_pipeline.errors import OutputError, os_refusal
from coref_pipeline.files import (
    JsonLinesError,
    atomic_directory,
    atomic_path,
    atomic_write_json,
    atomic_write_text,
    read_jsonlines,
    write_jsonlines,
)
from coref_pipeline.formats.conll import ConllFile


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
    """A CoNLL-2012 file as a :class:`~coref_pipeline.formats.conll.ConllFile` (a ``.conllu`` file is read as
    its CoNLL-2012 text); parsing is left to the nodes. Saving writes the text atomically (``ontonotes``)."""

    def load(self) -> ConllFile:
        if not self.path.is_file():
            raise DatasetError(f"CoNLL-2012 file not found: {self.path}")
        return ConllFile.read(self.path)

    def save(self, data: ConllFile) -> None:
        atomic_write_text(self.path, data.text)


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
        from coref_pipeline.serving.coref_model import CorefModel

        return CorefModel.load(Path(self._path))

    def save(self, data: Any) -> None:
        data.save(Path(self._path))

    def _exists(self) -> bool:
        return (Path(self._path) / "coref_config.json").is_file()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}


class TestSetScoresDataset(AbstractDataset):
    """One model's scores on the named test sets (``evaluate``'s ``score_{model}_test_sets``).

    Saves ``{set: TestSetScores or a metrics dict}`` as two folders, each replaced whole: ``metrics_path``
    holds one metrics file per set, ``SET.json`` (what ``dvc metrics show`` lists; a plain dict is written
    as it is: the corpus's own ``test``), ``outputs_path`` each set's CoNLL response, every score, the
    per-document table, the breakdown by length, speakers and genre and its chart (as ``evaluate`` writes
    them for the corpus's splits). Loads ``{set: metrics}`` from ``metrics_path``.
    """

    def __init__(self, metrics_path: str, outputs_path: str, metadata: dict[str, Any] | None = None) -> None:
        self._metrics_path = PurePosixPath(metrics_path)
        self._outputs_path = PurePosixPath(outputs_path)
        self.metadata = metadata

    def load(self) -> dict[str, dict[str, float]]:
        return _load_metrics(Path(self._metrics_path))

    def save(self, data: dict[str, Any]) -> None:
        with (
            atomic_directory(Path(self._outputs_path)) as outputs,
            atomic_directory(Path(self._metrics_path)) as metrics,
        ):
            _write_scores(data, metrics, outputs)

    def _exists(self) -> bool:
        return Path(self._metrics_path).is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._metrics_path), "outputs_path": str(self._outputs_path)}


class NamedModelsScoresDataset(TestSetScoresDataset):
    """The models of ``evaluate.models`` on the corpus's test and the named sets: ``{model: {set: scores}}``,
    each model in a folder of its own under both paths (laid out as :class:`TestSetScoresDataset`'s). Both
    folders are written even for no model, with a ``.gitkeep`` (which ``.dvcignore`` names) so that git
    keeps the metrics folder."""

    def load(self) -> dict[str, dict[str, dict[str, float]]]:
        root = Path(self._metrics_path)
        return {folder.name: _load_metrics(folder) for folder in sorted(root.iterdir()) if folder.is_dir()}

    def save(self, data: dict[str, dict[str, Any]]) -> None:
        with (
            atomic_directory(Path(self._outputs_path)) as outputs,
            atomic_directory(Path(self._metrics_path)) as metrics,
        ):
            for root in (outputs, metrics):
                (root / ".gitkeep").touch()
            for model, scores in data.items():
                (outputs / model).mkdir()
                (metrics / model).mkdir()
                _write_scores(scores, metrics / model, outputs / model)


def _load_metrics(folder: Path) -> dict[str, dict[str, float]]:
    return {
        path.name.removesuffix(".json"): json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(folder.glob("*.json"))
    }


def _write_scores(data: dict[str, Any], metrics: Path, outputs: Path) -> None:
    """``TestSetScoresDataset``'s files for one model: metrics per set in ``metrics``, the rest in ``outputs``."""
    from matplotlib import pyplot

    from coref_pipeline.studies.cross_corpus import TestSetScores

    for name, scores in data.items():
        if isinstance(scores, TestSetScores):
            report = scores.report
            (outputs / f"{name}.response.v4_gold_conll").write_text(report.response, encoding="utf-8")
            atomic_write_json(report.scores, outputs / f"{name}.scores.json")
            report.breakdown.to_csv(outputs / f"{name}.breakdown.csv", index=False)
            report.documents.to_parquet(outputs / f"{name}.documents.parquet")
            report.f1_by_length.savefig(outputs / f"{name}.f1_by_length.png", dpi=120, format="png")
            pyplot.close(report.f1_by_length)
        values = scores.metrics if isinstance(scores, TestSetScores) else scores
        atomic_write_json(values, metrics / f"{name}.json")


class AtomicDataset(AbstractDataset):
    """Any Kedro dataset stored in one local file (``dataset``: its type, or its configuration without
    ``filepath``), saved whole or not at all: to a temporary file beside ``filepath``, then renamed
    onto it. A run that fails or is killed while saving (a full disk, say) leaves the earlier file as
    it was. Loading and ``exists`` are the wrapped dataset's own.

    .. code-block:: yaml

        word_documents_train:
          type: coref_pipeline.datasets.AtomicDataset
          dataset: pandas.ParquetDataset
          filepath: data/02_intermediate/train.word_documents.parquet
    """

    def __init__(self, dataset: str | dict[str, Any], filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._config = {"type": dataset} if isinstance(dataset, str) else dict(dataset)
        if "filepath" in self._config:
            raise DatasetError(f"AtomicDataset {filepath}: give filepath beside dataset, not inside it")
        self._filepath = PurePosixPath(filepath)
        self._dataset = self._at(Path(self._filepath))
        self.metadata = metadata

    def _at(self, path: Path) -> AbstractDataset:
        return AbstractDataset.from_config(f"atomic:{self._filepath}", {**self._config, "filepath": str(path)})

    def load(self) -> Any:
        return self._dataset.load()

    def save(self, data: Any) -> None:
        try:
            with atomic_path(Path(self._filepath)) as temporary:
                self._at(temporary).save(data)
        except DatasetError as error:  # the wrapped dataset's: a refused write names the file it is for
            refusal = os_refusal(error)
            if refusal is None:
                raise
            raise OutputError(self._filepath, refusal.errno) from error

    def _exists(self) -> bool:
        return self._dataset.exists()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "dataset": self._config["type"]}
