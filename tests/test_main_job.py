"""The README's main job as a new user runs it, on its default corpus (LitBank), and what its models answer.

One slow test: the whole main job in a copy of the project (about 10 minutes on a 2-core CPU with bf16 units), then
both models on the pronoun probes (data/01_raw/probes/pronoun_probes.jsonl): the figure the benchmarks page
gives for the main job's models must hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coref_pipeline.studies.probes import judge_probe, read_probes, summarize_probes
from tests.paths import PROJECT_ROOT, copy_project

MAIN_JOB = "preprocess,segment,coref_train,incremental_train,evaluate"
PROBES = PROJECT_ROOT / "data" / "01_raw" / "probes" / "pronoun_probes.jsonl"
# Of the probes, each model. Another CPU's fp32 sums train another model from the same seed, a draw like another
# seed's. The main job's baseline measured 46 of 60 on an Intel Xeon with AMX, and 44, 38, 45, 45 and 44, 40, 45, 49
# at seeds 13 to 16 on AMD EPYCs with AVX-512 BF16 (the benchmarks page): nine draws, a mean of 44.0 and a standard
# deviation of 3.2; the goal is 85%. The floor, 30, sits four deviations below the mean, so that it holds on any
# CPU's arithmetic (at 36, two below the lowest draw, about one run in a hundred would fail): it fails a model that
# collapses (one that links nothing gets none right), not one a few texts worse (the benchmarks page's figures are
# that finer check).
AT_LEAST_RIGHT = 0.5


@pytest.fixture(scope="module")
def main_job(tmp_path_factory) -> Path:
    root = copy_project(tmp_path_factory.mktemp("main_job"), corpus="default")
    command = [sys.executable, "-m", "kedro", "run", f"--pipelines={MAIN_JOB}"]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=3000, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root


@pytest.mark.slow
def test_the_main_job_trains_on_litbank_and_its_models_find_the_obvious_without_merging_strangers(main_job):
    from coref_pipeline.serving.coref_model import CorefModel

    reporting = main_job / "data" / "08_reporting"
    probes = read_probes(PROBES)
    for name in ("baseline", "incremental"):
        scores = json.loads((reporting / f"scores_{name}_test.json").read_text())
        assert scores["documents"] == 10 and scores["singletons"] == "removed from key and response"
        model = CorefModel.load(main_job / "data" / "06_models" / name)
        judgements = [judge_probe(probe, model.predict(probe.text).char_clusters) for probe in probes]
        summary = summarize_probes(judgements)
        # evaluate asked the same probes: its metrics file holds these very counts
        recorded = json.loads((reporting / f"probes_{name}.json").read_text())
        assert recorded["pronoun_probes"] == summary.to_dict(), (name, recorded)
        wrong = [(p.text, j.clusters) for p, j in zip(probes, judgements, strict=True) if not j.right]
        assert summary.right >= AT_LEAST_RIGHT * summary.probes, (name, summary, wrong)
        assert summary.non_mentions <= 0.25 * summary.probes, (name, summary)  # 4 measured
