"""Training speed of the baseline beside lxucs/coref-hoi's, side by side at the peer configuration.

Run: python benchmarks/training/peers.py --coref-hoi ../coref-hoi --coref-hoi-python ../coref-hoi-venv/bin/python
     [--precision 32 auto] [--steps 10] [--rounds 2] [--work-dir DIR]

Both sides train on LitBank fold 0 (../shared/corpora/litbank) segmented at 384 subtokens with the packaged
MiniLM, at the peer configuration (``PEER_CONFIGURATION`` in benchmarks/common.py: crops of 3 segments,
ffnn 1000, coref_depth 1, 50 antecedents, learning rates 2e-5 / 2e-4, every span, no mention loss):

- ours: ``throughput()`` of benchmarks/common.py, as ``benchmarks/training/baseline.py`` measures it, in each
  ``--precision`` (``auto``: bf16-mixed on a CPU that computes bf16 natively, else fp32);
- coref-hoi: its own ``CorefModel`` built from the ``best`` block of its experiments.conf with the peer
  configuration's values set (the keys that differ from ``best`` are printed), its optimisers and schedules
  from its ``Runner.get_optimizer`` / ``get_scheduler``, and one training step as its ``Runner.train`` runs it
  (forward, backward, each parameter group clipped, the optimisers stepped, gradients zeroed, the schedules
  stepped), on the same training documents (the first ``--steps`` + 3 of the split, in its order), the crops its
  tensorizer draws (seeded). coref-hoi has no mixed precision: it always runs in fp32.

Each measurement is a process of its own (same environment, torch's default threads), and the sides take turns
in ``--rounds`` rounds (ours first, then coref-hoi first, ...) so that a slower spell of the host falls on both;
each times ``--steps`` steps after 3 warm-up steps. Per round it prints each side's documents/s and the ratio
(ours over coref-hoi's), then the median ratio of each precision, and writes ``DIR/results.json`` (default
``data/benchmarks/peers``).

coref-hoi runs as published, in an environment of its own, with today's libraries: its files are not edited,
and this program only works around the imports that those libraries removed (``collections.Iterable``,
``transformers.AdamW``: torch's AdamW, ``sklearn.utils.linear_assignment_``: scipy's, used by its evaluation only;
tensorboard's ``SummaryWriter`` when tensorboard is absent) and asks its BERT for the tuple output that
transformers 2.x returned (``return_dict=False``). Setting it up:

    git clone https://github.com/lxucs/coref-hoi ../coref-hoi
    python3.11 -m venv ../coref-hoi-venv
    ../coref-hoi-venv/bin/pip install torch==2.13.0
    ../coref-hoi-venv/bin/pip install torch==2.13.0 transformers pyhocon numpy scipy scikit-learn tensorboard

(the torch of this project's environment, kept while the rest is installed).
"""

from __future__ import annotations

# Only the standard library at the top: the coref-hoi side runs this file in coref-hoi's environment, which has
# none of this project's packages. Ours imports them where it runs.
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "data" / "benchmarks" / "peers"
SEED = 13
HOI_MODULES = ("model.py", "tensorize.py", "util.py", "run.py", "experiments.conf")
SETUP = (
    "git clone https://github.com/lxucs/coref-hoi ../coref-hoi; python3.11 -m venv ../coref-hoi-venv; "
    "../coref-hoi-venv/bin/pip install torch==2.13.0; ../coref-hoi-venv/bin/pip install torch==2.13.0 "
    "transformers pyhocon numpy scipy scikit-learn tensorboard"
)
# Our peer configuration's keys that coref-hoi has no key for, with the value that makes our model do what
# coref-hoi's does: every span (not only those on word boundaries), links between overlapping spans allowed.
# (special_token_spans false: our candidates never cover [CLS]/[SEP], coref-hoi's may: a few spans a segment.)
SAME_AS_COREF_HOI = {"word_boundary_spans": False, "overlapping_antecedents": True}


# ------------------------------------------------------------------------------------------- coref-hoi's side
def install_shims() -> list[str]:
    """Stand-ins for what coref-hoi imports from libraries that have since removed it; the names of those used."""
    import collections
    import collections.abc
    import types

    import torch
    from transformers import BertModel  # noqa: F401  (transformers may put another module in its place doing so)

    transformers = sys.modules["transformers"]
    used = []
    if not hasattr(collections, "Iterable"):  # model.py: `from collections import Iterable` (gone in Python 3.10)
        collections.Iterable = collections.abc.Iterable
        used.append("collections.Iterable = collections.abc.Iterable")
    if not hasattr(transformers, "AdamW"):  # run.py: transformers 2.x's AdamW (correct_bias=True), torch's since
        transformers.AdamW = torch.optim.AdamW
        used.append("transformers.AdamW = torch.optim.AdamW")
    try:  # metrics.py, imported by run.py; its CEAF alignment, used by evaluation only
        import sklearn.utils.linear_assignment_  # noqa: F401
    except ImportError:
        import numpy as np
        from scipy.optimize import linear_sum_assignment

        shim = types.ModuleType("sklearn.utils.linear_assignment_")
        shim.linear_assignment = lambda cost: np.stack(linear_sum_assignment(cost), axis=1)
        sys.modules["sklearn.utils.linear_assignment_"] = shim
        used.append("sklearn.utils.linear_assignment_.linear_assignment = scipy's linear_sum_assignment")
    try:  # run.py imports SummaryWriter; nothing here writes a summary
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        shim = types.ModuleType("torch.utils.tensorboard")
        shim.SummaryWriter = type("SummaryWriter", (), {"__init__": lambda self, *args, **kwargs: None})
        sys.modules["torch.utils.tensorboard"] = shim
        used.append("torch.utils.tensorboard.SummaryWriter: a stub (tensorboard not installed)")
    return used


def import_coref_hoi(directory: Path) -> tuple[list[str], dict[str, object]]:
    """coref-hoi's modules from ``directory`` (on ``sys.path``), after the shims: the shims used and the modules."""
    shims = install_shims()
    sys.path.insert(0, str(directory))
    import model
    import run
    import tensorize
    import util

    return shims, {"model": model, "run": run, "tensorize": tensorize, "util": util}


def coref_hoi_steps(directory: Path, overrides: dict[str, object], steps: int, warm_up: int) -> dict[str, object]:
    """Seconds of coref-hoi's training steps (``steps`` after ``warm_up`` left out) on the first training documents."""
    import pyhocon
    import torch
    import transformers

    shims, modules = import_coref_hoi(directory)
    config = pyhocon.ConfigFactory.parse_file(str(directory / "experiments.conf"))["best"]
    differing = {
        key: [config.get(key, None), value] for key, value in overrides.items() if config.get(key, None) != value
    }
    for key, value in overrides.items():
        config.put(key, value)

    modules["util"].set_seed(SEED)  # its tensorizer crops each training document once, with `random`
    data = modules["tensorize"].CorefDataProcessor(config)
    examples_train, _, _ = data.get_tensor_examples()  # cached in data_dir after the first run
    device = torch.device("cpu")
    model = modules["model"].CorefModel(config, device)
    model.bert.config.return_dict = False  # model.py unpacks `mention_doc, _ = self.bert(...)`: transformers 2.x's
    runner = modules["run"].Runner.__new__(modules["run"].Runner)  # its optimisers without its __init__'s log files
    runner.config = config
    total_update_steps = len(examples_train) * config["num_epochs"] // config["gradient_accumulation_steps"]
    optimizers = runner.get_optimizer(model)
    schedulers = runner.get_scheduler(optimizers, total_update_steps)
    bert_param, task_param = model.get_params()
    before = [parameter.detach().clone() for parameter in bert_param + task_param]

    # Runner.train's step, one document an update (gradient_accumulation_steps 1)
    model.to(device)
    model.zero_grad()
    timings, losses, subtokens, positions = [], [], [], []
    for _, example in examples_train[: steps + warm_up]:
        started = time.perf_counter()
        model.train()
        example_gpu = [d.to(device) for d in example]
        _, loss = model(*example_gpu)
        loss.backward()
        if config["max_grad_norm"]:
            torch.nn.utils.clip_grad_norm_(bert_param, config["max_grad_norm"])
            torch.nn.utils.clip_grad_norm_(task_param, config["max_grad_norm"])
        losses.append(loss.item())
        for optimizer in optimizers:
            optimizer.step()
        model.zero_grad()
        for scheduler in schedulers:
            scheduler.step()
        timings.append(time.perf_counter() - started)
        subtokens.append(int(example[1].sum()))
        positions.append(int(example[0].numel()))

    changed = [not torch.equal(old, new.detach()) for old, new in zip(before, bert_param + task_param, strict=True)]
    measured = timings[warm_up:]
    return {
        "steps": len(measured),
        "seconds_per_document": sum(measured) / len(measured),
        "documents_per_second": len(measured) / sum(measured),
        "precision": "32",
        "losses": losses,
        "subtokens_per_step": statistics.mean(subtokens[warm_up:]),
        "encoder_positions_per_step": statistics.mean(positions[warm_up:]),
        "parameters_updated": {
            "encoder": f"{sum(changed[: len(bert_param)])}/{len(bert_param)}",
            "task": f"{sum(changed[len(bert_param) :])}/{len(task_param)}",
        },
        "differing_from_best": differing,
        "shims": shims,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


# ------------------------------------------------------------------------------------------------- our side
def our_steps(steps: int, precision: str) -> dict[str, object]:
    """``throughput()`` at the peer configuration in ``precision``, with the sizes of the crops it trained on."""
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks.common import PEER_CONFIGURATION, cpu_minilm_settings, segmented_litbank, throughput

    model_config, _ = cpu_minilm_settings({**PEER_CONFIGURATION, "precision": precision})
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    result = throughput(corpus, steps, precision)
    return {
        **result,
        "documents_per_second": 1 / result["seconds_per_document"],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


# ---------------------------------------------------------------------------------------------- the program
def coref_hoi_settings(work: Path) -> dict[str, object]:
    """coref-hoi's keys set to the peer configuration (with its data folder and the packaged MiniLM), the data
    folder written (LitBank segmented as ours reads it); ends the program in one line where our peer
    configuration is not what coref-hoi computes."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.common import PEER_CONFIGURATION, cpu_minilm_settings, segmented_litbank
    from coref_pipeline.pretrained import resolve_pretrained

    model, training = cpu_minilm_settings(PEER_CONFIGURATION)
    for key, value in SAME_AS_COREF_HOI.items():
        if getattr(model, key) != value:
            sys.exit(f"the peer configuration has {key}: {getattr(model, key)}; coref-hoi computes {key}: {value}")
    if model.mention_loss_coef or not model.coarse_to_fine:
        sys.exit("the peer configuration has a mention loss or no coarse-to-fine pruning: not coref-hoi's setting")
    encoder = resolve_pretrained(model.encoder)
    data_dir = work / "coref-hoi-data"
    overrides = {
        "data_dir": str(data_dir),
        "bert_pretrained_name_or_path": encoder,
        "bert_tokenizer_name": resolve_pretrained(model.tokenizer_name),
        "max_segment_len": model.max_segment_len,
        "max_training_sentences": model.max_training_sentences,
        "max_span_width": model.max_span_width,
        "top_span_ratio": model.top_span_ratio,
        "max_num_extracted_spans": model.max_num_extracted_spans,
        "max_top_antecedents": model.max_top_antecedents,
        "max_num_speakers": model.max_num_speakers,
        "ffnn_size": model.ffnn_size,
        "ffnn_depth": model.ffnn_depth,
        "feature_emb_size": model.feature_size,
        "dropout_rate": model.dropout_rate,
        "coref_depth": model.coref_depth,
        "coarse_to_fine": model.coarse_to_fine,
        "fine_grained": model.fine_grained,
        "model_heads": model.model_heads,
        "use_metadata": model.use_metadata,
        "use_features": model.use_features,
        "use_segment_distance": model.use_segment_distance,
        "use_width_prior": model.use_prior,
        "use_distance_prior": model.use_prior,
        "mention_loss_coef": 0,
        "loss_type": "marginalized",
        "genres": list(model.genres),
        "bert_learning_rate": training.bert_learning_rate,
        "task_learning_rate": training.task_learning_rate,
        "adam_eps": training.adam_eps,
        "adam_weight_decay": training.weight_decay,
        "warmup_ratio": training.warmup_ratio,
        "max_grad_norm": training.gradient_clip,
        "gradient_accumulation_steps": 1,
    }
    corpus = segmented_litbank(model.tokenizer_name, model.max_segment_len)
    data_dir.mkdir(parents=True, exist_ok=True)
    for stale in data_dir.glob("cached.tensors.*"):  # coref-hoi's tensor cache of an earlier corpus
        stale.unlink()
    for split in ("train", "dev", "test"):  # its data processor reads all three
        lines = [json.dumps(document) for document in corpus.documents(split, model.max_segment_len)]
        (data_dir / f"{split}.english.{model.max_segment_len}.jsonlines").write_text("\n".join(lines) + "\n")
    return overrides


def run_child(command: list[str], log: Path, what: str) -> dict[str, object]:
    """``command`` (a ``--child`` run of this file) with its output in ``log``: the result it wrote."""
    result = log.with_suffix(".json")
    result.unlink(missing_ok=True)
    with log.open("w") as output:
        done = subprocess.run(
            [*command, "--result", str(result)], stdout=output, stderr=subprocess.STDOUT, env=dict(os.environ)
        )
    if done.returncode != 0 or not result.is_file():
        last = (log.read_text().strip().splitlines() or ["(no output)"])[-1]
        sys.exit(f"{what} failed (exit {done.returncode}; {log}): {last}")
    return json.loads(result.read_text())


def check_coref_hoi(directory: Path, python: str) -> None:
    """End the program in one line where ``directory`` is no coref-hoi checkout or ``python`` cannot import it."""
    missing = [name for name in HOI_MODULES if not (directory / name).is_file()]
    if missing:
        sys.exit(f"no coref-hoi checkout at {directory} (no {', '.join(missing)}); set it up: {SETUP}")
    probe = [python, str(Path(__file__).resolve()), "--child", "probe", "--coref-hoi", str(directory)]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, env=dict(os.environ))
    except OSError as error:
        sys.exit(f"cannot run --coref-hoi-python {python} ({error}); set up its environment: {SETUP}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        sys.exit(f"{python} cannot import coref-hoi from {directory} ({last}); set up its environment: {SETUP}")


def child(args: argparse.Namespace) -> None:
    if args.child == "probe":
        import_coref_hoi(args.coref_hoi.resolve())
        return
    if args.child == "ours":
        result = our_steps(args.steps, args.precision[0])
    else:
        result = coref_hoi_steps(args.coref_hoi.resolve(), json.loads(args.overrides), args.steps, args.warm_up)
    args.result.write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--coref-hoi", type=Path, help="a checkout of lxucs/coref-hoi")
    parser.add_argument(
        "--coref-hoi-python", default=sys.executable, help="the interpreter of an environment that imports coref-hoi"
    )
    parser.add_argument("--steps", type=int, default=10, help="timed training steps a measurement (after 3 warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the sides taking turns")
    parser.add_argument(
        "--precision",
        nargs="+",
        choices=("32", "auto"),
        default=["32"],
        help="ours in each (auto: bf16-mixed where the CPU computes bf16 natively); coref-hoi runs fp32",
    )
    parser.add_argument("--work-dir", type=Path, default=WORK, help="results.json, logs, coref-hoi's data folder")
    parser.add_argument("--child", choices=("ours", "coref-hoi", "probe"), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--overrides", help=argparse.SUPPRESS)
    parser.add_argument("--warm-up", type=int, help=argparse.SUPPRESS)  # common.WARM_UP_STEPS, passed on
    args = parser.parse_args()
    args.precision = list(dict.fromkeys(args.precision))
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    if args.child:
        child(args)
        return
    if args.coref_hoi is None:
        parser.error(f"--coref-hoi DIR is needed (a checkout of lxucs/coref-hoi; set it up: {SETUP})")

    sys.path.insert(0, str(ROOT))
    from benchmarks.common import PEER_CONFIGURATION, WARM_UP_STEPS, host, require_litbank, write_results

    require_litbank()
    directory = args.coref_hoi.resolve()
    check_coref_hoi(directory, args.coref_hoi_python)
    work = args.work_dir.resolve()
    (work / "logs").mkdir(parents=True, exist_ok=True)
    overrides = coref_hoi_settings(work)
    this = str(Path(__file__).resolve())
    common = ["--steps", str(args.steps), "--warm-up", str(WARM_UP_STEPS)]
    measurements = {
        **{f"ours {p}": [sys.executable, this, "--child", "ours", "--precision", p, *common] for p in args.precision},
        "coref-hoi": [
            *[args.coref_hoi_python, this, "--child", "coref-hoi", "--coref-hoi", str(directory)],
            *["--overrides", json.dumps(overrides), *common],
        ],
    }
    rounds = []
    for number in range(1, args.rounds + 1):
        names = list(measurements) if number % 2 else list(reversed(measurements))  # ours first, then coref-hoi
        figures = {}
        for name in names:
            log = work / "logs" / f"round{number}-{name.replace(' ', '-')}.log"
            figures[name] = run_child(measurements[name], log, f"round {number}, {name}")
        hoi = figures["coref-hoi"]["documents_per_second"]
        ratios = {p: figures[f"ours {p}"]["documents_per_second"] / hoi for p in args.precision}
        rounds.append({"figures": figures, "ratios": ratios})
        line = "; ".join(
            f"ours {figures[f'ours {p}']['precision']} {figures[f'ours {p}']['documents_per_second']:.3f}"
            for p in args.precision
        )
        ratio_text = ", ".join(f"{ratio:.2f}x ({p})" for p, ratio in ratios.items())
        print(f"round {number}: {line}; coref-hoi fp32 {hoi:.3f} documents/s; ratio {ratio_text}")

    first = rounds[0]["figures"]
    hoi = first["coref-hoi"]
    medians = {p: statistics.median(r["ratios"][p] for r in rounds) for p in args.precision}
    ours_first = first[f"ours {args.precision[0]}"]
    print(
        f"host: {host()}; torch {ours_first['torch']} (ours), {hoi['torch']} (coref-hoi, transformers "
        f"{hoi['transformers']}); threads {ours_first['threads']} / {hoi['threads']}"
    )
    print(
        f"{args.steps} timed steps a measurement after {WARM_UP_STEPS} warm-up, {args.rounds} round(s); coref-hoi "
        "runs fp32 (it has no mixed precision)"
    )
    ours = first[f"ours {args.precision[0]}"]  # the same crops in every precision
    print(
        f"work a step: ours {ours['subtokens_per_step']:.0f} subtokens ({ours['encoder_positions_per_step']:.0f} "
        f"encoder positions with padding), coref-hoi {hoi['subtokens_per_step']:.0f} "
        f"({hoi['encoder_positions_per_step']:.0f})"
    )
    print(f"coref-hoi's keys set apart from its best block: {sorted(hoi['differing_from_best'])}")
    print(f"coref-hoi parameters updated: {hoi['parameters_updated']}; shims: {hoi['shims']}")
    for p, median in medians.items():
        print(f"median ratio, ours ({first[f'ours {p}']['precision']}) over coref-hoi (fp32): {median:.2f}x")
    write_results(
        {
            "steps": args.steps,
            "warm_up_steps": WARM_UP_STEPS,
            "rounds": rounds,
            "median_ratio": medians,
            "peer_configuration": PEER_CONFIGURATION,
            "coref_hoi": {"directory": str(directory), "python": args.coref_hoi_python, "config": overrides},
        },
        work / "results.json",
    )


if __name__ == "__main__":
    main()
