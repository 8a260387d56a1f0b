"""The original's TensorFlow checkpoints as model directories: Joshi et al.'s released models, imported.

A released model directory (``bert_base``, ``spanbert_base``, ``bert_large``, ``spanbert_large``)
holds a TF 1.x training checkpoint (``model.max.ckpt.*``), the encoder's ``bert_config.json`` and
``vocab.txt``, and ``experiments.conf``. :func:`import_tf_checkpoint` reads them (the checkpoint
with :mod:`coref_pipeline.original.tf_checkpoint`, no TensorFlow) and writes a baseline model directory
that ``CorefModel.load`` reads.

Every variable maps to one parameter of :class:`~coref_pipeline.models.baseline.BaselineCorefModel`
(:func:`variable_mappings`). TF stores a dense kernel as ``[in, out]`` and torch's ``nn.Linear`` a
weight as ``[out, in]``: each mapping says whether it transposes, and only the kernels and FFNN
weights do. The module layout follows the original's equations one to one: the span scorer's
FFNNs (``util.ffnn``: ``hidden_weights_i``, ``hidden_bias_i``, ``output_weights``,
``output_bias``), the bilinear ``src_projection``, the coarse distance prior (the original's
root-scope ``antecedent_distance_emb`` and its unscoped projection ``output_weights`` /
``output_bias``), the fine FFNN and its feature embeddings under ``coref_layer/`` and the
higher-order gate ``coref_layer/f``.

Optimiser state (the encoder's ``adam_m`` / ``adam_v``, the task's ``Adam`` / ``Adam_1`` slots,
``beta1_power``, ``beta2_power``, ``global_step``) is skipped and counted, or, with ``optimiser_state``,
written beside the model by parameter name (:func:`read_optimiser_state`). Anything else the
configuration does not explain, a variable it needs and the checkpoint lacks, or a shape that
contradicts it is a :class:`TFImportError` naming the variable; nothing is written then.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from coref_pipeline.errors import UserError
from coref_pipeline.files import atomic_directory, atomic_write_json
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import BaselineConfig, ConfigError
from coref_pipeline.models.directory import CONFIG, TOKENIZER
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.serialization import save_model_directory
from coref_pipeline.original.tf_checkpoint import CheckpointError, TensorBundle

logger = logging.getLogger(__name__)

EXPERIMENTS_FILE = "experiments.conf"
BERT_CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
PROVENANCE_FILE = "imported_from.json"  # written beside the model: where it came from, what was skipped
ENCODER_PREFIX = "bert/"
# --optimizer-state: the original's optimiser slots by parameter name, and its step and schedule
OPTIMISER_STATE_TENSORS = "original_optimiser.safetensors"
OPTIMISER_STATE_FILE = "original_optimiser.json"
# Optimiser state saved beside the weights: BERT's AdamWeightDecayOptimizer slots, tf.train.AdamOptimizer's
# slots and accumulators (several Adam optimisers number theirs: beta1_power_1), the step counter.
OPTIMISER_SLOTS = ("adam_m", "adam_v", "Adam", "Adam_1")
OPTIMISER_GLOBALS = re.compile(r"^(global_step|beta[12]_power(_\d+)?)$")
# bert_config.json keys: BERT's BertConfig, and the TF BERT releases' pooler/direction keys, unused by the model.
BERT_CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_hidden_layers",
    "num_attention_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "hidden_act": "hidden_act",
    "hidden_dropout_prob": "hidden_dropout_prob",
    "attention_probs_dropout_prob": "attention_probs_dropout_prob",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "initializer_range": "initializer_range",
}
IGNORED_BERT_CONFIG_KEYS = {
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
}
# bert/modeling.py's get_activation: the names it knows, as transformers names the same functions
# (its "gelu" is the exact erf form, which is transformers' "gelu").
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "linear": "linear"}
BERT_LAYER_NORM_EPS = 1e-12  # tf.contrib.layers.layer_norm's epsilon, which bert/modeling.py uses


class TFImportError(UserError, ValueError):
    """A checkpoint directory that does not hold a model of the original this importer reads."""


@dataclass(frozen=True)
class VariableMapping:
    """One checkpoint variable and the parameter it becomes."""

    tf_name: str
    torch_name: str
    transpose: bool  # a TF kernel [in, out] becomes a torch Linear weight [out, in]


def _linear(tf_scope: str, torch_prefix: str) -> list[VariableMapping]:
    """``util.projection``: ``output_weights`` [in, out] (transposed) and ``output_bias``."""
    scope = f"{tf_scope}/" if tf_scope else ""
    return [
        VariableMapping(f"{scope}output_weights", f"{torch_prefix}.weight", transpose=True),
        VariableMapping(f"{scope}output_bias", f"{torch_prefix}.bias", transpose=False),
    ]


def _ffnn(tf_scope: str, torch_prefix: str, depth: int) -> list[VariableMapping]:
    """``util.ffnn`` with ``depth`` hidden layers -> :class:`~coref_pipeline.models.layers.FFNN`."""
    mappings = []
    for index in range(depth):
        mappings += [
            VariableMapping(f"{tf_scope}/hidden_weights_{index}", f"{torch_prefix}.hidden.{index}.weight", True),
            VariableMapping(f"{tf_scope}/hidden_bias_{index}", f"{torch_prefix}.hidden.{index}.bias", False),
        ]
    return mappings + _linear(tf_scope, f"{torch_prefix}.output")


def _dense(tf_scope: str, torch_prefix: str) -> list[VariableMapping]:
    """A ``tf.layers.dense`` layer: ``kernel`` [in, out] (transposed) and ``bias``."""
    return [
        VariableMapping(f"{tf_scope}/kernel", f"{torch_prefix}.weight", transpose=True),
        VariableMapping(f"{tf_scope}/bias", f"{torch_prefix}.bias", transpose=False),
    ]


def _layer_norm(tf_scope: str, torch_prefix: str) -> list[VariableMapping]:
    return [
        VariableMapping(f"{tf_scope}/LayerNorm/gamma", f"{torch_prefix}.LayerNorm.weight", False),
        VariableMapping(f"{tf_scope}/LayerNorm/beta", f"{torch_prefix}.LayerNorm.bias", False),
    ]


def encoder_mappings(num_layers: int) -> list[VariableMapping]:
    """``bert/modeling.py``'s variables -> the transformers ``BertModel`` inside the segment encoder."""
    tf, pt = "bert", "encoder.model"
    mappings = [
        VariableMapping(f"{tf}/embeddings/word_embeddings", f"{pt}.embeddings.word_embeddings.weight", False),
        VariableMapping(f"{tf}/embeddings/position_embeddings", f"{pt}.embeddings.position_embeddings.weight", False),
        VariableMapping(
            f"{tf}/embeddings/token_type_embeddings", f"{pt}.embeddings.token_type_embeddings.weight", False
        ),
        *_layer_norm(f"{tf}/embeddings", f"{pt}.embeddings"),
    ]
    for index in range(num_layers):
        layer, torch_layer = f"{tf}/encoder/layer_{index}", f"{pt}.encoder.layer.{index}"
        for name in ("query", "key", "value"):
            mappings += _dense(f"{layer}/attention/self/{name}", f"{torch_layer}.attention.self.{name}")
        mappings += _dense(f"{layer}/attention/output/dense", f"{torch_layer}.attention.output.dense")
        mappings += _layer_norm(f"{layer}/attention/output", f"{torch_layer}.attention.output")
        mappings += _dense(f"{layer}/intermediate/dense", f"{torch_layer}.intermediate.dense")
        mappings += _dense(f"{layer}/output/dense", f"{torch_layer}.output.dense")
        mappings += _layer_norm(f"{layer}/output", f"{torch_layer}.output")
    return mappings + _dense(f"{tf}/pooler/dense", f"{pt}.pooler.dense")


def task_mappings(config: BaselineConfig) -> list[VariableMapping]:
    """The task variables ``independent.py`` creates under ``config``'s switches -> the baseline's parameters."""
    depth = config.ffnn_depth
    mappings = []
    # get_span_emb: the width embedding (use_features) and the head attention (model_heads)
    if config.use_features:
        mappings.append(VariableMapping("span_width_embeddings", "span_scorer.span_width_embeddings.weight", False))
    if config.model_heads:
        mappings += _linear("mention_word_attn", "span_scorer.mention_word_attn")
    # get_mention_scores: the mention FFNN, and the width prior (use_prior)
    mappings += _ffnn("mention_scores", "span_scorer.mention_scores", depth)
    if config.use_prior:
        mappings.append(
            VariableMapping("span_width_prior_embeddings", "span_scorer.span_width_prior_embeddings.weight", False)
        )
        mappings += _ffnn("width_scores", "span_scorer.width_scores", depth)
    # get_predictions_and_loss creates the genre embedding whatever the switches
    mappings.append(VariableMapping("genre_embeddings", "pair_scorer.genre_embeddings.weight", False))
    # coarse_to_fine_pruning: the bilinear source projection, and the distance prior (use_prior), whose
    # embedding and projection the original creates in the root scope
    mappings += _linear("src_projection", "src_projection")
    if config.use_prior:
        mappings.append(VariableMapping("antecedent_distance_emb", "antecedent_distance_prior.weight", False))
        mappings += _linear("", "distance_prior_projection")
    if config.fine_grained:  # the coref_layer loop: the fine FFNN's features and the higher-order gate f
        if config.use_metadata:
            mappings.append(
                VariableMapping("coref_layer/same_speaker_emb", "pair_scorer.same_speaker_emb.weight", False)
            )
        if config.use_features:
            mappings.append(
                VariableMapping(
                    "coref_layer/antecedent_distance_emb", "pair_scorer.antecedent_distance_emb.weight", False
                )
            )
        if config.use_segment_distance:
            mappings.append(
                VariableMapping(
                    "coref_layer/segment_distance/segment_distance_embeddings",
                    "pair_scorer.segment_distance_embeddings.weight",
                    False,
                )
            )
        mappings += _ffnn("coref_layer/slow_antecedent_scores", "pair_scorer.slow_antecedent_scores", depth)
        mappings += _linear("coref_layer/f", "gate")
    return mappings


def variable_mappings(config: BaselineConfig, num_layers: int) -> list[VariableMapping]:
    """Every variable a checkpoint of the original holds for ``config`` and a ``num_layers``-layer BERT."""
    return encoder_mappings(num_layers) + task_mappings(config)


def is_optimiser_state(name: str, model_variables: set[str]) -> bool:
    """An optimiser's variable: a slot of one of ``model_variables``, an Adam accumulator or the step."""
    if OPTIMISER_GLOBALS.match(name):
        return True
    base, _, slot = name.rpartition("/")
    return slot in OPTIMISER_SLOTS and base in model_variables


# ----------------------------------------------------------------- configuration


def choose_experiment(directory: Path, experiments: Path, experiment: str | None) -> str:
    """The ``experiments.conf`` entry that describes the checkpoint: ``experiment``, else the one named as the
    directory (the released archives unpack to ``bert_base/``, ``spanbert_large/``...), else the only entry
    beside ``best``."""
    from coref_pipeline.original.hocon import experiment_names

    try:
        entries = experiment_names(experiments)
    except Exception as error:  # pyhocon's parse errors have no common base class
        raise TFImportError(f"{experiments}: not a HOCON experiments file ({' '.join(str(error).split())})") from None
    if experiment is not None:
        if experiment not in entries:
            raise TFImportError(f"{experiments} has no experiment {experiment!r}; it has {entries}")
        return experiment
    if directory.name in entries:
        return directory.name
    candidates = [entry for entry in entries if entry != "best"]
    if len(candidates) == 1:
        return candidates[0]
    raise TFImportError(
        f"{experiments}: which experiment is the checkpoint in {directory}? None is named {directory.name!r}; "
        f"choose one of {candidates} with --preset"
    )


def original_config(experiments: Path, experiment: str, tokenizer_path: str) -> BaselineConfig:
    """The baseline configuration of an ``experiments.conf`` entry, as the original reads it.

    The released models' encoders are named as the project's presets name them (``SpanBERT/spanbert-base-cased``
    read with ``bert-base-cased``'s tokenizer); another experiment's encoder is named after it and its tokenizer is
    the model directory's own (``tokenizer_path``). A document key outside ``genres`` takes the first genre, as
    ``independent.py`` does (``self.genres.get(doc_key[:2], 0)``).
    """
    from coref_pipeline.original.hocon import import_experiment

    try:
        preset, _ = import_experiment(experiments, experiment)
    except KeyError as error:
        raise TFImportError(str(error.args[0])) from None
    except (ValueError, ConfigError) as error:
        raise TFImportError(f"{experiments}, experiment {experiment!r}: {error}") from None
    values = {key: value for key, value in preset.items() if key in BaselineConfig.keys()}
    if "encoder" not in values:
        values["encoder"] = f"tf-checkpoint:{experiment}"
        values["tokenizer"] = tokenizer_path
    genres = values.get("genres") or list(BaselineConfig().genres)
    values["default_genre"] = genres[0]
    values["special_token_spans"] = True  # the original's candidate rule, so that it predicts what the original does
    try:
        config = BaselineConfig.from_dict(values)
    except ConfigError as error:
        raise TFImportError(f"{experiments}, experiment {experiment!r}: {error}") from None
    if not config.coarse_to_fine:
        raise TFImportError(
            f"{experiments}, experiment {experiment!r}: coarse_to_fine = false, which the original ignores (it always "
            "scores the coarse bilinear) and this project reads as distance pruning; set it to true to import"
        )
    return config


def encoder_config(path: Path) -> Any:
    """A transformers ``BertConfig`` of the original's ``bert_config.json`` (unknown keys refused)."""
    from transformers import BertConfig

    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TFImportError(f"{path}: not a JSON BERT configuration ({' '.join(str(error).split())})") from None
    if not isinstance(values, dict):
        raise TFImportError(f"{path}: not a JSON object")
    unknown = sorted(set(values) - set(BERT_CONFIG_KEYS) - IGNORED_BERT_CONFIG_KEYS)
    if unknown:
        raise TFImportError(f"{path}: unknown key(s) {unknown}; BERT's keys are {sorted(BERT_CONFIG_KEYS)}")
    missing = sorted(
        key for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads") if key not in values
    )
    if missing:
        raise TFImportError(f"{path}: missing key(s) {missing}")
    activation = values.get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        raise TFImportError(f"{path}: hidden_act {activation!r} is not one of {sorted(ACTIVATIONS)}")
    kwargs = {BERT_CONFIG_KEYS[key]: value for key, value in values.items() if key in BERT_CONFIG_KEYS}
    kwargs["hidden_act"] = ACTIVATIONS[activation]
    return BertConfig(layer_norm_eps=BERT_LAYER_NORM_EPS, **kwargs)


def read_vocabulary(path: Path) -> dict[str, int]:
    """BERT's ``vocab.txt``: one token a line, its id the line's number (a repeated token keeps the last)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise TFImportError(f"{path}: not a UTF-8 vocabulary ({' '.join(str(error).split())})") from None
    vocabulary = {}
    for index, line in enumerate(lines):
        token = line.strip()
        if token:
            vocabulary[token] = index
    for special in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"):
        if special not in vocabulary:
            raise TFImportError(f"{path}: no {special} token (not a BERT WordPiece vocabulary)")
    return vocabulary


def cased_tokenizer(vocabulary: dict[str, int]) -> Any:
    """The original's ``FullTokenizer(vocab_file, do_lower_case=False)`` as a fast tokenizer."""
    from transformers import BertTokenizerFast

    return BertTokenizerFast(vocab=vocabulary, do_lower_case=False, strip_accents=None, tokenize_chinese_chars=True)


# ------------------------------------------------------------------ import


@dataclass
class ImportSummary:
    """What :func:`import_tf_checkpoint` did."""

    checkpoint: Path  # the prefix read
    experiment: str
    segment_length: int | str  # what the model reads (the jsonlines partition's label: 384)
    imported: int  # variables that became parameters
    parameters: int  # their elements
    skipped: list[str] = field(default_factory=list)  # optimiser state
    skipped_bytes: int = 0
    initialised: list[str] = field(default_factory=list)  # parameters the switches leave unused (initial values)
    optimiser_state: dict[str, Any] | None = None  # imported too (--optimizer-state): its step and schedule

    def describe(self) -> str:
        """One paragraph for the command line."""
        kinds = sorted({name.rpartition("/")[2] if "/" in name else name for name in self.skipped})
        text = (
            f"imported {self.imported} variables ({self.parameters:,} parameters) of experiment {self.experiment!r} "
            f"from {self.checkpoint}; skipped {len(self.skipped)} optimiser variables "
            f"({_size(self.skipped_bytes)}: {', '.join(kinds) or 'none'})"
        )
        if self.optimiser_state is not None:
            state = self.optimiser_state
            text += (
                f"; its optimiser state imported too (global_step {state['global_step']} of "
                f"{state['num_train_steps']}, warm-up {state['num_warmup_steps']} steps)"
            )
        if self.initialised:
            text += (
                f"; left at their initial values, unused by the experiment's switches: {', '.join(self.initialised)}"
            )
        return text


def _size(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:.1f} MiB" if num_bytes >= 2**20 else f"{num_bytes / 2**10:.1f} KiB"


def _check_is_coreference(bundle: TensorBundle, where: str) -> None:
    """A BERT encoder and something beside it (before any configuration is read: a plain BERT has none)."""
    encoder = {name for name in bundle if name.startswith(ENCODER_PREFIX)}
    if not encoder:
        raise TFImportError(f"{where}: no BERT encoder variables (bert/...): not a checkpoint of BERT for coreference")
    if all(name in encoder or is_optimiser_state(name, encoder) for name in bundle):
        raise TFImportError(
            f"{where}: a BERT checkpoint without the coreference model's variables (mention_scores/..., "
            "coref_layer/...): a pretrained encoder, not a trained coreference model; import a released coreference "
            "model (bert_base, spanbert_base, bert_large, spanbert_large), or train one with coref_train"
        )


def _check_variables(
    bundle: TensorBundle, mappings: list[VariableMapping], experiment: str, where: str
) -> tuple[list[str], int]:
    """Every checkpoint variable explained, every needed one present: the optimiser's names and bytes."""
    needed = {mapping.tf_name for mapping in mappings}
    unexplained = [name for name in bundle if name not in needed and not is_optimiser_state(name, needed)]
    if unexplained:
        more = f" (and {len(unexplained) - 1} more)" if len(unexplained) > 1 else ""
        name = unexplained[0]
        raise TFImportError(
            f"{where}: variable {name!r} {list(bundle.shape(name))}{more} is neither a variable of experiment "
            f"{experiment!r} nor optimiser state: no key of its configuration explains it"
        )
    missing = [mapping.tf_name for mapping in mappings if mapping.tf_name not in bundle]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise TFImportError(f"{where}: lacks variable {missing[0]!r}{more}, which experiment {experiment!r} needs")
    skipped = [name for name in bundle if name not in needed]
    return skipped, sum(bundle.entries[name].size for name in skipped)


def _check_shapes(
    bundle: TensorBundle, mappings: list[VariableMapping], state: dict[str, torch.Tensor], experiment: str, where: str
) -> None:
    for mapping in mappings:
        expected = tuple(state[mapping.torch_name].shape)
        if mapping.transpose:
            expected = expected[::-1]
        entry = bundle.entries[mapping.tf_name]
        if entry.shape != expected:
            raise TFImportError(
                f"{where}: variable {mapping.tf_name!r} has shape {list(entry.shape)}; experiment {experiment!r} "
                f"(experiments.conf and bert_config.json) gives it {list(expected)}"
            )
        if entry.dtype != np.dtype("<f4"):
            raise TFImportError(
                f"{where}: variable {mapping.tf_name!r} has TensorFlow dtype {entry.dtype_code}, not float32"
            )


def build_imported_model(
    directory: str | Path, experiment: str | None = None, tokenizer_path: str = TOKENIZER
) -> tuple[BaselineCorefModel, Any, ImportSummary]:
    """The baseline of the original checkpoint in ``directory``, its tokenizer and what was read and skipped.

    ``tokenizer_path`` names the tokenizer in the configuration of an experiment whose encoder is not a
    released one (where the model directory will hold it).
    """
    directory = Path(directory)
    try:
        bundle = TensorBundle.open(directory)
    except CheckpointError as error:
        raise TFImportError(str(error)) from None
    where = str(bundle.prefix)
    config_dir = directory if directory.is_dir() else bundle.prefix.parent
    _check_is_coreference(bundle, where)
    for name in (EXPERIMENTS_FILE, BERT_CONFIG_FILE, VOCAB_FILE):
        if not (config_dir / name).is_file():
            raise TFImportError(
                f"{config_dir / name}: missing (a released model directory holds it beside the checkpoint)"
            )
    experiment = choose_experiment(config_dir, config_dir / EXPERIMENTS_FILE, experiment)
    encoder = encoder_config(config_dir / BERT_CONFIG_FILE)
    vocabulary = read_vocabulary(config_dir / VOCAB_FILE)
    if max(vocabulary.values()) >= encoder.vocab_size:
        raise TFImportError(
            f"{config_dir / VOCAB_FILE}: {max(vocabulary.values()) + 1} lines, more than bert_config.json's "
            f"vocab_size {encoder.vocab_size}"
        )
    config = original_config(config_dir / EXPERIMENTS_FILE, experiment, tokenizer_path)
    mappings = variable_mappings(config, encoder.num_hidden_layers)
    skipped, skipped_bytes = _check_variables(bundle, mappings, experiment, where)

    torch.manual_seed(0)  # the parameters no variable fills (unused under the switches) are the same every time
    model = BaselineCorefModel(config, SegmentEncoder.from_config(encoder))
    state = model.state_dict()
    _check_shapes(bundle, mappings, state, experiment, where)
    try:
        for mapping in mappings:
            array = bundle.read(mapping.tf_name)
            tensor = torch.from_numpy(np.ascontiguousarray(array.T if mapping.transpose else array))
            state[mapping.torch_name] = tensor
    except CheckpointError as error:
        raise TFImportError(str(error)) from None
    model.load_state_dict(state)
    model.eval()
    filled = {mapping.torch_name for mapping in mappings}
    initialised = sorted(name for name, _ in model.named_parameters() if name not in filled)
    summary = ImportSummary(
        checkpoint=bundle.prefix,
        experiment=experiment,
        segment_length=config.segment_length,
        imported=len(mappings),
        parameters=sum(bundle.entries[mapping.tf_name].num_elements for mapping in mappings),
        skipped=skipped,
        skipped_bytes=skipped_bytes,
        initialised=initialised,
    )
    return model, cased_tokenizer(vocabulary), summary


def read_optimiser_state(directory: str | Path, model: BaselineCorefModel, experiment: str) -> OptimiserState:
    """The optimiser state of the original checkpoint in ``directory``, by the imported model's parameter names.

    The encoder's ``AdamWeightDecayOptimizer`` slots (``adam_m``, ``adam_v``) and the task's ``AdamOptimizer``
    slots (``Adam``, ``Adam_1``) become each parameter's ``exp_avg`` and ``exp_avg_sq`` (transposed as the
    variable is); ``global_step`` is the step the original takes next; the task Adam's steps are read from its
    ``beta1_power`` (``beta1^(steps + 1)``, checked against ``beta2_power``); the schedule's length is the
    experiment's ``num_docs * num_epochs`` and its warm-up a tenth of it (``independent.py``). A variable without
    slots (one the original never trained, such as BERT's pooler) starts from zeros and is named.
    """
    from coref_pipeline.original.hocon import experiment_entry

    bundle = TensorBundle.open(directory)
    where = str(bundle.prefix)
    config_dir = Path(directory) if Path(directory).is_dir() else bundle.prefix.parent
    entry = experiment_entry(config_dir / EXPERIMENTS_FILE, experiment)
    for name in ("global_step", "beta1_power", "beta2_power"):
        if name not in bundle:
            raise TFImportError(f"{where}: no {name!r} variable: the checkpoint holds no optimiser state to import")
    tensors: dict[str, torch.Tensor] = {}
    without_slots = []
    for mapping in variable_mappings(model.config, model.encoder.model.config.num_hidden_layers):
        slots = ("adam_m", "adam_v") if mapping.tf_name.startswith(ENCODER_PREFIX) else ("Adam", "Adam_1")
        if not all(f"{mapping.tf_name}/{slot}" in bundle for slot in slots):
            without_slots.append(mapping.tf_name)
            continue
        for slot, key in zip(slots, ("exp_avg", "exp_avg_sq"), strict=True):
            array = bundle.read(f"{mapping.tf_name}/{slot}")
            tensors[f"{mapping.torch_name}.{key}"] = torch.from_numpy(
                np.ascontiguousarray(array.T if mapping.transpose else array)
            )
    beta1_power, beta2_power = float(bundle.read("beta1_power")), float(bundle.read("beta2_power"))
    steps = round(math.log(beta1_power) / math.log(0.9)) - 1
    if steps < 0 or round(math.log(beta2_power) / math.log(0.999)) - 1 != steps:
        raise TFImportError(
            f"{where}: beta1_power {beta1_power} and beta2_power {beta2_power} are not one Adam's powers after the "
            "same number of steps"
        )
    num_train_steps = int(entry["num_docs"]) * int(entry["num_epochs"])
    return OptimiserState(
        tensors,
        {
            "global_step": int(bundle.read("global_step")),
            "task_adam_steps": steps,
            "num_train_steps": num_train_steps,
            "num_warmup_steps": int(0.1 * num_train_steps),
            "experiment": experiment,
            "without_slots": without_slots,
        },
    )


@dataclass
class OptimiserState:
    """The original's optimiser state for an imported model: slots by parameter name, and the step it is at."""

    tensors: dict[str, torch.Tensor]  # "<parameter>.exp_avg", "<parameter>.exp_avg_sq"
    meta: dict[str, Any]  # global_step, task_adam_steps, num_train_steps, num_warmup_steps, experiment, ...


def import_tf_checkpoint(
    directory: str | Path, out_dir: str | Path, experiment: str | None = None, optimiser_state: bool = False
) -> ImportSummary:
    """Write the original checkpoint in ``directory`` as a baseline model directory ``out_dir``.

    ``experiment``: the ``experiments.conf`` entry (default: the one named as the directory). ``out_dir``
    must be new, empty or a model directory (which is replaced); it is written whole or not at all.
    ``optimiser_state``: also its optimiser's slots and step (:func:`read_optimiser_state`), beside the model
    (``original_optimiser.safetensors`` and ``.json``): ``coref_train`` with ``init_from`` that directory and
    ``optimiser: original`` continues from them.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / CONFIG).is_file())):
        raise TFImportError(f"{out_dir}: exists and is not an empty directory or a model directory; choose a new one")
    model, tokenizer, summary = build_imported_model(directory, experiment, str(out_dir / TOKENIZER))
    state = read_optimiser_state(directory, model, summary.experiment) if optimiser_state else None
    with atomic_directory(out_dir) as temporary:
        save_model_directory(temporary, model, "baseline", model.config.to_dict(), tokenizer)
        if state is not None:
            save_file(state.tensors, str(temporary / OPTIMISER_STATE_TENSORS))
            atomic_write_json(state.meta, temporary / OPTIMISER_STATE_FILE)
            summary.optimiser_state = state.meta
        atomic_write_json(
            {
                "checkpoint": str(summary.checkpoint),
                "experiment": summary.experiment,
                "imported_variables": summary.imported,
                "skipped_optimiser_variables": len(summary.skipped),
                "skipped_bytes": summary.skipped_bytes,
                "initial_values": summary.initialised,
            },
            temporary / PROVENANCE_FILE,
        )
    logger.debug("%s", summary.describe())
    return summary
