"""Prediction in several processes on a CPU: ``coref-pipeline predict --workers N``.

A CPU computes one document's products on all its cores (torch's threads), but the host's work between them (text
split into words, subtokens, a segment's decisions, the operators' own calls) runs on one: with short documents most
of a prediction is that work. ``N`` processes of one thread each, forked from the one that loaded the model (its
weights shared, not copied or loaded again), each predict a share of the documents, in chunks of a few, while this
process reads the input ahead and yields their outputs in the input's order, so that one process writes the output
(and a stopped run goes on where its output ends). A chunk's documents are grouped and predicted as ``predict_many``
and ``predicted_documents`` do in one process: in fp32 the same clusters as one process but where float32's rounding
tips a near tie, in bf16 not always (``batching``).

Each worker computes with one thread: a process forked after torch's OpenMP threads ran may not start threads of its
own (they hang with GNU OpenMP, which torch's CPU build uses), and on a CPU one thread a process makes each core a
process's. At most ``2 * N`` chunks are in flight, so memory does not grow with the input.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import islice
from typing import Any

import torch
from tqdm.auto import tqdm

from coref_pipeline.serving.coref_model import CorefModel

# Documents a worker is given at a time, at most: enough for the groups of short documents that a CPU's budget
# holds (``CPU_MAX_TOKENS_IN_BATCH``: about 25 texts of 20 subtokens); with fewer documents, as many chunks a worker
# as this, so that long documents are shared evenly (LitBank test's ten: one a chunk for two workers).
CHUNK_DOCUMENTS = 64
CHUNKS_PER_WORKER = 8
PARENT_POLL_S = 0.5  # how often a worker looks whether the process it was forked from is still there

_model: CorefModel | None = None  # in a worker: the model it was forked with (``_start_worker``)


class WorkerError(ValueError):
    """A document a worker could not predict (too long, malformed), with the documents before it done."""


def output_records(
    model: CorefModel,
    records: Iterable[dict[str, Any]],
    joshi: bool,
    genre: str,
    max_tokens_in_batch: int | None,
    progress: bool = True,
    total: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The output record of each of ``records`` in this process, in their order, as each is done: Joshi-format
    documents (``joshi``) with ``predicted_clusters`` (``CorefModel.predicted_documents``), else each text record's
    result as a dict (``CorefModel.predict_many``)."""
    if joshi:
        yield from model.predicted_documents(
            records, progress=progress, total=total, max_tokens_in_batch=max_tokens_in_batch
        )
    else:
        results = model.predict_many(
            records, genre=genre, progress=progress, total=total, max_tokens_in_batch=max_tokens_in_batch
        )
        yield from (result.to_dict() for result in results)


def chunk_size(count: int, workers: int) -> int:
    """The documents of one chunk: ``count`` documents shared as ``CHUNKS_PER_WORKER`` chunks a worker, at most
    ``CHUNK_DOCUMENTS``."""
    return max(1, min(CHUNK_DOCUMENTS, math.ceil(count / (workers * CHUNKS_PER_WORKER))))


def predicted_in_processes(
    model: CorefModel,
    records: Iterable[dict[str, Any]],
    count: int,
    workers: int,
    joshi: bool,
    genre: str,
    max_tokens_in_batch: int | None,
) -> Iterator[dict[str, Any]]:
    """The output record of each of ``records`` (``count`` of them), in their order, as ``output_records`` gives it,
    predicted by ``workers`` processes forked from this one, which holds ``model`` (on the CPU). A document a worker
    cannot predict is a ``WorkerError`` with its message, after the outputs before it."""
    if model.device.type != "cpu":
        raise ValueError(f"several workers predict on a CPU; the model is on {model.device} (one process there)")
    if "fork" not in multiprocessing.get_all_start_methods():
        raise ValueError("several workers are processes forked from this one, and this platform cannot fork: use one")
    size, remaining = chunk_size(count, workers), iter(records)
    chunks = iter(lambda: list(islice(remaining, size)), [])
    context = multiprocessing.get_context("fork")  # a forked worker's arguments are its memory: nothing is pickled
    with (
        ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start_worker, initargs=(os.getpid(), model)
        ) as pool,
        tqdm(total=count, desc="predict", unit="doc") as bar,
    ):
        pending: deque[Future] = deque()
        for chunk in chunks:
            pending.append(pool.submit(_predict_chunk, chunk, joshi, genre, max_tokens_in_batch))
            if len(pending) >= 2 * workers:
                yield from _outputs(pending.popleft(), bar)
        while pending:
            yield from _outputs(pending.popleft(), bar)


def _start_worker(parent: int, model: CorefModel) -> None:
    """In a new worker: ``model`` (the forking process's, its pages shared), one thread for torch, and an end of its
    own once ``parent`` is gone (killed: its workers would otherwise wait on queues that their siblings hold open,
    for ever)."""
    global _model
    _model = model
    torch.set_num_threads(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _outputs(future: Future, bar: tqdm) -> Iterator[dict[str, Any]]:
    outputs, error = future.result()
    for output in outputs:
        yield output
        bar.update()
    if error is not None:
        raise WorkerError(error)


def _predict_chunk(
    records: list[dict[str, Any]], joshi: bool, genre: str, max_tokens_in_batch: int | None
) -> tuple[list[dict[str, Any]], str | None]:
    """In a worker: the chunk's outputs, and the message of the document that stopped it (None: every one done)."""
    assert _model is not None, "a worker runs in a process started by predicted_in_processes"
    outputs: list[dict[str, Any]] = []
    try:
        outputs.extend(output_records(_model, records, joshi, genre, max_tokens_in_batch, progress=False))
    except (ValueError, KeyError) as error:
        return outputs, str(error)
    return outputs, None
