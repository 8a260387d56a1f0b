"""OntoNotes 5.0 as CoNLL-2012 files, the way the CoNLL-2012 scripts make them (Joshi et al.'s
``setup_training.sh``): ``train``/``dev``/``test.<language>.<version>_gold_conll``.

Two routes give the same files:

- the LDC release and the CoNLL-2012 skeletons (:func:`release_corpus`): each gold skeleton's word
  column filled from its document's ``.parse`` trees as ``skeleton2conll.py`` fills it (``trees``,
  ``skeletons``), laid out as it lays them out (``layout``), each split's documents concatenated in the
  order of ``compile_partition``'s ``cat annotations/*/*/*/*.v4_gold_conll`` (byte order of the names);
- the Hub's ``conll2012_ontonotesv5`` Parquet export (:func:`hub_corpus`, ``hub``).

:func:`build_corpus` runs the one a :class:`OntonotesSettings` names (the ``ontonotes`` pipeline);
:meth:`OntonotesCorpus.write` writes the folder whole or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from coref_pipeline.config_base import Config, ConfigError
from coref_pipeline.formats.ontonotes.output import SPLITS, OntonotesCorpus
from coref_pipeline.formats.ontonotes.skeletons import Skeleton, fill_skeleton, find_skeletons
from coref_pipeline.formats.ontonotes.text import OntonotesError, decode
from coref_pipeline.formats.ontonotes.trees import read_parse_trees

__all__ = [
    "SPLITS",
    "OntonotesCorpus",
    "OntonotesError",
    "OntonotesSettings",
    "ReleaseSource",
    "build_corpus",
    "hub_corpus",
    "release_corpus",
]

logger = logging.getLogger(__name__)

# The languages whose words the scripts take from the .parse trees alone (Arabic's come from .lemma files too).
RELEASE_LANGUAGES = ("english", "chinese")
EDITED_REMOVED = ("english",)  # setup's skeleton2conll.sh passes -edited for English only
PARTITION_SPLITS = {"train": "train", "development": "dev"}  # and the test partition -> "test"


@dataclass(frozen=True)
class ReleaseSource(Config):
    """Where the release and the skeletons are (an entry of ``ontonotes.from_release``)."""

    what: ClassVar[str] = "ontonotes.from_release"

    release: str = ""  # ontonotes-release-5.0, or its data/files/data
    skeletons: str = ""  # the CoNLL-2012 skeletons: a folder of the .tar.gz archives, or where they were extracted

    def __post_init__(self) -> None:
        self.require(bool(self.release), "release", "a folder (ontonotes-release-5.0)")
        self.require(bool(self.skeletons), "skeletons", "a folder (the CoNLL-2012 skeletons)")


@dataclass(frozen=True)
class OntonotesSettings(Config):
    """The ``ontonotes`` parameters: at most one source, keyed by its language."""

    what: ClassVar[str] = "ontonotes"

    from_release: dict = field(default_factory=dict)  # {language: {release: DIR, skeletons: DIR}}
    from_parquet: dict = field(default_factory=dict)  # {language: the Hub's config folder, e.g. .../english_v4}
    version: str | None = None  # v4 or v12; null: the one the skeletons (the Parquet folder) hold
    test_partition: str = "test"  # the skeletons' test partition (the v12 tree also has conll-2012-test)

    def __post_init__(self) -> None:
        sources = [*self.from_release, *self.from_parquet]
        if len(sources) > 1:
            raise ConfigError(f"ontonotes: one source at a time (from_release and from_parquet name {sorted(sources)})")
        for language, entry in self.from_release.items():
            if not isinstance(entry, Mapping):
                raise ConfigError(f"ontonotes key 'from_release.{language}' must be {{release: DIR, skeletons: DIR}}")
            ReleaseSource.from_dict(entry)
        for language, folder in self.from_parquet.items():
            if not isinstance(folder, str):
                raise ConfigError(f"ontonotes key 'from_parquet.{language}' must be a folder, got {folder!r}")
        if self.version is not None and not self.version.startswith("v"):
            self.require(False, "version", "v4, v12 or null")

    @property
    def language(self) -> str | None:
        return next(iter([*self.from_release, *self.from_parquet]), None)


def build_corpus(settings: OntonotesSettings, progress: bool = True) -> OntonotesCorpus:
    """The corpus from the source ``settings`` name (the ``ontonotes`` pipeline's one entry point)."""
    for language, entry in settings.from_release.items():
        source = ReleaseSource.from_dict(entry)
        return release_corpus(
            source.release, source.skeletons, language, settings.version, settings.test_partition, progress
        )
    for language, folder in settings.from_parquet.items():
        return hub_corpus(folder, language, settings.version, progress)
    raise ConfigError(
        "ontonotes: no source (from_release and from_parquet are both empty): name the release and the "
        "skeletons, or the Hub's Parquet folder"
    )


def release_data_dir(release: Path, language: str) -> Path:
    """The release's ``data/files/data`` folder (``release`` may be it or ``ontonotes-release-5.0``)."""
    if not release.is_dir():
        raise OntonotesError(f"{release}: no such folder (the OntoNotes 5.0 release)")
    for folder in (release / "data" / "files" / "data", release):
        if (folder / language / "annotations").is_dir():
            return folder
    raise OntonotesError(
        f"{release}: not an OntoNotes 5.0 release: no data/files/data/{language}/annotations in it "
        "(give ontonotes-release-5.0 or its data/files/data)"
    )


def release_corpus(
    release: str | Path,
    skeletons: str | Path,
    language: str = "english",
    version: str | None = None,
    test_partition: str = "test",
    progress: bool = True,
) -> OntonotesCorpus:
    """The CoNLL-2012 files the scripts make from the release and the gold skeletons (``*_gold_skel``);
    ``progress``: a progress bar on a terminal.

    A document whose filled file (``*_gold_conll``) is already beside the skeletons without its skeleton is
    taken as it is, as ``compile_partition`` takes every ``*_gold_conll`` it finds.
    """
    from tqdm.auto import tqdm

    if language not in RELEASE_LANGUAGES:
        raise OntonotesError(
            f"{language}: the CoNLL-2012 scripts fill only {' and '.join(RELEASE_LANGUAGES)} from the trees "
            "(Arabic's words come from the release's .lemma files, which this conversion does not read)"
        )
    data_dir = release_data_dir(Path(release), language)
    partitions = {**PARTITION_SPLITS, test_partition: "test"}

    def wanted(skeleton: Skeleton) -> bool:
        return (
            skeleton.language == language
            and skeleton.partition in partitions
            and (version is None or skeleton.version == version)
        )

    where, found = find_skeletons(Path(skeletons), wanted)
    logger.info("Reading the %s skeletons of %s", language, where)
    by_version: dict[str, dict[str, dict[str, tuple[Skeleton, str]]]] = {}
    for skeleton, data in tqdm(found, desc=f"ontonotes {language}", unit="doc", disable=None if progress else True):
        documents = by_version.setdefault(skeleton.version, {}).setdefault(partitions[skeleton.partition], {})
        earlier = documents.get(skeleton.conll_name)
        if earlier is not None and earlier[0].kind == skeleton.kind:
            raise OntonotesError(f"{skeleton.source}: document {skeleton.document} is also in {earlier[0].source}")
        if skeleton.kind == "conll":
            if earlier is None:
                documents[skeleton.conll_name] = (skeleton, decode(data, skeleton.source))
            continue
        documents[skeleton.conll_name] = (skeleton, _fill(skeleton, data, data_dir, language))
    chosen = _one_version(by_version, version, language, Path(skeletons), where)
    missing = [split for split in SPLITS if not by_version[chosen].get(split)]
    if missing:
        names = {split: partition for partition, split in partitions.items()}
        raise OntonotesError(
            f"{skeletons}: no {language} {chosen} gold skeletons of the "
            f"{', '.join(names[split] for split in missing)} partition in {where}"
        )
    texts = {split: "".join(text for _, (_, text) in sorted(by_version[chosen][split].items())) for split in SPLITS}
    files = {split: len(by_version[chosen][split]) for split in SPLITS}
    return OntonotesCorpus(language, chosen, texts, files)


def _fill(skeleton: Skeleton, data: bytes, data_dir: Path, language: str) -> str:
    parse = data_dir / language / "annotations" / f"{skeleton.document}.parse"
    try:
        parse_text = decode(parse.read_bytes(), str(parse))
    except FileNotFoundError:
        raise OntonotesError(
            f"{skeleton.source}: document {skeleton.document} has no tree file in the release ({parse} is missing)"
        ) from None
    trees = read_parse_trees(parse_text, str(parse), remove_edited=language in EDITED_REMOVED)
    return fill_skeleton(decode(data, skeleton.source), skeleton.source, trees)


def _one_version(by_version: Mapping[str, object], version: str | None, language: str, folder: Path, where: str) -> str:
    if not by_version:
        wanted = f"{version}_gold_skel" if version else "v4_gold_skel"
        raise OntonotesError(
            f"{folder}: no {language} gold skeletons in {where} (expected conll-2012/v4/data/<partition>/data/"
            f"{language}/annotations/<genre>/<source>/<nn>/<name>.{wanted}, extracted or in the "
            "conll-2012-*.tar.gz archives)"
        )
    if len(by_version) > 1:
        raise OntonotesError(
            f"{folder}: {language} skeletons of several versions ({', '.join(sorted(by_version))}): choose one "
            "(--version, or ontonotes.version)"
        )
    return next(iter(by_version))


def hub_corpus(
    parquet_dir: str | Path, language: str | None = "english", version: str | None = None, progress: bool = True
) -> OntonotesCorpus:
    """The CoNLL-2012 files of the Hub's ``conll2012_ontonotesv5`` Parquet export (see ``hub``)."""
    from coref_pipeline.formats.ontonotes.hub import read_hub_corpus

    return read_hub_corpus(Path(parquet_dir), language, version, progress)
