"""Xia, Sedoc and Van Durme's released incremental models (their 2020 code's checkpoints) as model directories.

The 2020 trainer (``pitrack/incremental-coref`` at ``dd329b0``, ``trainer.py``) saves
``{"model": state_dict, "optimizer": ..., "encoder_optimizer": ...}`` with ``torch.save``; the released
``spb_on_512`` is such a file. :func:`import_icoref` reads it with ``torch.load(weights_only=True)`` (tensors and
plain containers only: nothing is unpickled that could run code), renames its weights to the incremental model's
(:data:`WEIGHT_NAMES`), takes the configuration from the experiment's resolved values (:data:`EXPERIMENTS`, or the
authors' ``experiments.jsonnet`` / a trainer's ``config.json``) and the sizes from the weights, and writes an
incremental model directory that ``CorefModel.load`` reads. The encoder's configuration and tokenizer come from
ENCODER (a folder or a hub id, e.g. ``SpanBERT/spanbert-large-cased``); its weights from the checkpoint.

The configuration sets every behaviour of the 2020 code that differs from this project's reading of the paper
(``IncrementalConfig``'s ``distance_between``, ``evict_from``, ``gold_entities``, ``crossing_spans``,
``read_last_sentence``; docs/models/incremental.md, "Differences from the authors' code"), so that the imported
model decides as the code does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coref_pipeline.errors import UserError
from coref_pipeline.files import atomic_directory, atomic_write_json
from coref_pipeline.models.config import MAX_SENTENCE_SEGMENT_LEN, ConfigError, IncrementalConfig
from coref_pipeline.models.directory import CONFIG
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.incremental import IncrementalCorefModel
from coref_pipeline.models.serialization import save_model_directory
from coref_pipeline.pretrained import load_pretrained, load_tokenizer

logger = logging.getLogger(__name__)

PROVENANCE_FILE = "imported_from.json"
DEFAULT_EXPERIMENT = "spb_on_512"
ENCODER_PREFIX = "encoder.model."
# Keys a checkpoint written by an older transformers holds and today's BertModel does not: buffers that
# transformers recomputes (3.4 saved the position ids, ``arange(max_position_embeddings)``).
STALE_ENCODER_BUFFERS = ("embeddings.position_ids",)

# The 2020 code's parameter names (torch_scores.py, incremental.py) -> the incremental model's.
WEIGHT_NAMES = {
    "genre_embedder.genre_emb": "pair_scorer.genre_embeddings.weight",
    "span_scorer.span_width_embeddings": "span_scorer.span_width_embeddings.weight",
    "span_scorer.attnProjection.output_layer.weight": "span_scorer.mention_word_attn.weight",
    "span_scorer.attnProjection.output_layer.bias": "span_scorer.mention_word_attn.bias",
    "span_scorer.spanFFNN.layers.0.weight": "span_scorer.mention_scores.hidden.0.weight",
    "span_scorer.spanFFNN.layers.0.bias": "span_scorer.mention_scores.hidden.0.bias",
    "span_scorer.spanFFNN.projection.weight": "span_scorer.mention_scores.output.weight",
    "span_scorer.spanFFNN.projection.bias": "span_scorer.mention_scores.output.bias",
    "span_scorer.span_width_prior_embeddings": "span_scorer.span_width_prior_embeddings.weight",
    "span_scorer.widthFFNN.layers.0.weight": "span_scorer.width_scores.hidden.0.weight",
    "span_scorer.widthFFNN.layers.0.bias": "span_scorer.width_scores.hidden.0.bias",
    "span_scorer.widthFFNN.projection.weight": "span_scorer.width_scores.output.weight",
    "span_scorer.widthFFNN.projection.bias": "span_scorer.width_scores.output.bias",
    "pair_scorer.same_speaker_emb": "pair_scorer.same_speaker_emb.weight",
    "pair_scorer.antecedent_distance_emb": "pair_scorer.antecedent_distance_emb.weight",
    "pair_scorer.segment_distance_emb": "pair_scorer.segment_distance_embeddings.weight",
    "pair_scorer.slow_antecedent_scores.layers.0.weight": "pair_scorer.slow_antecedent_scores.hidden.0.weight",
    "pair_scorer.slow_antecedent_scores.layers.0.bias": "pair_scorer.slow_antecedent_scores.hidden.0.bias",
    "pair_scorer.slow_antecedent_scores.projection.weight": "pair_scorer.slow_antecedent_scores.output.weight",
    "pair_scorer.slow_antecedent_scores.projection.bias": "pair_scorer.slow_antecedent_scores.output.bias",
    "mlp.layers.0.weight": "alpha.hidden.0.weight",
    "mlp.layers.0.bias": "alpha.hidden.0.bias",
    "mlp.projection.weight": "alpha.output.weight",
    "mlp.projection.bias": "alpha.output.bias",
}
THRESHOLD = "threshold"  # the new-entity option's score: a parameter of theirs, a configuration value of ours


def _experiments() -> dict[str, dict[str, Any]]:
    """The model and training values of the 2020 code's experiments (``definitions.jsonnet`` over
    ``base.jsonnet`` at ``dd329b0``), resolved: ``spb_on_N`` (SpanBERT-large on OntoNotes segments of N: 1, 5, 10
    sentences or 128 ... 512 subtokens) and the evaluation entries of ``spb_on_512`` with eviction."""
    base = {
        "top_span_ratio": 0.4,
        "threshold": 0,
        "num_epochs": 50,
        "use_gold_spans": False,
        "teacher_forcing_rate": 0.0,
        "negative_sample_rate": 1.0,
        "adam_learning_rate": 2e-04,
        "encoder_learning_rate": 5e-06,
        "max_grad_norm": 10,
        "dropout": 0.4,
        "method": "alpha",
        "evict_fn": False,
        "patience": 5,
        "finetune": False,
        "max_span_width": 30,
        "genres": ["bc", "bn", "mz", "nw", "pt", "tc", "wb"],
        "encoder_name": "spanbert_large",
    }
    found = {}
    for segment in (1, 5, 10, 128, 256, 384, 512):
        name = f"spb_on_{segment}"
        found[name] = {**base, "run_name": name, "train_path": f"train.english.{segment}.jsonlines"}
    evicting = {"name": "trunc_linscale", "distance": 600}
    found["spb_on_512_dev"] = {**found["spb_on_512"], "evict_fn": evicting}
    found["spb_on_512_test"] = {**found["spb_on_512"], "evict_fn": evicting}
    found["spb_on_512_test_no_evict"] = dict(found["spb_on_512"])
    found["spb_on_512_no_evict"] = dict(found["spb_on_512"])
    return found


EXPERIMENTS = _experiments()


class ICorefImportError(UserError, ValueError):
    """A checkpoint, experiment or encoder that does not make an incremental model this importer reads."""


@dataclass
class ICorefImportSummary:
    """What :func:`import_icoref` did."""

    checkpoint: Path
    experiment: str
    segment_length: int | str
    imported: int  # tensors that became parameters (the threshold: a configuration value)
    parameters: int
    skipped: list[str] = field(default_factory=list)  # the checkpoint's other entries (optimiser state)
    dropped: list[str] = field(default_factory=list)  # stale encoder buffers
    capped: tuple[int, int] | None = None  # (the experiment's segment length, the encoder's positions)

    def describe(self) -> str:
        text = (
            f"imported {self.imported} tensors ({self.parameters:,} parameters) of experiment {self.experiment!r} "
            f"from {self.checkpoint}"
        )
        if self.skipped:
            text += f"; skipped {', '.join(self.skipped)}"
        if self.dropped:
            text += f"; dropped {', '.join(self.dropped)} (recomputed by today's transformers)"
        if self.capped:
            text += (
                f"; segments of at most {self.capped[1]} subtokens (the encoder's positions; the experiment names "
                f"{self.capped[0]})"
            )
        return text


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The 2020 trainer's file as tensors and plain containers; one that holds pickled objects is refused."""
    path = Path(path)
    if not path.is_file():
        raise ICorefImportError(f"{path}: no such file (the checkpoint.bin the authors' trainer saves)")
    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # 1.7 GB: mapped, not read
        except RuntimeError as error:
            if "mmap" not in str(error):
                raise
            loaded = torch.load(path, map_location="cpu", weights_only=True)  # a file in the legacy format
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL ([\w.]+)", str(error))
        reason = f"it names {found.group(1)}" if found else " ".join(str(error).split())[:120]
        raise ICorefImportError(
            f"{path}: holds pickled Python objects, not only tensors ({reason}); it is refused because loading it "
            "could run code. The 2021 trainer saves its optimisers as objects: load it in the authors' code, and "
            "torch.save a dict of the model's state_dict (model.state_dict()) to import"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise ICorefImportError(f"{path}: not a PyTorch checkpoint ({' '.join(str(error).split())[:200]})") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("model"), dict):
        keys = sorted(loaded) if isinstance(loaded, dict) else type(loaded).__name__
        raise ICorefImportError(
            f"{path}: no 'model' state dict (found {keys}); the 2020 trainer saves "
            "{'model': ..., 'optimizer': ..., 'encoder_optimizer': ...}"
        )
    return loaded


def read_experiments(path: str | Path) -> dict[str, dict[str, Any]]:
    """Experiments by name from the authors' ``experiments.jsonnet`` (needs the ``jsonnet`` package) or a JSON
    file: the ``config.json`` their trainer writes into an experiment's log_dir (one experiment, named by its
    ``run_name``), or a mapping of names to such configurations."""
    path = Path(path)
    if not path.is_file():
        raise ICorefImportError(f"{path}: no such file")
    if path.suffix == ".jsonnet":
        try:
            import _jsonnet
        except ImportError:
            raise ICorefImportError(
                f"{path}: reading Jsonnet needs the jsonnet package (pip install jsonnet); or give the config.json "
                "the authors' trainer wrote in the experiment's log_dir"
            ) from None
        try:
            loaded = json.loads(_jsonnet.evaluate_file(str(path)))
        except RuntimeError as error:
            raise ICorefImportError(f"{path}: {str(error).strip().splitlines()[0]}") from None
    else:
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ICorefImportError(f"{path}: not JSON ({error})") from None
    if isinstance(loaded, dict) and "top_span_ratio" in loaded:
        return {str(loaded.get("run_name", path.stem)): loaded}
    if not isinstance(loaded, dict) or not all(isinstance(value, dict) for value in loaded.values()):
        raise ICorefImportError(f"{path}: neither an experiment's configuration nor experiments by name")
    return loaded


def segment_keys(experiment: dict[str, Any], name: str) -> dict[str, Any]:
    """The segments the experiment trained on, from its jsonlines' name (``train.english.512.jsonlines``):
    N subtokens, or up to N sentences for the sentence-level partitions (1, 5, 10)."""
    match = re.search(r"\.(\d+)\.jsonlines$", str(experiment.get("train_path", "")))
    if match is None:
        raise ICorefImportError(
            f"experiment {name!r}: its train_path {experiment.get('train_path')!r} does not name a segment length "
            "(train.english.<N>.jsonlines)"
        )
    length = int(match.group(1))
    if length <= 10:  # the authors' sentence-level partitions
        return {"max_segment_len": MAX_SENTENCE_SEGMENT_LEN, "segment_sentences": length}
    return {"max_segment_len": length}


def eviction_keys(evict_fn: Any, name: str) -> dict[str, Any]:
    """util.make_evict_function's policies as the incremental model's eviction keys (measured from a mention's
    start, as the code measures)."""
    if not isinstance(evict_fn, dict) or "name" not in evict_fn:
        return {"evict_singleton_distance": None, "evict_distance": None}
    distance = int(evict_fn["distance"])
    if evict_fn["name"] == "singletons":
        return {"evict_singleton_distance": distance, "evict_distance": None}
    if evict_fn["name"] == "trunc_linscale":
        return {"evict_singleton_distance": distance, "evict_distance": 2 * distance}
    return {"evict_singleton_distance": None, "evict_distance": None}  # the code evicts nothing for other names


UPDATES_OF_METHOD = {"alpha": "learned", "mean": "mean"}


def incremental_values(
    experiment: dict[str, Any], name: str, state: dict[str, torch.Tensor], encoder: str
) -> dict[str, Any]:
    """The incremental model's configuration of an experiment of the 2020 code and its weights (the sizes)."""
    if experiment.get("use_gold_spans"):
        raise ICorefImportError(f"experiment {name!r}: use_gold_spans (gold mentions given) is not supported")
    method = experiment.get("method", "alpha")
    if method not in UPDATES_OF_METHOD:
        raise ICorefImportError(
            f"experiment {name!r}: method {method!r} (the entity update) is not supported; "
            f"supported: {sorted(UPDATES_OF_METHOD)}"
        )
    genres = list(experiment.get("genres", EXPERIMENTS[DEFAULT_EXPERIMENT]["genres"]))
    width_rows = int(state["span_scorer.span_width_embeddings"].shape[0])
    max_span_width = int(experiment.get("max_span_width", width_rows))
    if max_span_width > width_rows:
        raise ICorefImportError(
            f"experiment {name!r}: max_span_width {max_span_width}, but the checkpoint's span_width_embeddings "
            f"has {width_rows} rows"
        )
    values: dict[str, Any] = {
        "encoder": encoder,
        **segment_keys(experiment, name),
        "max_training_sentences": int(state["pair_scorer.segment_distance_emb"].shape[0]),
        "max_span_width": max_span_width,
        "special_token_spans": True,  # the original's candidate rule (its sentence map)
        "feature_size": int(state["genre_embedder.genre_emb"].shape[1]),
        "ffnn_size": int(state["span_scorer.spanFFNN.layers.0.weight"].shape[0]),
        "ffnn_depth": 1,
        "genres": genres,
        "default_genre": genres[0],  # GenreEmbedder: an unknown genre is index 0
        "top_span_ratio": float(experiment.get("top_span_ratio", 0.4)),
        "threshold": float(state[THRESHOLD].reshape(-1)[0]) if THRESHOLD in state else float(experiment["threshold"]),
        "update": UPDATES_OF_METHOD[method],
        "evict_in_training": True,
        "score": "paper",
        "pair_features": "paper",
        "loss": "latest_antecedent",
        "finetune_encoder": bool(experiment.get("finetune", False)),
        "negative_sample_rate": float(experiment.get("negative_sample_rate", 1.0)),
        "teacher_forcing_rate": float(experiment.get("teacher_forcing_rate", 0.0)),
        "mention_loss_coef": 0.0,
        "dropout_rate": float(experiment.get("dropout", 0.4)),
        "distance_between": "midpoints",
        "evict_from": "start",
        "gold_entities": "latest_mention",
        "crossing_spans": True,
        "read_last_sentence": False,
        "clip_every_segment": True,
        **eviction_keys(experiment.get("evict_fn"), name),
    }
    if "mlp.layers.0.weight" in state:
        values["alpha_hidden_size"] = int(state["mlp.layers.0.weight"].shape[0])
    return values


def renamed_weights(
    state: dict[str, torch.Tensor], own: dict[str, torch.Tensor], where: str, update: str = "learned"
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The checkpoint's weights under the incremental model's names and shapes (their FFNNs' output weights are
    1-D, squeezed from TensorFlow's, their biases 0-d); the stale encoder buffers dropped. A key neither maps,
    a parameter nothing fills or a shape that contradicts the configuration is an error naming every one."""
    renamed: dict[str, torch.Tensor] = {}
    unexpected, dropped, mismatched = [], [], []
    for key, tensor in state.items():
        if key == THRESHOLD:
            continue
        if key.startswith(ENCODER_PREFIX):
            inner = key[len(ENCODER_PREFIX) :]
            if inner in STALE_ENCODER_BUFFERS and key not in own:
                dropped.append(key)
                continue
            target = key
        else:
            target = WEIGHT_NAMES.get(key)
        if target is None or target not in own:
            unexpected.append(key)
            continue
        expected = own[target]
        if tensor.shape != expected.shape:
            if tensor.numel() != expected.numel() or tensor.dim() > 1 and expected.dim() > 1:
                mismatched.append(f"{key} {list(tensor.shape)} (the configuration gives {list(expected.shape)})")
                continue
            tensor = tensor.reshape(expected.shape)
        renamed[target] = tensor.to(expected.dtype)
    theirs = {ours: key for key, ours in WEIGHT_NAMES.items()}
    if update != "learned":  # method mean: theirs has no update network; ours keeps its initial, unused values
        for name in own:
            if name.startswith("alpha.") and name not in renamed:
                renamed[name] = own[name]
    missing = [theirs.get(name, name) for name in own if name not in renamed and not _is_buffer_recomputed(name)]
    problems = []
    if missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected)}")
    if mismatched:
        problems.append(f"shapes: {'; '.join(mismatched)}")
    if problems:
        raise ICorefImportError(f"{where}: the weights do not make the experiment's model ({' | '.join(problems)})")
    return renamed, dropped


def _is_buffer_recomputed(name: str) -> bool:
    """A state key of ours that is a constant buffer, not a weight (none today; kept for transformers' buffers)."""
    return name.startswith(ENCODER_PREFIX) and name[len(ENCODER_PREFIX) :] in STALE_ENCODER_BUFFERS


def encoder_and_tokenizer(encoder: str) -> tuple[Any, Any]:
    """ENCODER's configuration (``AutoConfig``) and tokenizer; a cased vocabulary is read cased (as the original's
    ``minimize.py`` segments its text), whatever the folder's tokenizer configuration says."""
    from transformers import AutoConfig

    config = load_pretrained(encoder, "encoder configuration", AutoConfig.from_pretrained)
    tokenizer = load_tokenizer(encoder)
    vocabulary = tokenizer.get_vocab()
    if getattr(tokenizer, "do_lower_case", False) and any(token[:1].isupper() for token in vocabulary):
        from coref_pipeline.original.tf_import import cased_tokenizer

        logger.info("%s: a cased vocabulary with a lowercasing tokenizer: read cased, as the original", encoder)
        tokenizer = cased_tokenizer(vocabulary)
    return config, tokenizer


def build_icoref_model(
    checkpoint: str | Path,
    encoder: str,
    experiment: str = DEFAULT_EXPERIMENT,
    experiments: str | Path | None = None,
) -> tuple[IncrementalCorefModel, Any, ICorefImportSummary]:
    """The incremental model of the 2020 code's ``checkpoint``, its tokenizer and what was read."""
    checkpoint = Path(checkpoint)
    known = read_experiments(experiments) if experiments is not None else EXPERIMENTS
    if experiment not in known:
        source = experiments if experiments is not None else "the 2020 code's experiments"
        raise ICorefImportError(f"experiment {experiment!r} is not in {source}; known: {', '.join(sorted(known)[:12])}")
    loaded = read_checkpoint(checkpoint)
    state = loaded["model"]
    where = str(checkpoint)
    for needed in ("span_scorer.span_width_embeddings", "genre_embedder.genre_emb", "pair_scorer.segment_distance_emb"):
        if needed not in state:
            raise ICorefImportError(
                f"{where}: the weights do not make the experiment's model (missing keys: {needed}); "
                "not a checkpoint of the 2020 incremental model"
            )
    encoder_config, tokenizer = encoder_and_tokenizer(encoder)
    try:
        config = IncrementalConfig.from_dict(incremental_values(known[experiment], experiment, state, encoder))
    except ConfigError as error:
        raise ICorefImportError(f"experiment {experiment!r}: {error}") from None
    positions = getattr(encoder_config, "max_position_embeddings", None)
    capped = None
    if positions is not None and config.max_segment_len > positions:
        # The code reads the segments its data file has; the experiment's length names that file. An encoder
        # with fewer positions reads at most its own: text is segmented for it at that length.
        capped = (config.max_segment_len, positions)
        logger.warning(
            "experiment %r names segments of %d subtokens; encoder %r takes %d: segments of at most %d",
            experiment,
            config.max_segment_len,
            encoder,
            positions,
            positions,
        )
        config = dataclasses.replace(config, max_segment_len=positions, segment_sentences=None)
    torch.manual_seed(0)
    model = IncrementalCorefModel(config, SegmentEncoder.from_config(encoder_config))
    own = model.state_dict()
    renamed, dropped = renamed_weights(state, own, where, config.update)
    model.load_state_dict(renamed, strict=True)
    model.eval()
    summary = ICorefImportSummary(
        checkpoint=checkpoint,
        experiment=experiment,
        segment_length=config.segment_length,
        imported=len(renamed),
        parameters=sum(tensor.numel() for tensor in renamed.values()),
        skipped=sorted(key for key in loaded if key != "model"),
        dropped=dropped,
        capped=capped,
    )
    return model, tokenizer, summary


def import_icoref(
    checkpoint: str | Path,
    out_dir: str | Path,
    encoder: str,
    experiment: str = DEFAULT_EXPERIMENT,
    experiments: str | Path | None = None,
) -> ICorefImportSummary:
    """Write the 2020 code's ``checkpoint`` as an incremental model directory ``out_dir`` (whole or not at all;
    nothing is written when the checkpoint is refused)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / CONFIG).is_file())):
        raise ICorefImportError(
            f"{out_dir}: exists and is not an empty directory or a model directory; choose a new one"
        )
    model, tokenizer, summary = build_icoref_model(checkpoint, encoder, experiment, experiments)
    with atomic_directory(out_dir) as temporary:
        save_model_directory(temporary, model, "incremental", model.config.to_dict(), tokenizer)
        atomic_write_json(
            {
                "checkpoint": Path(checkpoint).name,
                "code": "pitrack/incremental-coref dd329b0 (Xia, Sedoc and Van Durme 2020)",
                "experiment": experiment,
                "experiments": Path(experiments).name if experiments is not None else "built in (dd329b0)",
                "encoder": encoder,
                "imported_tensors": summary.imported,
                "skipped": summary.skipped,
                "dropped": summary.dropped,
            },
            temporary / PROVENANCE_FILE,
        )
    return summary
