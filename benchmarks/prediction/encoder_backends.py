"""The encoder's fp32 forward on a CPU by backend: eager torch, ``torch.compile``, an exported graph in ONNX Runtime.

Run: python benchmarks/prediction/encoder_backends.py [--model DIR] [--backends eager compile onnxruntime]
     [--rounds 5] [--work-dir DIR]

The issue that asked for CPU speed named two ways to run the encoder other than eager torch, each to be taken
only "if it measures worth a dependency": ``torch.compile`` (inductor's C++ kernels) and an exported graph run by
ONNX Runtime. Neither is a dependency of the project; this program measures them where they are installed
(ONNX Runtime and ``onnx`` in the environment: ``pip install onnxruntime onnx``; ``torch.compile`` needs a C++
compiler) and says which it could not run.

1. The model's encoder as ``predict`` loads it (``CorefModel.load(..., for_prediction=True)``, fp32) reads the
   LitBank test documents (10, ``../shared/corpora/litbank``) segmented for the model, in the batches of segments
   ``predict`` gives it (the segment encoder's batch, 16 segments by default, cut to the longest; no mask where
   none is padded).
2. Each backend computes the same batches, in turn, ``--rounds`` times (alternating, so that a slower spell of the
   host falls on each): eager (the reference), ``compile`` (``torch.compile(dynamic=True)``; its first pass, which
   compiles, timed apart), ``onnxruntime`` (the encoder exported with ``torch.onnx.export``, batch and width
   dynamic, one session with torch's threads; its export and session start timed apart).
3. Printed: the median seconds of a pass over the set, each backend's speed against eager's, and the largest
   difference from eager's output; then the fp32 matrix product's rate on the host (``[6144, 384] x [384, 1536]``,
   the encoder's widest linear layer over a batch of 16 segments): torch's linear (MKL on x86 builds) against
   oneDNN's (``torch.ops.mkldnn._linear_pointwise``), which says whether the CPU's vector width is used.

Figures go to stdout and to ``WORK_DIR/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable

import torch

from benchmarks.common import LITBANK, RESULTS, ROOT, host, require_litbank, write_results

WORK = RESULTS / "encoder_backends"
BACKENDS = ("eager", "compile", "onnxruntime")


def litbank_batches(model: Path, work: Path) -> tuple[torch.nn.Module, list[tuple[torch.Tensor, torch.Tensor | None]]]:
    """The model's encoder as ``predict`` loads it (fp32, in eval mode), and LitBank test segmented for the model as
    the encoder's batches: ``[segments, width]`` ids and mask (None where no segment of the batch is padded), the
    segment encoder's own batch size and cut to the longest segment."""
    from coref_pipeline.models.directory import segments_read_by
    from coref_pipeline.serving.coref_model import CorefModel

    tokenizer, length = segments_read_by(model)
    work.mkdir(parents=True, exist_ok=True)
    source = work / "litbank_test.jsonlines"
    command = [sys.executable, "-m", "coref_pipeline", "minimize", "--tokenizer", tokenizer, "--seg-len", str(length)]
    subprocess.run([*command, str(LITBANK / "test.conll"), str(source)], check=True, capture_output=True)
    trained = CorefModel.load(model, for_prediction=True, precision="32")
    per_pass = trained.model.encoder.segment_batch_size
    batches = []
    for line in source.read_text().splitlines():
        tensors = trained.tensorize(json.loads(line))
        lengths = tensors.lengths()
        for first in range(0, tensors.input_ids.shape[0], per_pass):
            rows = slice(first, first + per_pass)
            width = max(lengths[rows])
            mask = None if min(lengths[rows]) == width else tensors.attention_mask[rows, :width]
            batches.append((tensors.input_ids[rows, :width], mask))
    return trained.model.encoder.model.eval(), batches


class Hidden(torch.nn.Module):
    """The encoder's last hidden state from ids and a mask (the graph ONNX Runtime runs)."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def onnxruntime_backend(encoder: torch.nn.Module, work: Path) -> tuple[Callable, dict[str, float]]:
    """The encoder exported and loaded in an ONNX Runtime session: its forward, and the export's and the session's
    seconds."""
    import onnxruntime

    path = work / "encoder.onnx"
    started = time.perf_counter()
    example = (torch.ones(2, 16, dtype=torch.long), torch.ones(2, 16, dtype=torch.long))
    axes = {0: "segments", 1: "width"}
    torch.onnx.export(
        Hidden(encoder).eval(),  # a new module trains by default, and the export restores its mode to both
        example,
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["hidden"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "hidden": axes},
        dynamo=False,
        opset_version=17,
    )
    exported = time.perf_counter()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ready = time.perf_counter()

    def forward(input_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        mask = torch.ones_like(input_ids) if mask is None else mask
        inputs = {"input_ids": input_ids.numpy(), "attention_mask": mask.numpy()}
        return torch.from_numpy(session.run(None, inputs)[0])

    return forward, {"export_seconds": exported - started, "session_seconds": ready - exported}


def passes(forward: Callable, batches: list) -> tuple[float, list[torch.Tensor]]:
    started = time.perf_counter()
    outputs = [forward(input_ids, mask) for input_ids, mask in batches]
    return time.perf_counter() - started, outputs


def product_rates(repeats: int = 10) -> dict[str, float]:
    """GFLOP/s of the fp32 product ``[6144, 384] x [384, 1536]``: torch's linear and oneDNN's."""
    inputs = torch.randn(6144, 384)
    layer = torch.nn.Linear(384, 1536)
    flops = 2 * 6144 * 384 * 1536

    def rate(forward: Callable[[], torch.Tensor]) -> float:
        forward()
        started = time.perf_counter()
        for _ in range(repeats):
            forward()
        return flops * repeats / (time.perf_counter() - started) / 1e9

    with torch.no_grad():
        rates = {"torch linear": rate(lambda: layer(inputs))}
        if torch.backends.mkldnn.is_available():
            onednn = torch.ops.mkldnn._linear_pointwise
            rates["oneDNN linear"] = rate(lambda: onednn(inputs, layer.weight, layer.bias, "none", [], ""))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "06_models" / "baseline")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work-dir", type=Path, default=WORK)
    args = parser.parse_args()
    require_litbank()
    if not (args.model / "coref_config.json").is_file():
        sys.exit(f"no model at {args.model}: run the main job first (kedro run), or give --model DIR")
    work = args.work_dir
    encoder, batches = litbank_batches(args.model, work)
    results: dict = {"host": host(), "torch": torch.__version__, "threads": torch.get_num_threads(), "backends": {}}
    forwards: dict[str, Callable] = {}
    with torch.inference_mode():
        forwards["eager"] = lambda input_ids, mask: encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
        _, reference = passes(forwards["eager"], batches)
        for name in args.backends:
            if name == "compile":
                compiled = torch.compile(encoder, dynamic=True)
                forward = (lambda c: lambda ids, mask: c(input_ids=ids, attention_mask=mask).last_hidden_state)(
                    compiled
                )
                try:
                    first, _ = passes(forward, batches)
                except Exception as error:  # no C++ compiler, an unsupported operator: the backend cannot run
                    print(f"compile: cannot run here ({type(error).__name__}: {str(error).splitlines()[0][:200]})")
                    continue
                forwards["compile"] = forward
                results["backends"]["compile"] = {"first_pass_seconds": first}
            elif name == "onnxruntime":
                try:
                    forward, start = onnxruntime_backend(encoder, work)
                except ImportError as error:
                    print(f"onnxruntime: not installed ({error.name}); pip install onnxruntime onnx")
                    continue
                forwards["onnxruntime"] = forward
                results["backends"]["onnxruntime"] = start
        times: dict[str, list[float]] = {name: [] for name in forwards}
        for _ in range(args.rounds):
            for name, forward in forwards.items():
                seconds, outputs = passes(forward, batches)
                times[name].append(seconds)
                difference = max(float((a - b).abs().max()) for a, b in zip(outputs, reference, strict=True))
                results["backends"].setdefault(name, {})["max_difference"] = difference
    eager = statistics.median(times["eager"])
    print(f"host: {results['host']}; torch {results['torch']}, {results['threads']} threads; {len(batches)} batches")
    for name, seconds in times.items():
        figures = results["backends"].setdefault(name, {})
        figures.update(seconds=seconds, median_seconds=statistics.median(seconds))
        extra = ""
        if "first_pass_seconds" in figures:
            extra = f"; its first pass (compiling) {figures['first_pass_seconds']:.1f} s"
        if "session_seconds" in figures:
            extra = f"; export {figures['export_seconds']:.1f} s, session {figures['session_seconds']:.2f} s"
        print(
            f"{name}: {figures['median_seconds']:.2f} s a pass over LitBank test (median of {args.rounds}), "
            f"{eager / figures['median_seconds']:.2f}x eager's speed, largest difference "
            f"{figures['max_difference']:.1e}{extra}"
        )
    results["product_gflops"] = product_rates()
    print(
        "fp32 product [6144, 384] x [384, 1536]: "
        + ", ".join(f"{name} {rate:.0f} GFLOP/s" for name, rate in results["product_gflops"].items())
    )
    write_results(results, work / "results.json")


if __name__ == "__main__":
    main()
