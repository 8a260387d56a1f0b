"""Devices, processes and precision of a training run, on Lightning Fabric.

Fabric starts the processes, sets up the process group (NCCL on GPUs, gloo on
CPUs), wraps the model in DistributedDataParallel, and owns autocast and the
fp16 loss scaler. This module only maps the training parameters onto it and
gives the loop the few operations it needs; it writes no process-group,
gradient-sync or launcher code of its own.

How a run is started:

- ``devices x num_nodes == 1``: in this process.
- several devices on one machine, started by ``kedro run`` or ``dvc repro``:
  Fabric spawns one worker per device (``ddp_spawn``); the parent waits and
  loads the best model rank 0 wrote.
- started by ``torchrun`` or SLURM's ``srun`` (several nodes, or one): the
  processes exist already; Fabric joins them (``ddp``).

Gradients: a model gives one loss per document (the baseline) or one per
segment (the incremental model, backpropagated in turn for constant memory), so
a step has several backward passes. They accumulate locally under DDP's
``no_sync``; then one synchronising pass through the DDP-wrapped module, whose
output touches each parameter that has a gradient with a zero weight, makes DDP's
reducer average the accumulated gradients across ranks, in buckets, as in any
accumulation step (``find_unused_parameters``: a parameter no rank used keeps no
gradient, so the optimisers skip it as they would in one process).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from coref_pipeline.models.config import TrainingConfig
from coref_pipeline.runtime.devices import keep_host_memory, resolve_device, resolve_precision
from coref_pipeline.runtime.onednn import bound_onednn_caches, onednn_products, onednn_products_reason

logger = logging.getLogger(__name__)

# Fabric's names for the precision settings.
FABRIC_PRECISION = {"32": "32-true", "bf16-mixed": "bf16-mixed", "16-mixed": "16-mixed"}
# How long ranks wait for each other (rank 0 evaluates dev while the others wait at a barrier).
COLLECTIVE_TIMEOUT = timedelta(hours=3)


def externally_launched() -> bool:
    """True when torchrun, SLURM or Fabric's CLI started this process as one rank of a run."""
    from lightning_fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    return TorchElasticEnvironment.detect() or SLURMEnvironment.detect() or "LT_CLI_USED" in os.environ


class _SyncPass(nn.Module):
    """The model under DDP. Its forward is the synchronising pass: zero times one entry of each
    parameter this rank has a gradient for (at least one parameter). DDP, finding the others
    unused here, reduces every accumulated gradient, and leaves untouched (``None``) the gradients
    of parameters no rank used, as one process accumulating the ranks' documents would."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self) -> torch.Tensor:
        trainable = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        with_gradients = [parameter for parameter in trainable if parameter.grad is not None] or trainable[:1]
        return torch.cat([parameter.reshape(-1)[:1] for parameter in with_gradients]).sum() * 0.0


class Engine:
    """One run's Fabric: where it runs (``device``, ``devices``, ``num_nodes``, ``strategy``) and in what
    ``precision``. Built from a :class:`TrainingConfig`; an absent device is a one-line ``DeviceError``.
    ``plugins`` go to Fabric as they are (a precision plugin given there replaces ``precision``)."""

    def __init__(self, training: TrainingConfig, plugins: Sequence[Any] = ()) -> None:
        from lightning_fabric import Fabric
        from lightning_fabric.strategies import DDPStrategy

        device = resolve_device(training.device)
        self.training = training
        devices: int | list[int] = training.devices
        if device.index is not None:
            devices = list(range(device.index, device.index + training.devices))
        self.spawns = training.world_size > 1 and not externally_launched()
        strategy: Any = "auto"
        if training.world_size > 1:
            start_method = "spawn" if self.spawns else "popen"
            strategy = DDPStrategy(start_method=start_method, timeout=COLLECTIVE_TIMEOUT, find_unused_parameters=True)
        self.fabric = Fabric(
            accelerator=device.type,
            devices=devices,
            num_nodes=training.num_nodes,
            strategy=strategy,
            precision=None if plugins else FABRIC_PRECISION[resolve_precision(training.precision, device)],
            plugins=list(plugins) or None,
        )
        self._module: Any = None
        if device.type == "cpu":
            bound_onednn_caches()  # oneDNN's per-shape caches held, before this process's first oneDNN primitive
        # fp32 products with a gradient on oneDNN where it is the faster library (runtime.onednn)
        reason = onednn_products_reason(device) if self.fabric.strategy.precision.precision == "32-true" else None
        self._onednn = reason is not None
        if reason is not None:
            logger.info("precision 32: %s", reason)

    # ----------------------------------------------------------------- processes
    def launch(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function(engine, *args)`` on every rank; the value rank 0 returned."""
        return self.fabric.launch(_call_with_engine, self, function, *args)

    @property
    def rank(self) -> int:
        return self.fabric.global_rank

    @property
    def world_size(self) -> int:
        return self.fabric.world_size

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that writes, logs progress and calls the callbacks."""
        return self.fabric.is_global_zero

    @property
    def device(self) -> torch.device:
        return self.fabric.device

    @contextmanager
    def all_node_cores(self) -> Iterator[None]:
        """For work rank 0 does while the other ranks wait for it (dev evaluation, the best model's save):
        CPU processes take this node's cores, which their ``devices`` share in training (each rank waits
        blocked in a collective, not spinning), then give them back."""
        threads = torch.get_num_threads()
        if self.world_size == 1 or self.device.type != "cpu":
            yield
            return
        torch.set_num_threads(os.cpu_count() or threads)
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    def barrier(self) -> None:
        if self.world_size > 1:
            self.fabric.barrier()

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        return self.fabric.broadcast(value, src=0) if self.world_size > 1 else value

    def gather_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` stacked by rank: ``[world_size, *tensor.shape]`` on the CPU."""
        if self.world_size == 1:
            return tensor.unsqueeze(0)
        with warnings.catch_warnings():  # Fabric's gather names a torch function deprecated in 2.13
            warnings.filterwarnings("ignore", message=".*all_gather is deprecated")
            return self.fabric.all_gather(tensor.to(self.device)).cpu()

    # ------------------------------------------------------------------ training
    def setup(self, model: nn.Module) -> None:
        """Place the model on this rank's device and, with several ranks, under DDP."""
        model.to(self.device)
        if self.world_size > 1:
            self._module = self.fabric.setup_module(_SyncPass(model), move_to_device=False)

    def autocast(self) -> AbstractContextManager:
        """The precision's autocast (bf16 or fp16 compute, fp32 weights); at 32, the products on oneDNN where it
        is the faster library (``runtime.onednn``), else nothing."""
        if self.fabric.strategy.precision.precision != "32-true":
            return self.fabric.autocast()
        return onednn_products() if self._onednn else nullcontext()

    def accumulate(self) -> AbstractContextManager:
        """Backward passes inside this only accumulate this rank's gradients (no communication)."""
        return self.fabric.no_backward_sync(self._module) if self._module is not None else nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        """Backward, through the precision's loss scaler when it has one."""
        self.fabric.backward(loss)

    def synchronise_gradients(self) -> None:
        """Average the accumulated gradients across ranks (DDP's reducer): one zero-weight pass."""
        if self._module is not None:
            self.fabric.backward(self._module())

    def unscale(self, optimiser: torch.optim.Optimizer) -> None:
        """Undo the fp16 loss scale on this optimiser's gradients before they are clipped."""
        scaler = getattr(self.fabric.strategy.precision, "scaler", None)
        if scaler is not None:
            scaler.unscale_(optimiser)

    def loss_scale(self) -> float:
        """The fp16 loss scaler's current scale (1 without one): what backward multiplied the gradients by."""
        scaler = getattr(self.fabric.strategy.precision, "scaler", None)
        return float(scaler.get_scale()) if scaler is not None else 1.0

    def optimiser_step(self, optimiser: torch.optim.Optimizer) -> None:
        """Step (fp16: skipped when the scaled gradients overflowed, and the scale adjusted)."""
        self.fabric.strategy.precision.optimizer_step(optimiser)

    def rng_states(self, generators: Sequence[torch.Generator]) -> dict[str, torch.Tensor]:
        """Every rank's RNG states, stacked by rank: torch's CPU generator, each of ``generators``,
        and the CUDA generator of this rank's device when it is a GPU."""
        states = {"torch": torch.get_rng_state()}
        states.update({f"generator{i}": generator.get_state() for i, generator in enumerate(generators)})
        if self.device.type == "cuda":
            states["cuda"] = torch.cuda.get_rng_state(self.device)
        return {name: self.gather_rows(state) for name, state in states.items()}

    def restore_rng_states(self, states: dict[str, torch.Tensor], generators: Sequence[torch.Generator]) -> None:
        """This rank's row of ``rng_states``."""
        rows = len(states["torch"])
        if rows != self.world_size:
            raise RuntimeError(
                f"the checkpoint holds the RNG states of {rows} processes and this run has {self.world_size}"
            )
        # A row is cloned: torch's set_state reads a state tensor from the start of its storage.
        torch.set_rng_state(states["torch"][self.rank].clone())
        for i, generator in enumerate(generators):
            generator.set_state(states[f"generator{i}"][self.rank].clone())
        if self.device.type == "cuda" and "cuda" in states:
            torch.cuda.set_rng_state(states["cuda"][self.rank].clone(), self.device)


def _call_with_engine(fabric: Any, engine: Engine, function: Callable[..., Any], *args: Any) -> Any:
    """Inside each worker: this rank's allocator, logging, thread count and seeds, then the function."""
    keep_host_memory()  # a spawned worker is a new process
    if engine.world_size > 1:
        if engine.device.type == "cpu":  # this node's cores shared by its processes
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // engine.training.devices))
        package_logger = logging.getLogger("coref_pipeline")
        if not engine.is_main:
            package_logger.setLevel(logging.WARNING)
        elif engine.spawns:  # a spawned worker starts without the parent's logging configuration
            package_logger.setLevel(logging.INFO)
            if not logging.getLogger().handlers:
                logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return function(engine, *args)


def steps_per_epoch(num_documents: int, world_size: int) -> int:
    """Steps in an epoch of ``num_documents`` when each of ``world_size`` ranks takes one a step."""
    return -(-num_documents // world_size)


def shard(order: Sequence[int], rank: int, world_size: int) -> list[int]:
    """This rank's documents of an epoch: every ``world_size``-th of ``order`` from ``rank``, the order
    wrapped round so that every rank has ``steps_per_epoch`` of them (as torch's DistributedSampler)."""
    steps = steps_per_epoch(len(order), world_size)
    padded = list(order) + list(order)[: steps * world_size - len(order)]
    return padded[rank::world_size]


def rank_seed(seed: int, rank: int) -> int:
    """The seed of a rank's own randomness (crop windows, dropout, sampling); rank 0 keeps ``seed``."""
    return seed + 1_000_003 * rank
