"""Prediction throughput on a CPU, as a user repeats it: documents/s and subtokens/s for each precision and option.

Run: python benchmarks/prediction/throughput.py [--model DIR] [--configurations 32 auto int8] [--ontonotes 30]
     [--rounds 2] [--threads N] [--previous SRC] [--incremental DIR] [--workers N] [--phases [N]] [--work-dir DIR]

1. Two document sets, written as Joshi-format jsonlines with the model's own tokenizer and segment length:
   LitBank test (10 documents of about 2,000 words, ``../shared/corpora/litbank``) and ``--ontonotes``
   OntoNotes-shaped documents (``benchmarks/common.ontonotes_shaped_documents``: OntoNotes test's length
   distribution, cut from the shipped corpora's text).
2. Each configuration runs as a new process, in turn, ``--rounds`` times (alternating, so that a slower spell of
   the host falls on every configuration), on each set:
   - ``32`` and ``auto``: ``coref-pipeline predict --model DIR IN OUT --precision P``, the whole command timed
     (the process's start and the model's load included), as a user runs it (``auto``: bf16-mixed where the CPU
     computes bf16 natively, AVX512_BF16 or AMX, else fp32);
   - ``int8``: the same work in a process of this program (the model loaded as ``predict`` loads it), with the
     encoder's linear layers computing their products in int8 (``Int8Linear``: weights per output channel in 7
     bits, activations per token in 8, ``torch._int_mm``; fp32 elsewhere): a measurement of the option before it
     is one;
   - with ``--previous SRC`` (the ``src`` folder of an earlier checkout, e.g. ``git worktree add ../previous
     HEAD~1``): ``previous 32`` and ``previous auto``, that version's ``predict`` on the same model, side by side;
   - with ``--incremental DIR``: ``incremental 32`` and ``incremental auto`` (and ``previous incremental auto``);
   - with ``--workers N`` (N > 1): ``32 workers N`` and ``auto workers N``, ``predict --workers N`` (N processes of one
     thread each), and the same for the incremental model.
3. For each: the median documents/s and subtokens/s, the peak resident memory of the process, and the CoNLL F1
   of its LitBank test output (one-mention clusters removed from key and response, as the LitBank benchmarks).
4. With ``--phases N``: for each configuration (int8 aside) and set, N more processes (alternating; N is 1 where
   omitted) that say where the time goes, each figure's median: importing the library, loading the model,
   predicting (and the encoder's forward passes within it), and the rest of the wall time (the interpreter's start
   and exit). With ``--previous``, per set, figures paired in each round (the median of the rounds'): the previous
   default's wall time over this default's, as measured and over this default's without the task's head (import,
   load, encoder and rest alone: what no head can exceed), and the prediction / encoder ratio at which this default
   would take half the previous default's time (``against_previous``).
5. The host: ``lscpu``'s model name and the flags that matter (avx2, avx512f, avx512_bf16, amx_bf16, amx_int8,
   avx512_vnni / avx_vnni), the cores, the torch version and its threads.

Figures go to stdout and to ``WORK_DIR/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import inspect
import json
import os
import statistics
import subprocess
import time
from dataclasses import dataclass

import torch

# benchmarks.common (its imports: the training stack) is imported where it is used, not here: the ``int8``
# configuration's process runs this file, and should import what ``predict`` imports, no more.

WORK = Path("data") / "benchmarks" / "throughput"  # under the project root
CONFIGURATIONS = ("32", "auto", "int8")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni")


def cpu_flags() -> list[str]:
    """The instruction sets that decide what runs natively (from /proc/cpuinfo, Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in CPU_FLAGS if flag in flags]


def subtokens(path: Path) -> int:
    """The subtokens of a jsonlines file's documents (the encoder's input, [CLS] and [SEP] included)."""
    with path.open() as lines:
        return sum(len(token) for line in lines for token in [sum(json.loads(line)["sentences"], [])])


def write_sets(model: Path, work: Path, ontonotes: int) -> dict[str, Path]:
    """LitBank test and the OntoNotes-shaped documents as jsonlines, segmented for ``model``, each written by a
    process of its own: this one never holds the model, whose pages would be the floor of every measured process's
    peak (Linux carries a process's peak resident memory over to the program it starts)."""
    from benchmarks.common import write_litbank_test

    work.mkdir(parents=True, exist_ok=True)
    sets = {"litbank_test": work / "litbank_test.jsonlines", "ontonotes_shaped": work / "ontonotes_shaped.jsonlines"}
    write_litbank_test(model, sets["litbank_test"])
    writer = [sys.executable, __file__, "--child-write-ontonotes", str(model), str(sets["ontonotes_shaped"])]
    subprocess.run([*writer, str(ontonotes)], check=True, capture_output=True)
    return sets


def child_write_ontonotes(model: Path, path: Path, count: int) -> None:
    """``count`` OntoNotes-shaped documents as Joshi-format jsonlines at ``path``, segmented by ``model``."""
    from benchmarks.common import ontonotes_shaped_documents
    from coref_pipeline.serving.coref_model import CorefModel, as_split_text

    trained = CorefModel.load(model)
    with path.open("w") as out:
        for item in ontonotes_shaped_documents("test", limit=count):
            split = as_split_text(item["sentences"])
            document = trained.jsonlines_document(split, None, item["doc_key"][:2], item["doc_key"][3:])
            out.write(json.dumps(document) + "\n")


@dataclass(frozen=True)
class Run:
    """A configuration as run: its label, the model, the precision (or ``int8``) and the source tree that runs it
    (None: this checkout's; else a ``src`` folder put first on ``PYTHONPATH``: the previous version's)."""

    label: str
    model: Path
    configuration: str
    source_tree: Path | None = None
    workers: int = 1  # predict --workers


def runs_of(args: argparse.Namespace) -> list[Run]:
    """Every configuration of this invocation, the reference (the first) first."""
    runs = [Run(configuration, args.model, configuration) for configuration in args.configurations]
    if args.previous:
        runs += [Run(f"previous {c}", args.model, c, args.previous) for c in ("32", "auto")]
    if args.incremental:
        runs += [Run(f"incremental {c}", args.incremental, c) for c in ("32", "auto")]
        if args.previous:
            runs += [Run("previous incremental auto", args.incremental, "auto", args.previous)]
    if args.workers > 1:  # this version's 32 and auto in several processes, each model
        models = [("", args.model)] + ([("incremental ", args.incremental)] if args.incremental else [])
        runs += [
            Run(f"{prefix}{c} workers {args.workers}", model, c, workers=args.workers)
            for prefix, model in models
            for c in ("32", "auto")
        ]
    return runs


def run_configuration(run: Run, source: Path, output: Path, threads: int | None) -> dict:
    """One configuration on one set, in a new process: its wall seconds and peak resident memory (MB)."""
    from benchmarks.common import measured_process, with_source_tree

    configuration, model = run.configuration, run.model
    threads_set = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    environment = with_source_tree({**os.environ, **threads_set}, run.source_tree)
    # int8: the same command, run by this file, whose model's encoder computes in int8
    program = [__file__, "--child-int8"] if configuration == "int8" else ["-m", "coref_pipeline"]
    precision = "32" if configuration == "int8" else configuration
    command = [sys.executable, *program, "predict", "--model", str(model), "--precision", precision]
    command += ["--workers", str(run.workers)] if run.workers > 1 else []
    command += [str(source), str(output)]
    return measured_process(command, environment, output.with_suffix(".stderr"), f"{run.label} on {source.name}")


class Int8Linear:
    """A linear layer whose product computes in integers: the weight quantized once per output channel to 7 bits
    ([-63, 63]), each input row (token) when called to 8 bits ([-127, 127]), both symmetric; ``torch._int_mm``
    sums the products in int32, then the row's and the channel's scales and the bias apply in fp32. 7 bits for the
    weight: a CPU without VNNI (AVX2) sums pairs of u8 x s8 products in int16, which an 8-bit weight overflows
    (the shifted activation up to 255: 255 x 127 x 2 > 32,767) and a 7-bit one does not (255 x 64 x 2), so the
    integer sums are exact, the same on every x86 CPU. The query, key and value layers read the same input: its
    quantization is made once (``shared``, the last input and its result)."""

    def __init__(self, linear: torch.nn.Linear, shared: dict) -> None:
        weight = linear.weight.detach()  # [out, in]
        self.weight_scale = weight.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 63  # [out]
        self.weight = torch.round(weight / self.weight_scale[:, None]).to(torch.int8).t()  # [in, out], column-major
        self.bias = linear.bias.detach()  # [out]
        self.shared = shared

    def quantized(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs`` ``[..., in]`` fp32 -> int8 ``[M, in]`` and each row's scale ``[M, 1]``."""
        if self.shared.get("input") is not inputs:
            rows = inputs.reshape(-1, inputs.shape[-1])  # [M, in]
            low, high = rows.aminmax(dim=1, keepdim=True)  # [M, 1] each
            scale = torch.maximum(high, -low).clamp_min_(torch.finfo(torch.float32).tiny).div_(127)  # [M, 1]
            self.shared.update(input=inputs, result=(rows.div(scale).round_().to(torch.int8), scale))
        return self.shared["result"]

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        quantized, scale = self.quantized(inputs)
        products = torch._int_mm(quantized, self.weight).float()  # [M, out]: exact integer sums
        products = products.mul_(self.weight_scale)
        return torch.addcmul(self.bias, products, scale).view(*inputs.shape[:-1], -1)


def child_int8(arguments: list[str]) -> None:
    """``coref-pipeline ARGUMENTS`` (``predict ...``) as the command runs, to its end (the process ends with it), the
    model it loads computing the products of its encoder's linear layers in int8 (``Int8Linear``; fp32 elsewhere)."""
    from coref_pipeline.cli import main as command
    from coref_pipeline.serving.coref_model import CorefModel

    load = CorefModel.load.__func__

    def load_in_int8(cls, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        trained = load(cls, *args, **kwargs)
        shared: dict = {}
        for name, module in trained.model.encoder.named_modules():
            if isinstance(module, torch.nn.Linear) and ".layer." in name:  # the embeddings and the pooler stay fp32
                module.forward = Int8Linear(module, shared)  # the module keeps its place (its fp32 weight unused)
        return trained

    CorefModel.load = classmethod(load_in_int8)
    sys.argv = ["coref-pipeline", *arguments]
    command()


def child_phases(model: Path, precision: str, source: Path) -> None:
    """Where one ``predict``'s time goes, in one new process (printed as JSON): importing the library, loading the
    model, then predicting every document, of which the encoder's own forward passes (the rest: the task's
    scorers and the host work around them)."""
    from benchmarks.common import EncoderClock
    from coref_pipeline.files import read_jsonlines
    from coref_pipeline.serving.coref_model import CorefModel

    imported = since_process_start()  # the interpreter's start and the library's imports (torch, transformers)
    begun = time.perf_counter()
    options = {"precision": precision}
    if "for_prediction" in inspect.signature(CorefModel.load).parameters:  # as `predict` loads it (not before)
        options["for_prediction"] = True
    trained = CorefModel.load(model, **options)
    loading = time.perf_counter() - begun
    documents = read_jsonlines(source)
    with EncoderClock(trained) as clock:
        begun = time.perf_counter()
        for _ in trained.predict_documents(documents, progress=False):
            pass
        predicting = time.perf_counter() - begun
    phases = {"import": imported, "load": loading, "predict": predicting}
    print(json.dumps({**phases, "encoder": clock.seconds, "precision": trained.precision}))


def since_process_start() -> float:
    """Seconds since this process started (Linux: ``/proc``; 0 elsewhere)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return 0.0
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: the start, in clock ticks after boot


def phases_of(run: Run, source: Path, threads: int | None) -> dict:
    """``child_phases`` of a run on a set, with the process's whole wall time (``import``: from the process's
    start to the library imported; ``rest``: its exit, and what the phases do not cover)."""
    from benchmarks.common import with_source_tree

    threads_set = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    environment = with_source_tree({**os.environ, **threads_set}, run.source_tree)
    precision = "32" if run.configuration == "int8" else run.configuration
    command = [sys.executable, __file__, "--child-phases", str(run.model), precision, str(source)]
    started = time.perf_counter()
    child = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["(no message)"])[-1]
        sys.exit(f"{run.label} phases on {source.name} failed: {last}")
    phases = json.loads(child.stdout.strip().splitlines()[-1])
    phases["wall"] = wall
    phases["rest"] = wall - phases["import"] - phases["load"] - phases["predict"]
    return phases


def phase_rounds(runs: list[Run], sets: dict[str, Path], rounds: int, threads: int | None) -> list[dict[str, dict]]:
    """``phases_of`` for every run (``int8`` and several workers aside) and set, ``rounds`` times, the runs
    alternating in each round."""
    return [
        {
            f"{run.label}|{name}": phases_of(run, path, threads)
            for run in runs
            if run.configuration != "int8" and run.workers == 1
            for name, path in sets.items()
        }
        for _ in range(rounds)
    ]


def median_phases(rounds: list[dict[str, dict]]) -> dict[str, dict]:
    """Each run and set's figures, the median over the rounds."""
    return {
        key: {field: statistics.median(r[key][field] for r in rounds) for field in row if field != "precision"}
        for key, row in rounds[0].items()
    }


def against_previous(rounds: list[dict[str, dict]], sets: dict[str, Path]) -> dict[str, dict]:
    """Per set, each the median over the rounds of a figure paired in a round: the previous default's whole wall time
    over this default's (``measured``); the same over what this default's process would take if the task's head
    cost nothing, its start and imports, load, encoder passes and rest (``head_free``: what no head can exceed at
    this encoder); and the prediction's time over the encoder's that would make this default's process take half
    the previous default's, its start, load and rest as they are (``predict_over_encoder_for_2x``, beside the
    measured ``predict_over_encoder``)."""
    figures = {}
    for name in sets:
        paired: dict[str, list[float]] = {}
        for r in rounds:
            ours, previous = r[f"auto|{name}"], r[f"previous auto|{name}"]
            start = ours["import"] + ours["load"] + ours["rest"]
            for key, value in (
                ("measured", previous["wall"] / ours["wall"]),
                ("head_free", previous["wall"] / (start + ours["encoder"])),
                ("predict_over_encoder_for_2x", (previous["wall"] / 2 - start) / ours["encoder"]),
                ("predict_over_encoder", ours["predict"] / ours["encoder"]),
            ):
                paired.setdefault(key, []).append(value)
        figures[name] = {key: statistics.median(values) for key, values in paired.items()}
    return figures


def main() -> None:
    if sys.argv[1:2] == ["--child-int8"]:
        child_int8(sys.argv[2:])  # ends the process
    if sys.argv[1:2] == ["--child-write-ontonotes"]:
        child_write_ontonotes(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        return
    from benchmarks.common import ROOT, host, require_litbank, test_f1

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "06_models" / "baseline")
    parser.add_argument("--configurations", nargs="+", default=list(CONFIGURATIONS), choices=CONFIGURATIONS)
    parser.add_argument("--ontonotes", type=int, default=30, help="OntoNotes-shaped documents")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of each process (default: torch's)")
    parser.add_argument(
        "--previous",
        type=Path,
        help="the src folder of an earlier version (e.g. of `git worktree add ../previous HEAD~1`): its predict "
        "runs beside this one's, `32` and `auto`, on the same model",
    )
    parser.add_argument("--incremental", type=Path, help="an incremental model directory: its predict too, 32 and auto")
    parser.add_argument(
        "--workers", type=int, default=1, help="also predict --workers N, 32 and auto, each model (N > 1)"
    )
    parser.add_argument("--work-dir", type=Path, default=ROOT / WORK)
    parser.add_argument(
        "--phases",
        type=int,
        nargs="?",
        const=1,
        default=0,
        metavar="N",
        help="also, per model, precision and set: where a process's time goes (import, load, predict and the "
        "encoder's share of it, the interpreter's start and exit), N alternating rounds (default 1), medians",
    )
    parser.add_argument("--child-phases", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_phases:
        model, precision, source = args.child_phases
        child_phases(Path(model), precision, Path(source))
        return
    require_litbank()
    sets = write_sets(args.model, args.work_dir, args.ontonotes)
    sizes = {name: (sum(1 for _ in path.open()), subtokens(path)) for name, path in sets.items()}
    results: dict = {
        "host": host(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "model": str(args.model),
        "sets": {name: {"documents": d, "subtokens": s} for name, (d, s) in sizes.items()},
        "rounds": [],
    }
    runs = runs_of(args)
    if args.previous and not (args.previous / "coref_pipeline").is_dir():
        sys.exit(f"--previous {args.previous}: no coref_pipeline package in it (give a checkout's src folder)")
    results["runs"] = [{"label": run.label, "model": str(run.model), "source": str(run.source_tree)} for run in runs]
    for _ in range(args.rounds):
        round_ = {}
        for run in runs:
            for name, path in sets.items():
                output = args.work_dir / f"{run.label.replace(' ', '-')}.{name}.jsonl"
                round_[f"{run.label}|{name}"] = run_configuration(run, path, output, args.threads)
        results["rounds"].append(round_)
    table = {}
    for run in runs if results["rounds"] else []:
        for name in sets:
            key = f"{run.label}|{name}"
            seconds = statistics.median(r[key]["seconds"] for r in results["rounds"])
            documents, count = sizes[name]
            table[key] = {
                "seconds": seconds,
                "documents_per_second": documents / seconds,
                "subtokens_per_second": count / seconds,
                "peak_memory_mb": max(r[key]["peak_memory_mb"] for r in results["rounds"]),
            }
        output = args.work_dir / f"{run.label.replace(' ', '-')}.litbank_test.jsonl"
        table[f"{run.label}|litbank_test"]["test_conll_f1"] = test_f1(output)
    results["table"] = table
    reference = runs[0].label
    print(f"host: {results['host']}; flags: {' '.join(results['cpu_flags'])}; {results['cores']} cores")
    print(
        f"{'configuration':26} {'set':18} {'docs/s':>8} {'subtok/s':>9} {'x ' + reference:>7} {'peak MB':>8} {'F1':>6}"
    )
    for key, row in table.items():
        label, name = key.split("|", 1)
        ratio = row["documents_per_second"] / table[f"{reference}|{name}"]["documents_per_second"]
        f1 = f"{row['test_conll_f1']:6.2f}" if "test_conll_f1" in row else ""
        print(
            f"{label:26} {name:18} {row['documents_per_second']:8.3f} "
            f"{row['subtokens_per_second']:9.0f} {ratio:7.2f} {row['peak_memory_mb']:8.0f} {f1}"
        )
    if args.phases:
        rounds = phase_rounds(runs, sets, args.phases, args.threads)
        results["phase_rounds"] = rounds
        results["phases"] = phases = median_phases(rounds)
        print(
            f"{'phases (seconds, median)':26} {'set':18} {'import':>7} {'load':>6} {'predict':>8} {'encoder':>8} "
            f"{'rest':>6} {'wall':>6} {'predict/encoder':>16}"
        )
        for key, row in phases.items():
            label, name = key.split("|", 1)
            print(
                f"{label:26} {name:18} {row['import']:7.2f} {row['load']:6.2f} {row['predict']:8.2f} "
                f"{row['encoder']:8.2f} {row['rest']:6.2f} {row['wall']:6.2f} {row['predict'] / row['encoder']:16.2f}"
            )
        if {"auto", "previous auto"} <= {run.label for run in runs}:  # this default beside the previous one
            results["against_previous"] = figures = against_previous(rounds, sets)
            for name, row in figures.items():
                print(
                    f"{name}: the previous default's wall over this default's, paired in each round (median): "
                    f"{row['measured']:.2f}x measured; with a head that cost nothing (import, load, encoder and rest "
                    f"alone) at most {row['head_free']:.2f}x; 2x needs prediction at "
                    f"{row['predict_over_encoder_for_2x']:.2f}x the encoder's passes (measured: "
                    f"{row['predict_over_encoder']:.2f}x)"
                )
    args.work_dir.mkdir(parents=True, exist_ok=True)
    (args.work_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {args.work_dir / 'results.json'}")


if __name__ == "__main__":
    main()
