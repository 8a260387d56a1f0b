"""What ``coref-pipeline serve`` adds to a prediction: one client, a 200-word text, against ``CorefModel.predict``.

Starts ``coref-pipeline serve`` on a free loopback port with the model, then alternates rounds of
``--requests`` requests from one client (``POST /predict``, one text) with rounds of as many
in-process ``CorefModel.predict`` calls on the same text in this process (same precision, device
and threads), ``--rounds`` times. Prints requests/s, the median and 95th-percentile latency of each,
the server's median over the in-process median, and the host's ``lscpu`` model. Both use the same
number of threads (``--threads``, also given to the server), so the difference is the server's
own: HTTP, JSON and the queue. Before the rounds: the server's start (from the command to its first
answer of ``/health``) and its first request's latency, what a user starting a server waits for
(an earlier version's: ``PYTHONPATH=SRC``, the ``src`` folder of its checkout, runs both sides with it).

    python benchmarks/serving/serve.py --model data/06_models/baseline --requests 30 --rounds 3
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import os
import subprocess
import time

from benchmarks.common import ROOT, free_port, host, latency_summary

# About 200 words of plain English with people, objects and pronouns to resolve.
TEXT = (
    "Ada Lovelace met Charles Babbage at a party in London in 1833. He showed her a small part of his "
    "Difference Engine, and she asked him how it worked. Her mother, Lady Byron, had given her a thorough "
    "education in mathematics, and the machine fascinated her. Babbage later designed a larger machine, the "
    "Analytical Engine, which he never finished. An Italian engineer, Luigi Menabrea, wrote an article about "
    "it in French. Ada translated his article into English and added her own notes, which were three times "
    "as long as the article itself. In them she described how the engine could compute Bernoulli numbers, "
    "and she wrote out the steps it would follow. Many historians call this the first computer program. "
    "She also saw that the machine could work on symbols as well as numbers, so that it might one day "
    "compose music. Babbage admired her notes and called her the Enchantress of Number. Their letters show "
    "that he relied on her judgment, and that she pressed him to publish his work. She died young, at "
    "thirty-six, and the engine was never built in their lifetime."
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(ROOT / "data" / "06_models" / "baseline"))
    parser.add_argument("--requests", type=int, default=30, help="requests (and in-process calls) per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="32")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, in this process and the server's")
    parser.add_argument("--out", default=str(ROOT / "data" / "benchmarks" / "serve" / "results.json"))
    args = parser.parse_args()

    import httpx
    import torch

    from coref_pipeline.serving.coref_model import CorefModel

    torch.set_num_threads(args.threads)
    model = CorefModel.load(args.model, precision=args.precision)
    words = len(model.predict(TEXT).words)
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    command = [sys.executable, "-m", "coref_pipeline", "serve", "--model", args.model, "--port", str(port)]
    command += ["--precision", args.precision, "--device", "cpu"]
    launched = time.perf_counter()
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    start_s = time.perf_counter() - launched
                    break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.5)
        served, in_process = [], []
        with httpx.Client(timeout=300) as client:
            expected = model.predict(TEXT, doc_key="0").to_dict()
            started = time.perf_counter()
            first = client.post(f"{url}/predict", json={"text": TEXT})
            first_request_s = time.perf_counter() - started
            assert first.json() == expected  # the same record as in-process
            for _ in range(args.rounds):
                for _ in range(args.requests):
                    started = time.perf_counter()
                    answer = client.post(f"{url}/predict", json={"text": TEXT})
                    served.append(time.perf_counter() - started)
                    assert answer.status_code == 200
                for _ in range(args.requests):
                    started = time.perf_counter()
                    model.predict(TEXT, doc_key="0")
                    in_process.append(time.perf_counter() - started)
    finally:
        server.terminate()
        server.wait(timeout=30)
    results = {
        "host": host(),
        "model": args.model,
        "words": words,
        "threads": args.threads,
        "precision": args.precision,
        "start_s": start_s,
        "first_request_s": first_request_s,
        "served": latency_summary(served),
        "in_process": latency_summary(in_process),
    }
    results["served_over_in_process"] = results["served"]["median_s"] / results["in_process"]["median_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"host {results['host']}; {words} words; {args.threads} threads; precision {args.precision}")
    print(
        f"server start (to its first /health answer): {start_s:.2f} s; first request: {1000 * first_request_s:.1f} ms"
    )
    for name in ("served", "in_process"):
        figures = results[name]
        print(
            f"{name}: {figures['requests_per_s']:.2f} requests/s, median {1000 * figures['median_s']:.1f} ms, "
            f"95th percentile {1000 * figures['p95_s']:.1f} ms"
        )
    print(f"served / in-process (medians): {results['served_over_in_process']:.3f}x (goal: under 1.10x)")


if __name__ == "__main__":
    main()
