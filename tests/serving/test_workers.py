"""Prediction in several processes (``serving/workers.py``): each chunk what one process of one thread gives it, in
the input's order, the input read a few chunks ahead, a document that stops a worker after those before it."""

from __future__ import annotations

import os
from itertools import islice

import pytest
import torch

from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.serving.workers import WorkerError, chunk_size, predicted_in_processes

TEXTS = [
    f"Ada wrote note {n}. She sent it to Charles, and he read it {n % 3 + 1} times. " * (1 + n % 4) for n in range(23)
]


@pytest.fixture(scope="module")
def tiny_coref_models(tmp_path_factory) -> dict[str, CorefModel]:
    from tests.models.tiny import save_tiny_models

    directories = save_tiny_models(tmp_path_factory.mktemp("worker_models"), threshold=-1e4)
    return {
        name: CorefModel.load(directory)
        for name, directory in zip(("baseline", "incremental"), directories, strict=True)
    }


def records_of(model: CorefModel, joshi: bool) -> list[dict]:
    """The texts as ``predict``'s text records, or as Joshi-format documents."""
    from coref_pipeline.serving.coref_model import as_split_text

    records = [{"text": text, "doc_key": f"docs/{index}"} for index, text in enumerate(TEXTS)]
    if joshi:
        records = [
            model.jsonlines_document(as_split_text(r["text"], r["doc_key"]), None, "nw", r["doc_key"]) for r in records
        ]
    return records


def one_thread_by_chunks(model: CorefModel, records: list[dict], size: int, joshi: bool) -> list[dict]:
    """What one process of one thread gives the chunks of ``size`` documents, one after another: the same code on
    the same groups and shapes with the same thread count as each worker, so the same bytes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        outputs = []
        for first in range(0, len(records), size):
            chunk = records[first : first + size]
            if joshi:
                outputs.extend(model.predicted_documents(chunk, progress=False))
            else:
                outputs.extend(result.to_dict() for result in model.predict_many(chunk, progress=False))
        return outputs
    finally:
        torch.set_num_threads(threads)


def chunk_with_process_id(records, joshi, genre, max_tokens_in_batch):
    """``_predict_chunk`` with each output marked by the process that computed it."""
    from coref_pipeline.serving import workers

    outputs, error = workers.unmarked_predict_chunk(records, joshi, genre, max_tokens_in_batch)
    return [{**output, "process": os.getpid()} for output in outputs], error


@pytest.mark.parametrize("joshi", [False, True], ids=["text", "joshi"])
@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_workers_give_each_chunk_what_one_process_of_one_thread_gives_it_in_the_inputs_order(
    tiny_coref_models, model_type, joshi, monkeypatch
):
    from coref_pipeline.serving import workers

    model = tiny_coref_models[model_type]
    records = records_of(model, joshi)
    monkeypatch.setattr(workers, "unmarked_predict_chunk", workers._predict_chunk, raising=False)
    monkeypatch.setattr(workers, "_predict_chunk", chunk_with_process_id)
    outputs = list(predicted_in_processes(model, iter(records), len(records), 2, joshi, "nw", None))
    processes = {output.pop("process") for output in outputs}
    assert len(processes) == 2 and os.getpid() not in processes  # both workers, neither this process
    size = chunk_size(len(records), 2)
    assert 1 < size < len(records)
    expected = one_thread_by_chunks(model, records, size, joshi)
    assert outputs == expected
    key = "predicted_clusters" if joshi else "clusters"
    assert any(output[key] for output in outputs)  # decisions to see


def test_the_input_is_read_a_few_chunks_ahead_of_the_output(tiny_coref_models):
    model = tiny_coref_models["baseline"]
    records = records_of(model, False) * 4
    read = 0

    def counted():
        nonlocal read
        for record in records:
            read += 1
            yield record

    outputs = predicted_in_processes(model, counted(), len(records), 2, False, "nw", None)
    list(islice(outputs, 1))
    size = chunk_size(len(records), 2)
    assert read <= (2 * 2 + 1) * size < len(records)  # the chunks in flight and the one read next
    outputs.close()


def test_a_document_a_worker_cannot_predict_stops_after_those_before_it(tmp_path):
    from tests.models.tiny import save_tiny_models

    baseline, _ = save_tiny_models(tmp_path)
    model = CorefModel.load(baseline, max_inference_subtokens=50)
    texts = ["Ada wrote a note.", "She sent it to Charles."] * 5 + ["Ada wrote a note. " * 40, "He read it."]
    records = [{"text": text, "doc_key": f"docs/{index}"} for index, text in enumerate(texts)]
    done = []
    with pytest.raises(WorkerError, match="max_inference_subtokens=50"):
        for output in predicted_in_processes(model, iter(records), len(records), 2, False, "nw", None):
            done.append(output["doc_key"])
    assert done == [record["doc_key"] for record in records[:10]]


def test_workers_are_for_a_cpu(tiny_coref_models, monkeypatch):
    model = tiny_coref_models["baseline"]
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("meta")))
    with pytest.raises(ValueError, match="several workers predict on a CPU"):
        list(predicted_in_processes(model, iter([]), 0, 2, False, "nw", None))


def test_workers_are_refused_where_processes_cannot_be_forked(tiny_coref_models, monkeypatch):
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(ValueError, match="this platform cannot fork"):
        list(predicted_in_processes(tiny_coref_models["baseline"], iter([]), 0, 2, False, "nw", None))


KILLED_PARENT = """
import os, signal, sys
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.serving.workers import predicted_in_processes
import multiprocessing
model = CorefModel.load(sys.argv[1])
records = [{"text": "Ada wrote a note. She sent it to Charles.", "doc_key": str(n)} for n in range(400)]
outputs = predicted_in_processes(model, iter(records), len(records), 2, False, "nw", None)
next(outputs)
print(" ".join(str(child.pid) for child in multiprocessing.active_children()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def running(pid: int) -> bool:
    """Whether process ``pid`` is there and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the processes' states from /proc (Linux)")
def test_workers_end_when_the_process_they_were_forked_from_is_killed(tmp_path):
    import subprocess
    import sys
    import time

    from tests.models.tiny import save_tiny_models

    baseline, _ = save_tiny_models(tmp_path)
    child = subprocess.run(
        [sys.executable, "-c", KILLED_PARENT, str(baseline)], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -9, child.stderr
    workers = [int(pid) for pid in child.stdout.split()]
    assert len(workers) == 2
    deadline = time.monotonic() + 30
    while any(running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(pid) for pid in workers)
