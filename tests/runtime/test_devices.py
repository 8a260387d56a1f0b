"""Every tensor the models create is created on the device of the model's parameters.

Run under ``torch.set_default_device("meta")`` with the models and inputs placed on the
CPU explicitly: a tensor created on the default device instead of the model's is a meta
tensor, and mixing it with the CPU ones raises. A device that is asked for and absent is
one line that names it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager

import pytest
import torch

from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import IncrementalConfig, TrainingConfig
from coref_pipeline.models.document import random_crop
from coref_pipeline.models.incremental import IncrementalCorefModel
from coref_pipeline.runtime.devices import (
    HELD_BLOCK_BYTES,
    KEEP_HOST_MEMORY_VARIABLE,
    DeviceError,
    held_memory_environment,
    resolve_device,
)
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training.engine import Engine
from coref_pipeline.training.loop import training_step
from coref_pipeline.training.optim import model_optimisers
from tests.models.tiny import make_document, save_tiny_models, tiny_config, tiny_encoder, tiny_hf_tokenizer

TEXT = "Ada met Charles in 1833. He showed her his engine, and she wrote about it. Charles was pleased."


@contextmanager
def default_device_meta():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def models() -> dict[str, CorefModel]:
    config = tiny_config(max_segment_len=16, top_span_ratio=0.8, max_span_width=3)
    baseline = CorefModel("baseline", BaselineCorefModel(config, tiny_encoder(seed=1)), tiny_hf_tokenizer())
    values = {"top_span_ratio": 0.8, "dropout_rate": 0.2, "threshold": -1e4, "negative_sample_rate": 0.5}
    values["teacher_forcing_rate"] = 0.5
    incremental_config = IncrementalConfig.from_baseline(config, values)
    incremental = IncrementalCorefModel(incremental_config, tiny_encoder(seed=2))
    slots = {"recent_mentions": 2, "entity_representation": False, "max_top_entities": 2}
    slots |= {"pair_features": "baseline", "mention_loss_coef": 0.5}
    with_slots = IncrementalCorefModel(IncrementalConfig.from_baseline(config, values | slots), tiny_encoder(seed=2))
    return {
        "baseline": baseline,
        "incremental": CorefModel("incremental", incremental, tiny_hf_tokenizer()),
        "incremental_recent_mentions": CorefModel("incremental", with_slots, tiny_hf_tokenizer()),
    }


@pytest.mark.parametrize("model_type", ["baseline", "incremental", "incremental_recent_mentions"])
def test_forward_loss_training_step_and_predict_create_nothing_off_the_model_device(model_type):
    trained = models()[model_type]
    model = trained.model.to("cpu")
    documents = [make_document(f"nw/d{i}_0", seed=i, num_segments=3) for i in range(2)]
    optimisers = model_optimisers(model, TrainingConfig(), total_steps=10, task_schedule="constant")
    generator = torch.Generator(device="cpu").manual_seed(0)
    engine = Engine(TrainingConfig(device="cpu"))
    with default_device_meta():
        assert torch.empty(1).device.type == "meta"  # the trap is set
        tensors = [trained.tensorize(document) for document in documents]
        assert all(t.input_ids.device.type == "cpu" and t.gold_starts.device.type == "cpu" for t in tensors)
        model.train()
        for document in tensors:
            crop = random_crop(document, 2, generator)
            loss = training_step(model.training_losses, crop, optimisers, 1.0, engine)
            assert loss == loss and loss >= 0  # finite, not NaN
        model.eval()
        with torch.no_grad():
            output = model(tensors[0])
        clusters = trained.predict_tensors(tensors[0])
        predicted = trained.predict_documents(documents, progress=False)
        result = trained.predict(TEXT)
        embeddings, cluster_ids = trained.span_representations(result)
    assert all(parameter.device.type == "cpu" for parameter in model.parameters())
    assert isinstance(clusters, list) and len(predicted) == 2
    assert embeddings.shape[0] == len(cluster_ids)
    if model_type == "baseline":
        assert output.top_antecedent_scores.device.type == "cpu" and output.loss is not None
    else:
        assert output.clusters == trained.predict_tensors(tensors[0])


def test_a_loaded_model_goes_to_the_device_asked_for(tmp_path):
    baseline_dir, incremental_dir = save_tiny_models(tmp_path)
    for directory in (baseline_dir, incremental_dir):
        assert CorefModel.load(directory, device="cpu").device.type == "cpu"
        expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
        assert CorefModel.load(directory, device="auto").device.type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_one_line_that_names_it(tmp_path):
    with pytest.raises(DeviceError) as error:
        resolve_device("cuda")
    message = str(error.value)
    assert "\n" not in message and "'cuda'" in message and "sees no CUDA GPU" in message and "use device cpu" in message
    with pytest.raises(DeviceError, match=r"device 'cuda:1' was asked for"):
        CorefModel.load(save_tiny_models(tmp_path)[0], device="cuda:1")
    with pytest.raises(DeviceError, match=r"unknown device 'tpu': use auto, cpu, cuda, cuda:N or mps"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_predict_on_a_gpu_that_is_not_there_is_one_line(tmp_path, capsys):
    from coref_pipeline.cli import main

    baseline_dir, _ = save_tiny_models(tmp_path)
    source = tmp_path / "story.txt"
    source.write_text(TEXT)
    with pytest.raises(SystemExit) as exited:
        main(["predict", "--model", str(baseline_dir), "--device", "cuda", str(source), str(tmp_path / "out.jsonl")])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: device 'cuda' was asked for") and not (tmp_path / "out.jsonl").exists()
    with pytest.raises(SystemExit) as exited:
        main(["predict", "--model", str(baseline_dir), "--device", "cpu", str(source), str(tmp_path / "out.jsonl")])
    assert exited.value.code == 0 and (tmp_path / "out.jsonl").is_file()


FAULTS_SCRIPT = """
import resource
import torch
from coref_pipeline.runtime.devices import keep_host_memory
kept = keep_host_memory()
assert keep_host_memory() is kept  # once per process, the same answer
faults = []
for step in range(12):  # a step's large tensors, freed at its end, as in training
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = torch.ones(16 * 1024 * 1024 + step * 1000)  # 64 MB: glibc mmaps it unless told otherwise
    b = a * 2
    c = b + a
    del a, b, c
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, sum(faults))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the malloc setting is glibc's (Linux)")
def test_freed_large_tensors_are_reused_not_page_faulted_in_again():
    """With keep_host_memory freed pages stay in the heap and later steps' 3 x 64 MB of tensors reuse them
    (glibc's heap fills with freed blocks after a few steps); with COREF_PIPELINE_KEEP_HOST_MEMORY=0 each
    step maps and faults them in afresh (49,152 pages of 4 KB a step)."""

    def faults_in_12_steps(setting: str) -> tuple[str, int]:
        env = {**os.environ, "COREF_PIPELINE_KEEP_HOST_MEMORY": setting}
        out = subprocess.run([sys.executable, "-c", FAULTS_SCRIPT], env=env, capture_output=True, text=True, check=True)
        kept, faults = out.stdout.split()
        return kept, int(faults)

    kept, faults_kept = faults_in_12_steps("1")
    untouched, faults_default = faults_in_12_steps("0")
    assert (kept, untouched) == ("True", "False")
    if faults_default < 12 * 49_152 * 0.9:
        pytest.skip(f"{faults_default} page faults in 12 steps by default: huge pages, nothing to compare")
    assert faults_kept < faults_default / 2


BOUND_SCRIPT = """
import torch
from coref_pipeline.runtime import devices
assert devices.keep_host_memory()
def resident_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
blocks = [torch.ones(16 * 1024 * 1024 + i * 4096) for i in range(6)]  # 6 x 64 MB, then freed
held = torch.ones(1024)  # allocated after them: the freed blocks are not the heap's top
del blocks
before = resident_mb()
devices._free_resident_bound_bytes = 1 << 40
within = devices.bound_host_memory()  # 384 MB free: within the bound
devices._free_resident_bound_bytes = 100 << 20
trimmed = devices.bound_host_memory()
after = resident_mb()
again = devices.bound_host_memory()  # the freed blocks are still free in the heap, but no longer resident
print(within, trimmed, again, before - after)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the malloc setting is glibc's (Linux)")
def test_free_heap_pages_go_back_once_over_the_bound_and_once_only():
    env = {**os.environ, "COREF_PIPELINE_KEEP_HOST_MEMORY": "1"}
    out = subprocess.run([sys.executable, "-c", BOUND_SCRIPT], env=env, capture_output=True, text=True, check=True)
    within, trimmed, again, released_mb = out.stdout.split()
    assert (within, trimmed, again) == ("False", "True", "False")
    assert int(released_mb) > 300  # the 384 MB of freed blocks left the resident set


def test_precision_auto_takes_bf16_where_the_device_computes_it_natively(monkeypatch, caplog):
    from coref_pipeline.runtime import devices

    cpu = torch.device("cpu")
    assert devices.resolve_precision("16-mixed", cpu) == "16-mixed"  # a set precision is kept
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    with caplog.at_level("INFO", logger="coref_pipeline.runtime.devices"):
        assert devices.resolve_precision("auto", cpu) == "32"
    assert "precision auto: 32 (this cpu has no native bf16" in caplog.text
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert devices.resolve_precision("auto", cpu) == "bf16-mixed"
    assert devices.native_bf16(cpu) == "a CPU with AVX-512 BF16"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert devices.native_bf16(cpu) == "a CPU with AMX"
    assert devices.native_bf16(torch.device("meta")) is None
    # torch held below AVX-512 (ATEN_CPU_CAPABILITY=avx2) computes bf16 without the CPU's units: fp32
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert devices.native_bf16(cpu) is None
    assert devices.resolve_precision("auto", cpu) == "32"


def test_the_held_memory_environment_turns_the_kept_heap_off_and_adds_to_the_tunables_it_is_given(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "libc_ver", lambda *args: ("glibc", "2.39"))
    held = held_memory_environment({"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert held["PATH"] == "/bin" and held[KEEP_HOST_MEMORY_VARIABLE] == "0"
    thresholds = f"glibc.malloc.mmap_threshold={HELD_BLOCK_BYTES}:glibc.malloc.trim_threshold={HELD_BLOCK_BYTES}"
    assert held["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{thresholds}"
    assert held_memory_environment({})["GLIBC_TUNABLES"] == thresholds
    monkeypatch.setattr(platform, "libc_ver", lambda *args: ("", ""))  # musl, macOS: no such setting
    assert held_memory_environment({"PATH": "/bin"}) is None
