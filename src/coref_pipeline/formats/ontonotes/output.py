"""The three CoNLL-2012 files of a converted OntoNotes: what every route (release, Hub) gives."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from coref_pipeline.files import atomic_directory
from coref_pipeline.formats.conll import ConllFile

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class OntonotesCorpus:
    """Each split's CoNLL-2012 text, its documents in the order the CoNLL-2012 scripts compile them."""

    language: str
    version: str  # v4, v12: the files are named {split}.{language}.{version}_gold_conll
    texts: Mapping[str, str]  # split -> the file's text
    files: Mapping[str, int]  # split -> how many document files (skeletons, Hub rows) it holds

    def file_name(self, split: str) -> str:
        return f"{split}.{self.language}.{self.version}_gold_conll"

    def conll_file(self, split: str, folder: str | Path = ".") -> ConllFile:
        """The split as a :class:`ConllFile` named as it is written in ``folder``."""
        return ConllFile(str(Path(folder) / self.file_name(split)), self.texts[split])

    def write(self, out_dir: str | Path) -> list[Path]:
        """The three files in ``out_dir``, which is replaced whole or not at all."""
        out_dir = Path(out_dir)
        with atomic_directory(out_dir) as folder:
            for split in SPLITS:
                (folder / self.file_name(split)).write_text(self.texts[split], encoding="utf-8")
        written = [out_dir / self.file_name(split) for split in SPLITS]
        for split, path in zip(SPLITS, written, strict=True):
            logger.info("%s: %d document files", path, self.files[split])
        return written
