"""Data-parallel training on two CPU processes (gloo), through Lightning Fabric.

Two ranks hold identical weights after each step, equal to one process that
accumulates the same two documents' gradients; only rank 0 writes checkpoints and
model directories; a run killed after a checkpoint and resumed ends where an
uninterrupted one ends. Both launch paths are run: torchrun (as on a cluster) and
the workers Fabric spawns when ``kedro run`` is given ``devices: 2``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from typing import NamedTuple

import pytest
import torch
from safetensors.torch import load_file

from coref_pipeline.training import Run, fit, incremental_recipe
from coref_pipeline.training.engine import shard
from coref_pipeline.training.loop import epoch_order
from coref_pipeline.training.optim import model_optimisers
from tests.paths import PROJECT_ROOT
from tests.tolerances import adam_reach, assert_trained_alike
from tests.training.distributed import (
    DOCUMENTS,
    WORLD_SIZE,
    final_weights,
    gradient_terms,
    tiny_baseline,
    tiny_incremental,
    train,
    training_config,
)

pytestmark = pytest.mark.slow


def single_process_accumulation(trained=None, **optimiser_options) -> Accumulated:
    """One process, each step the mean of the gradients of the documents the two ranks take."""
    trained = trained or tiny_baseline(dropout=0.0)
    model = trained.model
    start = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    config = training_config()
    tensors = [trained.tensorize(document) for document in DOCUMENTS]
    steps_per_epoch = -(-len(DOCUMENTS) // WORLD_SIZE)
    optimisers = model_optimisers(model, config, config.max_steps, **optimiser_options)
    names = {parameter: name for name, parameter in model.named_parameters()}
    reach = adam_reach(optimisers, config.max_steps, names)
    model.train()
    for step in range(config.max_steps):
        epoch, position = divmod(step, steps_per_epoch)
        order = epoch_order(len(DOCUMENTS), config.seed, epoch)
        for rank in range(WORLD_SIZE):
            for loss in model.training_losses(tensors[shard(order, rank, WORLD_SIZE)[position]]):
                (loss / WORLD_SIZE).backward()
        optimisers.step(config.gradient_clip)
    weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    return Accumulated(weights, start, reach, gradient_terms(trained))


class Accumulated(NamedTuple):
    """What one process that accumulates the ranks' documents trained: its weights, from ``start``, how far
    its Adam steps could move each trained parameter (``adam_reach``), and ``gradient_terms``."""

    weights: dict[str, torch.Tensor]
    start: dict[str, torch.Tensor]
    reach: dict[str, float]
    terms: int


def assert_trained_as_accumulated(weights: dict[str, torch.Tensor], accumulated: Accumulated) -> None:
    # Another process layout computes every gradient in another order: each rank reduces its own document
    # with its own threads and the reducer adds the halves; one process sums both documents' backward passes.
    steps = training_config().max_steps
    assert_trained_alike(weights, accumulated.weights, accumulated.start, accumulated.reach, accumulated.terms, steps)


def assert_same_weights(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        assert torch.equal(actual[name], expected[name]), name


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_shards_give_every_rank_as_many_documents_and_cover_the_epoch():
    order = [4, 0, 3, 1, 2]
    shards = [shard(order, rank, 2) for rank in range(2)]
    assert shards == [[4, 3, 2], [0, 1, 4]]
    assert sorted(set(shards[0] + shards[1])) == sorted(order)
    assert shard(order, 0, 1) == order


def test_torchrun_ranks_hold_identical_weights_equal_to_accumulation_and_only_rank_0_writes(tmp_path):
    work_dir, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={WORLD_SIZE}",
        f"--master-port={free_port()}",
        "-m",
        "tests.training.distributed",
        str(work_dir),
        str(out),
    ]
    environment = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "OMP_NUM_THREADS": "1"}
    finished = subprocess.run(command, cwd=PROJECT_ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]

    rank0 = load_file(out / "weights-rank0.safetensors")
    rank1 = load_file(out / "weights-rank1.safetensors")
    # The ranks step on the same averaged gradients (the reducer's sum is the same on both): the same weights,
    # to the bit, as is the checkpoint rank 0 wrote.
    assert_same_weights(rank1, rank0)
    assert_trained_as_accumulated(rank0, single_process_accumulation())
    assert_same_weights(final_weights(work_dir), rank0)

    writes = {rank: (out / f"writes-rank{rank}.txt").read_text().split("\n")[:-1] for rank in range(WORLD_SIZE)}
    assert writes[1] == []
    # checkpoints at steps 2 and 4 (and the finished run's), the best model at each evaluation (steps 3, 4)
    assert [line for line in writes[0] if line.startswith("checkpoint")] == [
        "checkpoint 2",
        "checkpoint 4",
        "checkpoint 4",
    ]
    assert [line for line in writes[0] if line.startswith("model")].count("model best") >= 1
    assert sorted(path.name for path in (work_dir / "checkpoints").iterdir()) == ["LATEST", "step-0000004"]

    # The ranks share the node's cores in training; rank 0 takes them all to evaluate while rank 1 waits.
    def threads(rank: int, kind: str) -> list[int]:
        lines = (line.split() for line in (out / f"threads-rank{rank}.txt").read_text().splitlines())
        return [int(count) for what, count in lines if what == kind]

    cores = os.cpu_count() or 1
    for rank in range(WORLD_SIZE):
        assert threads(rank, "step") == [max(1, cores // WORLD_SIZE)] * 4
    evaluations = threads(0, "evaluation")
    assert len(evaluations) >= 2 and set(evaluations) == {cores}
    assert threads(1, "evaluation") == []


def test_spawned_workers_train_as_torchrun_ranks_and_resume_after_a_kill(tmp_path):
    # The path of `kedro run` with devices: 2: Fabric spawns the workers, this process waits.
    uninterrupted = tmp_path / "uninterrupted"
    train(uninterrupted, dropout=0.0)
    assert_trained_as_accumulated(final_weights(uninterrupted), single_process_accumulation())
    record = json.loads((uninterrupted / "best" / "training.json").read_text())  # written once, by this process
    assert (record["devices"], record["device"]) == (2, "cpu")

    # With dropout each rank draws its own masks: resuming must restore every rank's RNG.
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    train(reference, dropout=0.2)
    with pytest.raises(Exception, match="process 0 terminated with signal SIGKILL"):
        train(resumed, dropout=0.2, stop_after=2)
    assert (resumed / "checkpoints" / "step-0000002").is_dir()
    train(resumed, dropout=0.2)
    # The same layout, threads and kernels from the checkpoint's exact state: the same roundings, to the bit.
    assert_same_weights(final_weights(resumed), final_weights(reference))
    shutil.rmtree(tmp_path)


@pytest.mark.parametrize("finetune_encoder", [False, True])
def test_the_incremental_model_trains_on_two_processes_as_one_that_accumulates(tmp_path, finetune_encoder):
    # Each document is backpropagated segment by segment; the ranks average once per step.
    trained = tiny_incremental(finetune_encoder)
    config = training_config()
    recipe = incremental_recipe(trained, config, "tiny baseline")
    fit(trained, recipe, DOCUMENTS, DOCUMENTS, config, Run(tmp_path, remove_singletons=False))
    expected = single_process_accumulation(
        tiny_incremental(finetune_encoder), train_encoder=finetune_encoder, task_schedule="constant"
    )
    assert_trained_as_accumulated(final_weights(tmp_path), expected)
