"""The baseline trains as the original trains: one and two ``coref_train`` steps against the original's train op.

The reference (``tests/fixtures/tf_checkpoints/tiny_coref_training``) was written once by the original's own
``optimization.create_custom_optimizer`` (``write_tf_checkpoint.py --train-reference``) on the fixture
checkpoint and the first three segments of its document, every dropout 0: the loss, every variable's gradient
before clipping, the norms the two clips saw, the learning rates, and every variable after one and two steps,
from the checkpoint's optimiser state (``global_step`` 1) and from fresh state. Here the checkpoint is imported
with its optimiser state (``import_tf_checkpoint(..., optimiser_state=True)``) and trained by the project's
baseline recipe under each published preset's training keys (the fixture experiment's learning rates).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml

from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import TrainingConfig, resolve_preset
from coref_pipeline.models.document import crop
from coref_pipeline.original import tf_import
from coref_pipeline.original.tf_import import import_tf_checkpoint, variable_mappings
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import optim
from coref_pipeline.training.baseline import baseline_recipe
from coref_pipeline.training.checkpoints import restore_original_optimiser
from coref_pipeline.training.engine import Engine
from coref_pipeline.training.loop import training_step
from coref_pipeline.training.optim import StepPlan
from tests.paths import PROJECT_ROOT
from tests.released import TINY_CHECKPOINT
from tests.serving.encoder_passes import encoder_terms
from tests.tolerances import head_terms, reordered

REFERENCE = TINY_CHECKPOINT.parent / "tiny_coref_training"
RECORD = json.loads((REFERENCE / "training.json").read_text())
ARRAYS = np.load(REFERENCE / "training.npz")
DOCUMENT = TINY_CHECKPOINT.parent / "tiny_coref_original" / "document.jsonlines"
NUM_TRAIN_STEPS = RECORD["config"]["num_docs"] * RECORD["config"]["num_epochs"]  # independent.py's
RUNS = ("resumed", "fresh", "warm")  # the reference's runs (its README)
GRADIENT_TOLERANCE = 1e-5  # the loss and each gradient, relative
# Variables whose gradient is zero in exact arithmetic, a softmax's shift (each attention key's bias, the head
# attention's output bias): Adam normalises their rounding noise into steps of about the learning rate, in the
# noise's direction, so their changes are not compared; their gradients, float32's rounding of sums of the scores'
# gradients, are compared elementwise within that rounding's bound of the largest gradient of all (as
# tests/tolerances.assert_gradients_reordered_close takes a softmax shift's), not to their own norm.
SHIFT_INVARIANT = re.compile(r"^(bert/encoder/layer_\d+/attention/self/key/bias|mention_word_attn/output_bias)$")
NO_GRADIENT = {name.split(":")[0] for name in RECORD["no_gradient"]}  # TensorFlow's variable names end in ":0"
INDEXED_SLICES = sorted(name.split(":")[0] for name in RECORD["indexed_slices_gradient"])
CHANGE_TOLERANCE = 1e-4  # each variable's change, relative to its norm
# The presets that name a published configuration (the original's experiments.conf entries) and their base.
PUBLISHED = ("best", "bert_base", "bert_large", "spanbert_base", "spanbert_large")
PRESETS = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_coref_train.yml").read_text())["coref_train"]["presets"]


def preset_training(preset: str) -> TrainingConfig:
    """The preset's training keys, with the fixture experiment's learning rates (the rest is the preset's)."""
    values = resolve_preset(PRESETS, preset)
    training = TrainingConfig.from_dict({key: value for key, value in values.items() if key in TrainingConfig.keys()})
    config = RECORD["config"]
    return replace(
        training,
        bert_learning_rate=config["bert_learning_rate"],
        task_learning_rate=config["task_learning_rate"],
        precision="32",
        device="cpu",
    )


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    directory = tmp_path_factory.mktemp("imported") / "tiny_coref"
    import_tf_checkpoint(TINY_CHECKPOINT, directory, optimiser_state=True)
    return directory


def without_dropout(directory) -> CorefModel:
    """The imported model, every dropout rate 0 (as the reference ran), in training mode."""
    loaded = CorefModel.load(directory, device="cpu")
    model = BaselineCorefModel(replace(loaded.config, dropout_rate=0.0), loaded.model.encoder)
    model.load_state_dict(loaded.model.state_dict())
    for module in model.encoder.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
    return CorefModel("baseline", model, loaded.tokenizer)


def reference_document(trained: CorefModel):
    """The fixture document's first three segments: the original's ``truncate_example`` at offset 0."""
    document = trained.tensorize(json.loads(DOCUMENT.read_text()))
    return crop(document, trained.config.max_training_sentences, 0)


def tf_mappings(model: BaselineCorefModel) -> list[tf_import.VariableMapping]:
    return variable_mappings(model.config, model.encoder.model.config.num_hidden_layers)


def grouped_mappings(model: BaselineCorefModel) -> dict[str, list[tf_import.VariableMapping]]:
    """The variables by the original's optimiser: BERT's (``bert/...``) and the task's."""
    mappings = [m for m in tf_mappings(model) if m.tf_name not in NO_GRADIENT]
    return {
        "bert": [m for m in mappings if m.tf_name.startswith("bert/")],
        "task": [m for m in mappings if not m.tf_name.startswith("bert/")],
    }


def torch_value(mapping: tf_import.VariableMapping, array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array.T if mapping.transpose else array)).float()


def relative(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    scale = float(theirs.norm())
    return float((ours - theirs).norm()) / scale if scale else float(ours.norm())


def run_steps(directory, training: TrainingConfig, run: str, steps: int = 2) -> dict:
    """``steps`` training steps of the baseline recipe from the imported fixture model, as the reference's ``run``:
    ``resumed`` (its optimiser state), ``fresh``, or ``warm`` (its optimiser state at the warm-up's end, the
    reference's ``global_step.assign``); per step the loss, the clip norms and the learning rates, and every
    parameter after it."""
    trained = without_dropout(directory)
    model: BaselineCorefModel = trained.model
    recipe = baseline_recipe(trained, training)
    optimisers = recipe.optimisers(StepPlan(NUM_TRAIN_STEPS, training.warmup_ratio))
    if run in ("resumed", "warm"):
        restore_original_optimiser(directory, model, optimisers)
    if run == "warm":
        for schedule in (optimisers.encoder_schedule, optimisers.task_schedule):
            schedule.last_epoch = RECORD["warm"]["global_step_initial"]
        optimisers.follow_plan()
    document = reference_document(trained)
    engine = Engine(training)
    record = {"start": {name: p.detach().clone() for name, p in model.named_parameters()}, "steps": []}
    for _ in range(steps):
        rates = optimisers.learning_rates()
        loss = training_step(recipe.losses, document, optimisers, training.gradient_clip, engine)
        record["steps"].append(
            {
                "loss": loss,
                "rates": rates,
                "norms": dict(optimisers.clip_norms or {}),
                "parameters": {name: p.detach().clone() for name, p in model.named_parameters()},
            }
        )
    model.count_lookup_rows(None)
    return record


def mismatches(record: dict, run: str, model: BaselineCorefModel) -> list[str]:
    """What differs from the reference's ``run`` (resumed or fresh): loss, learning rates, clip norms, changes."""
    found = []
    for index, step in enumerate(record["steps"], start=1):
        expected = RECORD[run][f"step{index}"]
        if not abs(step["loss"] - expected["loss"]) <= GRADIENT_TOLERANCE * abs(expected["loss"]):
            found.append(f"step {index}: loss {step['loss']} here, {expected['loss']} in the original")
        for ours, theirs in (
            (step["rates"]["bert_learning_rate"], expected["bert_learning_rate"]),
            (step["rates"]["task_learning_rate"], expected["task_learning_rate"]),
        ):
            if not abs(ours - theirs) <= 1e-6 * abs(theirs) + 1e-12:
                found.append(f"step {index}: learning rate {ours} here, {theirs} in the original")
        norms = [step["norms"].get("encoder"), step["norms"].get("task")]
        for name, ours, theirs in zip(("bert", "task"), norms, expected["clip_global_norms_bert_task"], strict=True):
            if ours is None or not abs(ours - theirs) <= GRADIENT_TOLERANCE * theirs:
                found.append(f"step {index}: the {name} clip's norm {ours} here, {theirs} in the original")
        previous = record["steps"][index - 2]["parameters"] if index > 1 else record["start"]
        # the original's variables before this step: the checkpoint's (ours, imported from it), then its own
        if index == 1:
            before = {m.torch_name: record["start"][m.torch_name] for m in tf_mappings(model)}
        else:
            before = {
                m.torch_name: torch_value(m, ARRAYS[f"{run}/step{index - 1}/{m.tf_name}"]) for m in tf_mappings(model)
            }
        for mapping in tf_mappings(model):
            key = f"{run}/step{index}/{mapping.tf_name}"
            if key not in ARRAYS:
                continue
            if SHIFT_INVARIANT.match(mapping.tf_name):
                continue
            after = torch_value(mapping, ARRAYS[key])
            theirs = after - before[mapping.torch_name]
            ours = step["parameters"][mapping.torch_name] - previous[mapping.torch_name]
            # Each side stores its new values in float32: the same change can land one unit in the last place
            # apart, which a change of 1e-4 on values near 1 makes a relative 1e-4 on its own.
            allowed = CHANGE_TOLERANCE * float(theirs.norm()) + float(np.linalg.norm(np.spacing(after.numpy())))
            if not float(theirs.norm()):
                if float(ours.norm()):
                    found.append(f"step {index}: {mapping.tf_name} moved by {float(ours.norm()):.3g}, not at all there")
            elif not float((ours - theirs).norm()) <= allowed:
                found.append(
                    f"step {index}: {mapping.tf_name}'s change differs by {relative(ours, theirs):.2g} (relative)"
                )
    return found


def schedule_mismatches(directory, training: TrainingConfig) -> list[str]:
    """Where the recipe's learning rates differ from the original's at the global steps the reference read them
    (its start, the warm-up's end, the middle and the end of the decay, beyond it)."""
    trained = without_dropout(directory)
    optimisers = baseline_recipe(trained, training).optimisers(StepPlan(NUM_TRAIN_STEPS, training.warmup_ratio))
    trained.model.count_lookup_rows(None)
    found = []
    for step, expected in RECORD["schedule"].items():
        for schedule in (optimisers.encoder_schedule, optimisers.task_schedule):
            schedule.last_epoch = int(step)
        optimisers.follow_plan()
        rates = optimisers.learning_rates()
        ours = [rates["bert_learning_rate"], rates["task_learning_rate"]]
        if not all(abs(a - b) <= 1e-6 * abs(b) + 1e-13 for a, b in zip(ours, expected, strict=True)):
            found.append(f"global step {step}: learning rates {ours} here, {expected} in the original")
    return found


@pytest.fixture(scope="module")
def reference_runs(imported):
    training = preset_training("best")
    model = without_dropout(imported).model
    return {run: run_steps(imported, training, run) for run in RUNS}, model


def test_the_first_step_has_the_originals_loss_and_gradients(imported):
    trained = without_dropout(imported)
    model: BaselineCorefModel = trained.model
    loss = next(iter(model.training_losses(reference_document(trained))))
    loss.backward()
    assert loss.item() == pytest.approx(RECORD["resumed"]["step1"]["loss"], rel=GRADIENT_TOLERANCE)
    parameters = dict(model.named_parameters())
    # the sums along the chain, the encoder's and the head's, in another order: a softmax shift's rounding bound
    terms = encoder_terms(model.encoder.model.config, trained.config.max_segment_len) + head_terms(model)
    largest = max(
        float(np.abs(ARRAYS[f"grad/{m.tf_name}"]).max()) for m in tf_mappings(model) if m.tf_name not in NO_GRADIENT
    )
    compared = 0
    for mappings in grouped_mappings(model).values():
        for mapping in mappings:
            gradient = parameters[mapping.torch_name].grad
            if mapping.tf_name in NO_GRADIENT:  # the pooler: no gradient in the original, none here
                assert gradient is None, mapping.tf_name
                continue
            assert gradient is not None, mapping.tf_name
            theirs = torch_value(mapping, ARRAYS[f"grad/{mapping.tf_name}"])
            difference = float((gradient - theirs).norm())
            if SHIFT_INVARIANT.match(mapping.tf_name):  # zero in exact arithmetic: both sides rounding noise
                allowed = reordered(terms) * largest * math.sqrt(theirs.numel())  # each element within the bound
            else:
                allowed = GRADIENT_TOLERANCE * float(theirs.norm())
            assert difference <= allowed, f"{mapping.tf_name}: {difference:.3g} > {allowed:.3g}"
            compared += 1
    assert compared == len(tf_mappings(model)) - len(NO_GRADIENT) > 0


def test_the_lookups_the_original_counts_row_by_row_are_the_models():
    """``lookup_parameters`` names the variables whose gradients TensorFlow held as IndexedSlices."""
    from coref_pipeline.original.tf_import import build_imported_model

    model, _, _ = build_imported_model(TINY_CHECKPOINT)
    names = {id(p): name for name, p in model.named_parameters()}
    by_torch = {m.torch_name: m.tf_name for m in tf_mappings(model)}
    # The genre's is one too, but of one row (its one lookup, before the rounds): its norm is its dense gradient's.
    assert "genre_embeddings" in INDEXED_SLICES
    expected = [name for name in INDEXED_SLICES if name != "genre_embeddings"]
    assert sorted(by_torch[names[id(p)]] for p in model.lookup_parameters()) == expected


def test_the_learning_rates_are_the_originals_at_every_global_step_read(imported):
    assert schedule_mismatches(imported, preset_training("best")) == []


@pytest.mark.parametrize("run", RUNS)
def test_one_and_two_steps_are_the_originals(reference_runs, run):
    records, model = reference_runs
    assert mismatches(records[run], run, model) == []


@pytest.mark.parametrize("preset", PUBLISHED)
def test_every_published_preset_trains_as_the_original(imported, preset):
    training = preset_training(preset)
    assert training.optimiser == "original"
    model = without_dropout(imported).model
    for run in ("resumed", "warm"):
        assert mismatches(run_steps(imported, training, run, steps=1), run, model) == [], run
    assert schedule_mismatches(imported, training) == []


def test_the_project_recipe_trains_otherwise(imported):
    """``cpu_minilm`` keeps torch's optimisers (the docs say why): its step is not the original's."""
    training = preset_training("cpu_minilm")
    assert training.optimiser == "torch"
    record = run_steps(imported, training, "fresh", steps=1)
    assert mismatches(record, "fresh", without_dropout(imported).model) != []


def _forcing(where: dict, **forced):
    """``TFAdam.__init__`` with ``forced`` keyword values for the optimiser built with ``where``'s values."""
    init = optim.TFAdam.__init__

    def changed(self, *args, **kwargs):
        matches = all(kwargs.get(key) == value for key, value in where.items())
        init(self, *args, **({**kwargs, **forced} if matches else kwargs))

    return changed


def _joint_clip(self, gradient_clip, precision=None, step=optim.Optimisers.step):
    """One clip over both optimisers' gradients, before each optimiser's own (then within its norm, a no-op)."""
    squares = self.lookup_rows.take()
    optim.clip_by_global_norm(self.encoder_parameters + self.task_parameters, gradient_clip, squares)
    step(self, gradient_clip, precision)


# Each detail found by running the original's training. The encoder's epsilon is adam_eps in both (1e-6); 1e-8
# there moves BERT's updates by less than float32 resolves in these variables' changes, so it is not among them.
MUTATIONS = {
    "the task's epsilon": lambda mp: mp.setattr(optim, "TF_ADAM_EPSILON", 1e-6),
    "the encoder's bias correction": lambda mp: mp.setattr(
        optim.TFAdam, "__init__", _forcing({"bias_correction": False}, bias_correction=True)
    ),
    "the task's bias correction": lambda mp: mp.setattr(
        optim.TFAdam, "__init__", _forcing({"bias_correction": True}, bias_correction=False)
    ),
    "the weight-decay exclusions": lambda mp: mp.setattr(optim, "NO_DECAY", ("LayerNorm",)),
    "the warm-up formula": lambda mp: mp.setattr(
        optim.StepPlan, "original_factor", lambda self, step, warmup=True: self.factor(step, warmup)
    ),
    "clipping per optimiser": lambda mp: mp.setattr(optim.Optimisers, "step", _joint_clip),
    "lookups counted densely": lambda mp: mp.setattr(BaselineCorefModel, "lookup_parameters", lambda self: []),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_optimiser_detail_is_held(imported, monkeypatch, mutation):
    """A change of one detail found in the original's training makes a step differ from it, resumed or fresh."""
    MUTATIONS[mutation](monkeypatch)
    training = preset_training("best")
    model = without_dropout(imported).model
    found = [problem for run in RUNS for problem in mismatches(run_steps(imported, training, run), run, model)]
    found += schedule_mismatches(imported, training)
    assert found, mutation
