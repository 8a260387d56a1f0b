"""What the benchmark programs share: the project's paths, LitBank, the committed presets, the one training step
timed, the peer configuration (every timed figure's reference speed), the host's name, and small reporting helpers.

Each program under ``benchmarks/<subject>/`` puts the project root on ``sys.path`` and imports this module, so that
a figure is timed, and its host named, the same way everywhere.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import torch
import yaml

from coref_pipeline.config_base import ConfigError
from coref_pipeline.evaluation.predictions import score_predictions
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import SegmentedCorpus, preprocess_corpus, segment_corpus
from coref_pipeline.models.config import BaselineConfig, TrainingConfig, baseline_settings, resolve_preset
from coref_pipeline.models.document import DocumentTensors, random_crop
from coref_pipeline.runtime.devices import resolve_precision
from coref_pipeline.runtime.onednn import ONEDNN_CACHE_ENVIRONMENT
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import build_baseline, seed_everything
from coref_pipeline.training.engine import Engine
from coref_pipeline.training.loop import (
    configure_encoder_for_training,
    decide_for_corpus,
    decide_for_run,
    training_step,
)
from coref_pipeline.training.optim import Optimisers, build_optimisers

ROOT = Path(__file__).resolve().parents[1]
# oneDNN's and ideep's per-shape caches at the libraries' own capacity (the project holds them lower: runtime/onednn.py)
ONEDNN_LIBRARIES_CACHES = {name: "1024" for name in ONEDNN_CACHE_ENVIRONMENT}
LITBANK = ROOT.parent / "shared" / "corpora" / "litbank"
RESULTS = ROOT / "data" / "benchmarks"  # where the programs write their figures (not committed)
REPORTING = ROOT / "data" / "08_reporting"
# The 60 pronoun probes (jsonlines, a "text" each, about 17 words): the precision benchmarks' texts, and the short
# documents of the many-documents programs
PROBES = ROOT / "data" / "01_raw" / "probes" / "pronoun_probes.jsonl"


def require_litbank() -> None:
    """End the program in one line when the shared LitBank corpus is not beside the project."""
    if not (LITBANK / "train.conll").is_file():
        sys.exit(f"the shared LitBank corpus is not at {LITBANK} (../shared/corpora/litbank beside the project)")


def probe_texts(count: int) -> list[str]:
    """``count`` short texts: the probes' texts, cycled."""
    texts = [json.loads(line)["text"] for line in PROBES.read_text(encoding="utf-8").splitlines()]
    return [texts[index % len(texts)] for index in range(count)]


def host() -> str:
    """The CPU model (``lscpu``'s "Model name"), the figure every timing is read with."""
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """Calls per second, the median and the 95th-percentile latency of timed calls."""
    ordered = sorted(seconds)
    return {
        "requests_per_s": len(ordered) / sum(ordered),
        "median_s": statistics.median(ordered),
        "p95_s": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
    }


def write_results(results: dict, path: Path) -> None:
    """``results`` (with the host added) as JSON at ``path``, its folder made; says where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"host": host(), **results}, indent=2) + "\n")
    print(f"wrote {path}")


def segmented_litbank(tokenizer_name: str, length: int, singletons: bool = True) -> SegmentedCorpus:
    """LitBank fold 0 through the preprocess and segment entry points; with ``singletons`` False, its one-mention
    clusters removed from every split (a stand-in for a corpus that does not annotate singletons, as OntoNotes)."""
    frames = {
        split: preprocess_corpus(ConllFile.read(LITBANK / f"{split}.conll")) for split in ("train", "dev", "test")
    }
    if not singletons:
        for frame in frames.values():
            frame["clusters"] = [
                [cluster for cluster in clusters if len(cluster) > 1] for clusters in frame["clusters"]
            ]
    return SegmentedCorpus(*segment_corpus(frames, tokenizer_name, [length]))


NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def parse_value(text: str) -> object:
    """A ``--set`` value as YAML reads it, except that ``5e-5`` is a number (YAML 1.1 wants ``5.0e-5``)."""
    value = yaml.safe_load(text)
    if isinstance(value, str) and NUMBER.fullmatch(value.strip()):
        return float(value)
    return value


def parse_overrides(pairs: list[str]) -> dict[str, object]:
    return {key: parse_value(value) for key, value in (pair.split("=", 1) for pair in pairs)}


def peak_memory_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class EncoderClock:
    """The seconds a loaded model's encoder spends in its forward passes while the clock is attached (``with
    EncoderClock(trained) as clock``): ``clock.seconds``, set back to 0 by ``clock.reset()``; the encoder's own
    ``forward`` again once the block ends."""

    def __init__(self, trained: CorefModel) -> None:
        self.encoder = trained.model.encoder
        self.seconds = 0.0

    def reset(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> EncoderClock:
        forward = self.encoder.forward

        def timed_forward(*args, **kwargs):
            begun = time.perf_counter()
            try:
                return forward(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - begun

        self.encoder.forward = timed_forward
        return self

    def __exit__(self, *exception) -> None:
        del self.encoder.forward  # the class's own again


def inference_ratio(trained: CorefModel, documents: list[dict]) -> dict[str, float]:
    """Seconds of full prediction vs the encoder alone on the same documents, in the model's
    inference precision (best of 3 each, alternating); with the test CoNLL F1 of that precision's predictions."""
    tensors = [trained.tensorize(document) for document in documents]
    trained.model.eval()

    def encoder_only() -> None:
        with torch.no_grad(), trained.inference_autocast():
            for document in tensors:
                trained.model.encoder(document.input_ids, document.attention_mask)

    def full() -> None:
        for document in tensors:
            trained.predict_tensors(document)

    # The two alternate, three rounds, best of each: a slower spell of the machine falls on both.
    timings = {"encoder_seconds": float("inf"), "predict_seconds": float("inf")}
    for _ in range(3):
        for name, run in (("encoder_seconds", encoder_only), ("predict_seconds", full)):
            started = time.perf_counter()
            run()
            timings[name] = min(timings[name], time.perf_counter() - started)
    timings["ratio"] = timings["predict_seconds"] / timings["encoder_seconds"]
    predictions = trained.predict_documents(documents, progress=False)
    timings["test_conll_f1"] = 100 * score_predictions(predictions, remove_singletons=True).conll_f1
    return timings


def preset_settings(preset: str, overrides: dict[str, object]) -> tuple[BaselineConfig, TrainingConfig]:
    """The committed ``preset`` (conf/base/parameters_coref_train.yml) with ``overrides``: model and training
    settings."""
    presets = yaml.safe_load((ROOT / "conf/base/parameters_coref_train.yml").read_text())["coref_train"]["presets"]
    return baseline_settings(presets, preset, overrides)


def incremental_preset(name: str | None) -> tuple[str, dict[str, object]]:
    """The committed ``incremental_train`` preset ``name`` (None: the one the parameter file names) and its
    resolved keys; an unknown name ends the program in one line naming the presets."""
    params = yaml.safe_load((ROOT / "conf/base/parameters_incremental_train.yml").read_text())["incremental_train"]
    name = name or params["preset"]
    try:
        return name, resolve_preset(params["presets"], name, "incremental_train preset")
    except ConfigError as error:
        sys.exit(str(error))


# The settings the LitBank training benchmarks' figures on the benchmarks page were measured with: the 32-minute
# recipe before it took the main job's one-segment crops, learning rates and fp32 (cpu_minilm_32min then).
BENCHMARKED_RECIPE = {
    "max_training_sentences": 3,
    "bert_learning_rate": 5.0e-5,
    "task_learning_rate": 2.0e-4,
    "precision": "auto",
    "eval_frequency": 70,
    "checkpoint_frequency": 70,
    "num_epochs": 20,
}


def cpu_minilm_settings(overrides: dict[str, object]) -> tuple[BaselineConfig, TrainingConfig]:
    """The recipe the LitBank training benchmarks measure: ``cpu_minilm_32min`` (``cpu_minilm`` trained within a
    time budget) with ``BENCHMARKED_RECIPE`` (what their published figures ran), then ``overrides``: model and
    training settings. The main job's fixed-step run is ``preset_settings("cpu_minilm", ...)``."""
    return preset_settings("cpu_minilm_32min", {**BENCHMARKED_RECIPE, **overrides})


def trainable_baseline(
    corpus: SegmentedCorpus, model_config: BaselineConfig, training: TrainingConfig, device: str = "cpu"
) -> tuple[CorefModel, Optimisers, Engine, TrainingConfig]:
    """The baseline as a run on ``device`` builds it from the pretrained encoder (the ``auto`` settings decided by the
    corpus and the precision, the encoder's training attention, the model on the engine's device, the optimisers),
    ready for ``training_step``: the model, its optimisers, the engine and the decided training settings."""
    seed_everything(training.seed)
    training = replace(training, device=device)
    model_config = decide_for_corpus(model_config, corpus)  # mention_loss_coef: auto, as a run decides it
    model_config, training = decide_for_run(model_config, training)  # precision and the head: auto
    trained = build_baseline(model_config)
    configure_encoder_for_training(trained.model.encoder, training)
    engine = Engine(training)
    trained.to(engine.device)
    engine.setup(trained.model)
    task = [p for module in trained.model.task_modules() for p in module.parameters()]
    optimisers = build_optimisers(trained.model.encoder, task, training, 10_000)
    trained.model.train()
    return trained, optimisers, engine, training


def timed_training_steps(
    corpus: SegmentedCorpus,
    model_config: BaselineConfig,
    training: TrainingConfig,
    steps: int,
    after_step: Callable[[int, CorefModel], None] | None = None,
    device: str = "cpu",
    crops: list[DocumentTensors] | None = None,
) -> list[float]:
    """Seconds of each of ``steps`` training steps (the one training step, on cropped train documents)
    from the pretrained encoder, on ``device``; ``after_step(step, model)`` runs after each, untimed; each crop
    trained on is appended to ``crops`` when given."""
    trained, optimisers, engine, training = trainable_baseline(corpus, model_config, training, device)
    model = trained.model
    documents = corpus.documents("train", model.config.max_segment_len)[:steps]
    tensors = [trained.tensorize(document) for document in documents]
    generator = torch.Generator().manual_seed(0)
    timings = []
    for step, document in enumerate(tensors, start=1):
        started = time.perf_counter()
        crop = random_crop(document, model.config.max_training_sentences, generator)
        if crops is not None:
            crops.append(crop)
        training_step(model.training_losses, crop, optimisers, training.gradient_clip, engine)
        if engine.device.type == "cuda":
            torch.cuda.synchronize(engine.device)  # the step's kernels finished, not only queued
        timings.append(time.perf_counter() - started)
        if after_step is not None:
            after_step(step, trained)
    return timings


WARM_UP_STEPS = 3  # training steps left out of a speed measurement: the first ones warm up

# The peer configuration (coref-hoi's and the original's CPU-comparable setting): segments of 384, crops of 3,
# ffnn 1000, coref_depth 1, 50 antecedents, learning rates 2e-5 / 2e-4, every span, no mention loss.
PEER_CONFIGURATION = {
    "max_training_sentences": 3,
    "task_learning_rate": 2.0e-4,
    "overlapping_antecedents": True,
    "ffnn_size": 1000,
    "max_top_antecedents": 50,
    "word_boundary_spans": False,
    "coref_depth": 1,
    "bert_learning_rate": 2.0e-5,
    "mention_loss_coef": 0.0,
    "mention_loss_spans": "candidates",
}


def throughput(corpus: SegmentedCorpus, steps: int, precision: str) -> dict[str, float]:
    """Training documents/s at the peer configuration in ``precision`` (``auto``: as the run decides it): the one
    training step, the first ``WARM_UP_STEPS`` left out; with the subtokens a measured step read and the encoder's
    positions (padding included)."""
    model_config, training = cpu_minilm_settings({**PEER_CONFIGURATION, "precision": precision})
    crops: list[DocumentTensors] = []
    measured = timed_training_steps(corpus, model_config, training, steps + WARM_UP_STEPS, crops=crops)
    measured, crops = measured[WARM_UP_STEPS:], crops[WARM_UP_STEPS:]
    return {
        "steps": len(measured),
        "seconds_per_document": sum(measured) / len(measured),
        "precision": resolve_precision(precision, torch.device("cpu")),
        "subtokens_per_step": sum(crop.num_tokens for crop in crops) / len(crops),
        "encoder_positions_per_step": sum(crop.input_ids.numel() for crop in crops) / len(crops),
    }


def with_source_tree(environment: Mapping[str, str], source_tree: Path | None) -> dict[str, str]:
    """``environment`` with ``source_tree`` (an earlier checkout's ``src`` folder) first on ``PYTHONPATH``, so that a
    process started with it runs that version; as it is where ``source_tree`` is None."""
    environment = dict(environment)
    if source_tree is not None:
        environment["PYTHONPATH"] = os.pathsep.join([str(source_tree), environment.get("PYTHONPATH", "")])
    return environment


def measured_process(command: Sequence[str], environment: Mapping[str, str], log: Path, what: str) -> dict[str, float]:
    """``command`` as a new process, its stderr to ``log``: its wall seconds and its own peak resident memory in MB
    (the kernel's ``ru_maxrss`` of that child, from ``wait4``). Linux carries a process's peak over to the program
    it starts, so the child's reads at least this process's own peak when it was started: ``parent_peak_mb``, the
    floor of the figure (a program measuring memory keeps models and large data out of its own process). A failure
    ends the program in one line naming ``what`` and the log's last line."""
    floor = peak_memory_mb()
    started = time.perf_counter()
    with log.open("w") as stderr:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=environment)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        last = (log.read_text().strip().splitlines() or ["(no message)"])[-1]
        sys.exit(f"{what} failed (exit {code}): {last}")
    return {"seconds": seconds, "peak_memory_mb": usage.ru_maxrss / 1024, "parent_peak_mb": floor}


def write_litbank_test(model: Path, path: Path) -> Path:
    """LitBank test (``LITBANK``) as Joshi-format jsonlines at ``path``, segmented for ``model`` by ``coref-pipeline
    minimize`` in a process of its own (with the record beside it that ``predict`` checks): ten documents of about
    2,300 subtokens."""
    from coref_pipeline.models.directory import segments_read_by

    tokenizer, length = segments_read_by(model)
    command = [sys.executable, "-m", "coref_pipeline", "minimize", "--tokenizer", tokenizer, "--seg-len", str(length)]
    subprocess.run([*command, str(LITBANK / "test.conll"), str(path)], check=True, capture_output=True)
    return path


def coref_pipeline(*args: str, source_tree: Path | None = None) -> float:
    """Seconds the command took, as a new process (``source_tree``: an earlier checkout's ``src`` folder, put first
    on ``PYTHONPATH``, runs that version's command)."""
    environment = with_source_tree(os.environ, source_tree)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "coref_pipeline", *args], capture_output=True, text=True, env=environment
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        sys.exit(f"coref-pipeline {args[0]} failed (exit {done.returncode}): {last}")
    return time.perf_counter() - started


def test_f1(output: Path) -> float:
    from coref_pipeline.evaluation.predictions import score_predictions
    from coref_pipeline.files import read_jsonlines

    return 100 * score_predictions(read_jsonlines(output), remove_singletons=True).conll_f1


# The CoNLL-2012 English splits' document counts, and their length in words: OntoNotes' documents average about
# 465 words (1.3M words over the 2,802 training documents), from short broadcast-conversation parts to long
# newswire; modelled as a log-normal of that mean with a long tail (sigma 0.8: median about 340 words),
# kept between 20 and 4,500 words. An approximation of the shape, not OntoNotes' own histogram.
ONTONOTES_SPLITS = {"train": 2802, "dev": 343, "test": 348}
ONTONOTES_MEAN_WORDS, ONTONOTES_SIGMA, ONTONOTES_WORD_RANGE = 465, 0.8, (20, 4500)


def ontonotes_shaped_documents(split: str = "test", limit: int | None = None, seed: int = 13) -> list[dict]:
    """Word-level documents of an OntoNotes split's count and length distribution, cut at sentence boundaries from
    the shipped corpora's text (the sample corpus, and LitBank where it is beside the project), in order and
    cycling when the text runs out: ``{"doc_key", "sentences" (lists of words), "speakers"}``, the first
    ``limit`` of them."""
    import math
    import random

    from coref_pipeline.formats.conll import read_conll

    files = sorted((ROOT / "data" / "01_raw" / "sample").glob("*_gold_conll"))
    files += [
        LITBANK / f"{split}.conll" for split in ("train", "dev", "test") if (LITBANK / f"{split}.conll").is_file()
    ]
    sentences: list[list[str]] = []
    for path in files:
        for document in read_conll(path):
            by_sentence: dict[int, list[str]] = {}
            for word, sentence in zip(document.words, document.sentence_ids, strict=True):
                by_sentence.setdefault(sentence, []).append(word)
            sentences += list(by_sentence.values())
    rng = random.Random(seed)
    mu = math.log(ONTONOTES_MEAN_WORDS) - ONTONOTES_SIGMA**2 / 2
    low, high = ONTONOTES_WORD_RANGE
    count = ONTONOTES_SPLITS[split] if limit is None else min(limit, ONTONOTES_SPLITS[split])
    genres = ("bc", "bn", "mz", "nw", "pt", "tc", "wb")
    documents, position = [], 0
    for number in range(count):
        target = min(high, max(low, round(rng.lognormvariate(mu, ONTONOTES_SIGMA))))
        words, kept = 0, []
        while words < target:
            sentence = sentences[position % len(sentences)]
            position += 1
            kept.append(sentence)
            words += len(sentence)
        documents.append(
            {"doc_key": f"{genres[number % len(genres)]}/shaped/{number:04d}_0", "sentences": kept, "speakers": None}
        )
    return documents
