"""Operator calls and host synchronisations per training step and per predicted document, both models.

Run: python benchmarks/gpu/device_ops.py [--baseline DIR] [--incremental DIR] [--corpora litbank sample]
       [--steps 6 18] [--predict 3] [--rounds 4] [--round-steps 3] [--devices cpu cuda] [--skip-counts]
       [--out FILE]

The models are trained model directories (default ``data/06_models/baseline`` and ``data/06_models/incremental``,
what ``kedro run --pipelines=preprocess,segment,coref_train,incremental_train`` leaves), trained further and
predicting in fp32 on each ``--devices`` device (default: the CPU, and CUDA when there is one). The documents are the
training split of each ``--corpora`` corpus, read through the library's ``preprocess_corpus`` and ``segment_corpus``
with the model's tokenizer and segment length: ``litbank`` (``../shared/corpora/litbank``, fold 0) and ``sample``
(``data/01_raw/sample``, the pipelines' default corpus).

What is counted, under ``torch.profiler`` (CPU activity; CUDA activity too on a GPU):

- **aten events**: every ``aten::`` operator event, nested ones included (what the CPU issues, and on a GPU
  launches: each is a dispatch, most a kernel).
- **host syncs**: each read of a tensor's values by the host, which on a GPU waits for the queue to drain:
  ``aten::_local_scalar_dense`` (``item``, ``float()``, ``int()``, ``bool()``, ``is_nonzero``),
  ``aten::nonzero`` (``torch.nonzero`` and boolean-mask indexing, ``x[mask]``), ``aten::_unique2``,
  ``aten::unique_dim``, ``aten::unique_consecutive``, ``aten::masked_select`` (their output's size is
  data-dependent), and ``Tensor.tolist`` / ``Tensor.numpy`` (counted by wrapping them: on a CPU they dispatch
  no operator). Reads nested in a fused optimiser (``aten::_fused_adam_``, ``aten::_fused_adamw_``) are left out
  and counted apart (``optimiser reads``): the CPU kernel reads each parameter's step counter from host memory,
  where a GPU's fused kernel reads it on the device. On the CPU every tensor is on the host, so a read of a
  tensor that stays on the host on a GPU too (a host-side random draw) is counted as well: the figure is an
  upper bound of what a GPU would wait for.
- **issue's proxy**: ``aten::item`` + ``aten::nonzero`` events, every one (the optimiser's included): the
  figure issue 61 quotes (baseline 213, incremental 542 a step on the sample corpus).
- **host-built tensors**: ``torch.tensor`` / ``torch.as_tensor`` calls on Python data (lists, numbers): on a
  GPU each is a copy to the device, which synchronises unless it is pinned and non-blocking.
- on a GPU: **kernels** (CUDA kernel events), **stream syncs** (``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, ``cudaEventSynchronize`` runtime calls) and **DtoH copies** (``Memcpy DtoH``).
  Written for a GPU and not run on one by its author (the CPU figures are what it was checked with): a first
  run there should look at the profiler's own table before quoting them.

Per training step: one run of LONG steps (``--steps SHORT LONG``: documents 0, 1, ... of the split in order,
cycling; the baseline's crops drawn from one seeded generator) from the model directory's weights with fresh
optimisers, each step profiled on its own, and the per-step figure is the mean of steps SHORT to LONG - 1: what a
step adds once the first steps' one-time costs (the optimiser's state, lazy initialisations) are paid, as issue
61's (LONG-step run - SHORT-step run) / (LONG - SHORT) (the runs are deterministic: the same first SHORT steps).
The incremental model reads whole documents segment by segment, so its figures are also given per segment. Per
predicted document: ``CorefModel.predict_tensors`` on the first ``--predict`` documents after one untimed
prediction, mean per document (and per segment).

Documents/s of training, both models side by side: ``--rounds`` rounds, in each of which every model trains
``--round-steps`` steps on the next documents (without the profiler); the first round warms up and is left out;
the median of the rounds. Prints a table; writes ``data/benchmarks/device_ops.json`` (or ``--out``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # this tree's library, whatever the environment installed

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import asdict, dataclass, fields  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from coref_pipeline.formats.conll import ConllFile  # noqa: E402
from coref_pipeline.formats.corpus import SegmentedCorpus, preprocess_corpus, segment_corpus  # noqa: E402
from coref_pipeline.models.config import TrainingConfig  # noqa: E402
from coref_pipeline.runtime.host_reads import READ_OPERATORS, in_fused_optimiser  # noqa: E402
from coref_pipeline.serving.coref_model import CorefModel  # noqa: E402
from coref_pipeline.training.baseline import baseline_recipe  # noqa: E402
from coref_pipeline.training.engine import Engine  # noqa: E402
from coref_pipeline.training.incremental import incremental_recipe  # noqa: E402
from coref_pipeline.training.loop import (  # noqa: E402
    Recipe,
    configure_encoder_for_training,
    seed_everything,
    training_step,
)

CORPORA = {
    "litbank": ROOT.parent / "shared" / "corpora" / "litbank" / "train.conll",
    "sample": ROOT / "data" / "01_raw" / "sample" / "train.english.v4_gold_conll",
}
MODELS = ("baseline", "incremental")
ISSUE_PROXY = frozenset({"aten::item", "aten::nonzero"})
CUDA_SYNCS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"})
OUTPUT = ROOT / "data" / "benchmarks" / "device_ops.json"


@dataclass
class Counts:
    """What one profiled stretch of work issued (see the module's docstring for each)."""

    aten_events: float = 0
    host_syncs: float = 0
    optimiser_reads: float = 0
    issue_proxy: float = 0
    host_built: float = 0
    cuda_kernels: float = 0
    cuda_syncs: float = 0
    cuda_dtoh: float = 0

    def __sub__(self, other: Counts) -> Counts:
        return Counts(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __truediv__(self, divisor: float) -> Counts:
        return Counts(*(getattr(self, f.name) / divisor for f in fields(self)))


class PythonReads:
    """Counts ``Tensor.tolist`` / ``Tensor.numpy`` calls and host-built tensors while active (wrapped methods)."""

    def __init__(self) -> None:
        self.reads = 0
        self.built = 0

    @contextmanager
    def active(self) -> Iterator[PythonReads]:
        originals = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}
        factories = {name: getattr(torch, name) for name in ("tensor", "as_tensor")}

        def reading(original):
            def read(tensor, *args, **kwargs):
                self.reads += 1
                return original(tensor, *args, **kwargs)

            return read

        def building(original):
            def build(data, *args, **kwargs):
                if not isinstance(data, torch.Tensor):
                    self.built += 1
                return original(data, *args, **kwargs)

            return build

        for name, original in originals.items():
            setattr(torch.Tensor, name, reading(original))
        for name, original in factories.items():
            setattr(torch, name, building(original))
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)
            for name, original in factories.items():
                setattr(torch, name, original)


@contextmanager
def counting(device: torch.device) -> Iterator[Counts]:
    """Profile the block; the ``Counts`` yielded is filled when it ends."""
    counts = Counts()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    python = PythonReads()
    with profile(activities=activities) as profiler, python.active():
        yield counts
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    names: Counter[str] = Counter()
    for event in profiler.events():
        name = event.name
        if event.device_type == torch.autograd.DeviceType.CUDA:
            if "Memcpy DtoH" in name:
                counts.cuda_dtoh += 1
            elif not name.startswith(("Memcpy", "Memset")):
                counts.cuda_kernels += 1
            continue
        names[name] += 1
        if name in READ_OPERATORS:
            if in_fused_optimiser(event):
                counts.optimiser_reads += 1
            else:
                counts.host_syncs += 1
        if name in ISSUE_PROXY:
            counts.issue_proxy += 1
        if name in CUDA_SYNCS:
            counts.cuda_syncs += 1
    counts.aten_events = sum(count for name, count in names.items() if name.startswith("aten::"))
    counts.host_syncs += python.reads
    counts.host_built = python.built


def training_documents(corpus: str, tokenizer: str, length: int | str) -> list[dict[str, Any]]:
    """The training split of ``corpus`` as jsonlines documents, through the library's entry points."""
    path = CORPORA[corpus]
    if not path.is_file():
        raise SystemExit(f"{path}: not found (the {corpus} corpus); leave it out with --corpora")
    frames = {"train": preprocess_corpus(ConllFile.read(path))}
    return SegmentedCorpus(*segment_corpus(frames, tokenizer, [length])).documents("train", length)


class Trainee:
    """A model directory's model in training, as a run sets it up on ``device`` in fp32: its recipe (the
    baseline's crops, the incremental model's encoder cache), fresh optimisers, the seeded crop generator."""

    def __init__(self, directory: Path, model_type: str, device: torch.device) -> None:
        self.training = TrainingConfig(device=str(device), precision="32")
        seed_everything(self.training.seed)
        self.trained = CorefModel.load(directory, device=device)
        if self.trained.model_type != model_type:
            raise SystemExit(f"{directory} holds a {self.trained.model_type} model, not a {model_type} one")
        configure_encoder_for_training(self.trained.model.encoder, self.training)
        self.engine = Engine(self.training)
        self.engine.setup(self.trained.model)
        if model_type == "baseline":
            self.recipe: Recipe = baseline_recipe(self.trained, self.training)
        else:
            self.recipe = incremental_recipe(self.trained, self.training, "benchmark")
        self.optimisers = self.recipe.optimisers(10_000)
        self.generator = torch.Generator(device="cpu").manual_seed(0)
        self.trained.model.train()

    def step(self, document: Any) -> int:
        """One training step on ``document`` (tensors); the segments it read."""
        if self.recipe.prepare is not None:
            document = self.recipe.prepare(document, self.generator)
        training_step(self.recipe.losses, document, self.optimisers, self.training.gradient_clip, self.engine)
        return document.num_segments


def training_counts(
    directory: Path, model_type: str, documents: list[Any], steps: tuple[int, int], device: torch.device
) -> dict[str, Any]:
    """Per-step figures: the mean of steps SHORT to LONG - 1 of one run of LONG steps, each step profiled on its
    own (one profile of many steps holds every event in memory); and the segments a step read."""
    short, long = steps
    trainee = Trainee(directory, model_type, device)
    total, segments = Counts(), 0
    for index in range(long):
        document = trainee.trained.tensorize(documents[index % len(documents)])
        with counting(device) as counts:
            read = trainee.step(document)
        if index >= short:
            total, segments = total + counts, segments + read
    per_step = total / (long - short)
    return {
        "per_step": asdict(per_step),
        "per_segment": asdict(total / segments),
        "segments_per_step": segments / (long - short),
    }


def prediction_counts(
    directory: Path, model_type: str, documents: list[dict[str, Any]], count: int, device: torch.device
) -> dict[str, Any]:
    """Mean figures of ``CorefModel.predict_tensors`` per document and per segment, after one untimed document."""
    trained = CorefModel.load(directory, device=device)
    tensors = [trained.tensorize(document) for document in documents[: count + 1]]
    trained.predict_tensors(tensors[0])
    total, segments = Counts(), 0
    for document in tensors[1:]:
        with counting(device) as counts:
            trained.predict_tensors(document)
        total = total + counts
        segments += document.num_segments
    used = len(tensors) - 1
    return {
        "per_document": asdict(total / used),
        "per_segment": asdict(total / segments),
        "segments_per_document": segments / used,
    }


def training_speed(
    directories: dict[str, Path], documents: list[dict[str, Any]], rounds: int, round_steps: int, device: torch.device
) -> dict[str, Any]:
    """Documents/s of training of each model, in alternating rounds (the first left out): median and rounds."""
    trainees = {name: Trainee(directory, name, device) for name, directory in directories.items()}
    rates: dict[str, list[float]] = {name: [] for name in trainees}
    position = 0
    for round_index in range(rounds):
        batch = [documents[(position + offset) % len(documents)] for offset in range(round_steps)]
        position += round_steps
        for name, trainee in trainees.items():
            tensors = [trainee.trained.tensorize(document) for document in batch]
            started = time.perf_counter()
            for document in tensors:
                trainee.step(document)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if round_index:  # the first round warms up
                rates[name].append(round_steps / (time.perf_counter() - started))
    return {name: {"median": statistics.median(values), "rounds": values} for name, values in rates.items()}


def host() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model = platform.processor() or "unknown CPU"
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{model}, {torch.get_num_threads()} threads{gpu}, torch {torch.__version__}"


def table_rows(results: dict[str, Any]) -> list[str]:
    rows = []
    header = f"{'device':6} {'corpus':8} {'model':12} {'what':26} {'aten ev.':>9} {'syncs':>7} {'issue':>7} "
    header += f"{'opt. rd':>7} {'built':>6} {'kernels':>8} {'cu.sync':>7}"
    rows.append(header)
    for device, by_corpus in results["counts"].items():
        for corpus, by_model in by_corpus.items():
            for model, parts in by_model.items():
                for what, key in (
                    ("training step", ("training", "per_step")),
                    ("training segment", ("training", "per_segment")),
                    ("predicted document", ("prediction", "per_document")),
                    ("predicted segment", ("prediction", "per_segment")),
                ):
                    if model == "baseline" and "segment" in what:
                        continue
                    row = parts[key[0]][key[1]]
                    rows.append(
                        f"{device:6} {corpus:8} {model:12} {what:26} "
                        f"{row['aten_events']:9.0f} {row['host_syncs']:7.1f} "
                        f"{row['issue_proxy']:7.1f} {row['optimiser_reads']:7.1f} {row['host_built']:6.1f} "
                        f"{row['cuda_kernels']:8.0f} {row['cuda_syncs']:7.1f}"
                    )
    for device, by_corpus in results["documents_per_second"].items():
        for corpus, by_model in by_corpus.items():
            speeds = ", ".join(f"{model} {value['median']:.3f}" for model, value in by_model.items())
            rows.append(f"training documents/s ({device}, {corpus}): {speeds}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--baseline", type=Path, default=ROOT / "data" / "06_models" / "baseline")
    parser.add_argument("--incremental", type=Path, default=ROOT / "data" / "06_models" / "incremental")
    parser.add_argument("--corpora", nargs="+", default=["litbank", "sample"], choices=sorted(CORPORA))
    parser.add_argument("--steps", nargs=2, type=int, default=[6, 18], metavar=("SHORT", "LONG"))
    parser.add_argument("--predict", type=int, default=3, help="documents predicted (after one untimed)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the documents/s comparison (0: none)")
    parser.add_argument("--round-steps", type=int, default=3, help="steps of each model in a round")
    parser.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda when available")
    parser.add_argument("--skip-counts", action="store_true", help="documents/s only (no profiled runs)")
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    short, long = args.steps
    if not 0 <= short < long:
        parser.error("--steps SHORT LONG with 0 <= SHORT < LONG")
    devices = [
        torch.device(name) for name in (args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    ]
    directories = {"baseline": args.baseline, "incremental": args.incremental}
    config = CorefModel.load(args.baseline).config
    results: dict[str, Any] = {"host": host(), "steps": [short, long], "counts": {}, "documents_per_second": {}}
    for device in devices:
        for corpus in args.corpora:
            documents = training_documents(corpus, config.tokenizer_name, config.segment_length)
            by_model = results["counts"].setdefault(str(device), {}).setdefault(corpus, {})
            for name, directory in directories.items() if not args.skip_counts else ():
                by_model[name] = {
                    "training": training_counts(directory, name, documents, (short, long), device),
                    "prediction": prediction_counts(directory, name, documents, args.predict, device),
                }
                print(f"counted {name} on {corpus} ({device})", flush=True)
            if args.rounds > 1:
                speeds = training_speed(directories, documents, args.rounds, args.round_steps, device)
                results["documents_per_second"].setdefault(str(device), {})[corpus] = speeds
    print(f"host: {results['host']}")
    for row in table_rows(results):
        print(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
