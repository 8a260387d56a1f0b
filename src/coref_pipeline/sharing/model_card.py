"""A model directory's card in the Hugging Face Hub's format: YAML metadata with a ``model-index``, then Markdown.

The ``evaluate`` pipeline writes one for each model it scores (``data/08_reporting/model_card_<model>.md``) from
the same metrics it writes beside it, so the card's figures are the run's; ``coref-pipeline push`` uploads a
model directory with its card as ``README.md`` (the Hub shows that file as the model's page, and reads the
``model-index`` as the model's evaluation results). ``coref-pipeline import-tf-checkpoint`` writes a card with no
scores into the directory it writes.

What the card says of the training comes from the directory's training record (``training.json``, written by
training's ``fit``): preset, the keys changed from it, steps, precision, devices, seed, the code's version and
the run's fingerprint (a hash of the code, both configurations and the documents). The same inputs make the same
card, byte for byte: the card ``evaluate`` writes is a DVC output kept in git. The training's wall time, which
changes from run to run, stays in the record; ``coref-pipeline push`` adds it to the card it uploads
(:func:`with_training_time`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import yaml

from coref_pipeline.config_base import Config
from coref_pipeline.models.directory import HUB_ID, TRAIN_MINUTES, TRAINING_TIME
from coref_pipeline.pretrained import EMBEDDED_MINILM, EMBEDDED_MINILM_HUB_ID

LIBRARY = "coref-pipeline"
CARD = "README.md"  # where a model directory, and the Hub, keep a model's card
# Where the card names the model's Hub id; ``coref-pipeline push`` writes the repository's id in its place.
REPO_PLACEHOLDER = "OWNER/NAME"
TRAINED_HEADING = "## How it was trained"
WALL_TIME = "- wall time:"  # the line a pushed card gives the training's wall time on
# The headline figures of a metrics file (``evaluation.predictions.summary_metrics``) as the card names them.
METRIC_NAMES = {
    "conll_f1": "CoNLL F1",
    "muc_f1": "MUC F1",
    "bcub_f1": "B3 F1",
    "ceafe_f1": "CEAFe F1",
    "lea_f1": "LEA F1",
    "pronouns_linked": "pronouns linked to their occupation (%)",
}
MODELS = {
    "baseline": 'the coarse-to-fine model of Joshi et al. (2019), "BERT for Coreference Resolution"',
    "incremental": "the constant-memory incremental model of Xia, Sedoc and Van Durme (2020)",
}


@dataclass(frozen=True)
class ModelCardSettings(Config):
    """The ``model_card`` parameters: what a card says that the run does not know."""

    what: ClassVar[str] = "model_card"

    corpus: str = "corpus"  # the training corpus: a name, or its folder (the folder's name is taken)
    language: tuple[str, ...] = ("en",)
    license: str | None = None  # a Hub licence id (e.g. apache-2.0); the encoder's and the corpus's terms apply

    @property
    def corpus_name(self) -> str:
        """The corpus as a card names it: the folder's name where ``corpus`` is a path."""
        return PurePosixPath(self.corpus).name or self.corpus


def base_model(encoder: str) -> str | None:
    """The Hub id of the encoder a model was fine-tuned from, where it has one (not a local folder)."""
    if encoder == EMBEDDED_MINILM:
        return EMBEDDED_MINILM_HUB_ID
    return encoder if HUB_ID.fullmatch(encoder) and not Path(encoder).exists() else None


COREFERENCE = {"type": "coreference-resolution", "name": "Coreference resolution"}  # a model-index task
FILL_MASK = {"type": "fill-mask", "name": "Masked language modelling"}


def _result(
    metrics: Mapping[str, float], dataset: str, split: str, label: str, task: Mapping[str, str] = COREFERENCE
) -> dict[str, Any]:
    """One ``model-index`` result: ``task`` on ``dataset``'s ``split``, the numeric ``metrics`` by their names."""
    return {
        "task": dict(task),
        "dataset": {"type": dataset, "name": label, "split": split},
        "metrics": [
            {"type": key, "value": value, "name": METRIC_NAMES.get(key, key)}
            for key, value in metrics.items()
            if isinstance(value, int | float)
        ],
    }


def _card(header: Mapping[str, Any], body: Sequence[str]) -> str:
    """A card: the YAML metadata between ``---`` lines, then the Markdown ``body`` lines."""
    front = yaml.safe_dump(dict(header), sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{front}---\n\n" + "\n".join(body) + "\n"


def _scores_table(rows: Sequence[tuple[str, Mapping[str, float]]]) -> list[str]:
    keys = [key for key in METRIC_NAMES if any(key in metrics for _, metrics in rows)]
    lines = ["| data | " + " | ".join(METRIC_NAMES[key] for key in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for label, metrics in rows:
        cells = [f"{metrics[key]:.2f}" if key in metrics else "" for key in keys]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def model_card(
    model_type: str,
    model_config: Mapping[str, Any],
    training: Mapping[str, Any] | None,
    scores: Mapping[str, Mapping[str, float]] | None = None,
    test_sets: Mapping[str, Mapping[str, float]] | None = None,
    settings: ModelCardSettings | None = None,
    remove_singletons: bool | None = None,
    title: str | None = None,
    origin: str | None = None,
    probes: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The card of a ``model_type`` model (named ``CORPUS-MODEL_TYPE``; ``push`` replaces ``REPO_PLACEHOLDER`` in
    it with the repository's id): ``scores`` by split of the training corpus (``{"dev": metrics, "test": ...}``,
    metrics files' dicts in percent), ``test_sets`` the named sets' metrics by set; ``training`` the directory's
    training record (None: not trained here, and ``origin`` says where it comes from); ``remove_singletons``: how
    the corpus's splits were scored; ``title``: the card's name for the model (default ``CORPUS-MODEL_TYPE``);
    ``probes``: its counts on each pronoun probe file (``studies.probes.ask_probes``), a section of their own."""
    settings = settings or ModelCardSettings()
    corpus = settings.corpus_name
    name = title or f"{corpus}-{model_type}"
    scores, test_sets = dict(scores or {}), dict(test_sets or {})
    encoder = str(model_config.get("encoder", ""))
    header: dict[str, Any] = {"library_name": LIBRARY, "language": list(settings.language)}
    if settings.license:
        header["license"] = settings.license
    header["tags"] = ["coreference-resolution", LIBRARY, model_type]
    header["datasets"] = [corpus]  # the training corpus (a Hub dataset id where it is one)
    hub_encoder = base_model(encoder)
    if hub_encoder:
        header["base_model"] = hub_encoder
    results = [_result(metrics, corpus, split, f"{corpus} ({split})") for split, metrics in scores.items()]
    results += [_result(metrics, name_, "test", name_) for name_, metrics in test_sets.items()]
    if results:
        header["model-index"] = [{"name": name, "results": results}]

    body = [f"# {name}", ""]
    article = "An" if model_type[:1] in "aeiou" else "A"
    version = f" {training['coref_pipeline']}" if training and training.get("coref_pipeline") else ""
    body.append(
        f"{article} {model_type} coreference model: {MODELS.get(model_type, model_type)}, over the encoder "
        f"`{encoder}`{f' ({hub_encoder})' if hub_encoder and hub_encoder != encoder else ''}, written by "
        f"{LIBRARY}{version}."
    )
    body += ["", "## Scores", ""]
    if scores or test_sets:
        rows = [(f"{corpus} {split}", metrics) for split, metrics in scores.items()]
        rows += [(f"{set_name} (named test set)", metrics) for set_name, metrics in test_sets.items()]
        body += _scores_table(rows)
        singletons = {True: "removed from key and response", False: "kept"}.get(remove_singletons)
        body += [
            "",
            "Percent, computed as the official CoNLL-2012 scorer computes them, as the `evaluate` pipeline wrote "
            f"them into `data/08_reporting`{f'; singletons {singletons} on the corpus splits' if singletons else ''}.",
        ]
    else:
        body.append(
            "Not scored by this project yet: `coref-pipeline predict` it on a segmented test set and "
            "`coref-pipeline score KEY.conll RESPONSE.conll`, or name it in `evaluate.models`."
        )
    if probes:
        body += ["", "## Pronoun probes", ""]
        body += _probe_lines(probes)
    body += ["", TRAINED_HEADING, ""]
    if training:
        body += _training_lines(training)
    else:
        body.append(origin or "Not trained by this project (built or imported): no training record in its directory.")
    body += ["", "## Use", "", "```python", "from coref_pipeline import CorefModel", ""]
    body += [
        f'model = CorefModel.load("{REPO_PLACEHOLDER}")  # a Hub id, or the model\'s directory',
        'result = model.predict("Ada met Charles in 1833. He showed her his engine.")',
        "print(result.mention_strings)  # also result.clusters (word spans), result.char_clusters",
        "```",
        "",
        f"In spaCy (the `spacy` extra of {LIBRARY}): "
        f'`nlp.add_pipe("coref_pipeline", config={{"model": "{REPO_PLACEHOLDER}"}})` writes the clusters to '
        f'`doc.spans["coref_clusters_1"]`, ...; `coref-pipeline serve --model {REPO_PLACEHOLDER}` serves it over HTTP.',
    ]
    body += ["", "## Limits", ""]
    body += _limits(model_type, model_config, corpus)
    return _card(header, body)


def _probe_lines(probes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [
        "Short English texts, each with an unambiguous pronoun, its antecedent and another entity (a second person, "
        "a place, an object) that must stay out of their cluster (`evaluate.probes`). A text is right when the pair "
        "shares a cluster that holds nothing else: no other entity's mention and no span that is no mention.",
        "",
        "| probe file | right | pairs linked | wrong merges | non-mentions |",
        "|---|---|---|---|---|",
    ]
    for name, counts in probes.items():
        total = counts["probes"]
        lines.append(
            f"| {name} | {counts['right']} of {total} ({counts['right_percent']:.1f}%) | {counts['linked']} | "
            f"{counts['wrong_merges']} | {counts['non_mentions']} |"
        )
    return lines


def _training_lines(training: Mapping[str, Any]) -> list[str]:
    overrides = training.get("overrides") or {}
    changed = ", ".join(f"`{key}: {value}`" for key, value in overrides.items()) or "none"
    devices = training.get("devices", 1)
    lines = [
        f"- preset: `{training.get('preset')}`; keys changed from it: {changed}",
        f"- encoder: `{training.get('encoder')}`",
        f"- {training.get('steps')} steps (one document each) on {devices} {training.get('device')} "
        f"device{'s' if devices != 1 else ''}, precision "
        f"`{training.get('precision')}`, seed {training.get('seed')}",
        f"- the best dev CoNLL F1 during training, {training.get('best_dev_conll_f1', float('nan')):.2f}, "
        f"at step {training.get('best_step')}: this model"
        + (" (the model it started from: training did not improve on it)" if training.get("best_step") == 0 else ""),
    ]
    if "train_documents" in training:
        lines.append(f"- {training['train_documents']} training and {training.get('dev_documents')} dev documents")
    lines.append(
        f"- {LIBRARY} {training.get('coref_pipeline')}, torch {training.get('torch')}; run fingerprint "
        f"`{training.get('run_fingerprint')}` (a hash of the code, both configurations and the documents: the "
        "same fingerprint, the same run)"
    )
    return lines


def with_training_time(card: str, training: Mapping[str, Any] | None) -> str:
    """``card`` with the training's wall time (the record's ``train_minutes``) as the last line of its "How it
    was trained" list: the card a push uploads. Unchanged without a record, a time or that section, or where the
    card already gives it."""
    minutes = (training or {}).get(TRAIN_MINUTES)
    lines = card.split("\n")
    if minutes is None or TRAINED_HEADING not in lines or any(line.startswith(WALL_TIME) for line in lines):
        return card
    end = lines.index(TRAINED_HEADING) + 1
    while end < len(lines) and not lines[end].startswith("#"):
        end += 1
    while lines[end - 1] == "":
        end -= 1
    return "\n".join(
        [*lines[:end], f"{WALL_TIME} {minutes} minutes of training (from `{TRAINING_TIME}`)", *lines[end:]]
    )


def _limits(model_type: str, model_config: Mapping[str, Any], corpus: str) -> list[str]:
    lines = [
        f"- Trained on {corpus} only: expect lower scores on other genres and domains, and read its "
        "scores on the named test sets above where there are some.",
        f"- It reads segments of {model_config.get('max_segment_len')} subtokens of its own tokenizer; spans of "
        f"at most {model_config.get('max_span_width')} subtokens are mentions.",
    ]
    if model_type == "baseline":
        lines.append(
            f"- Documents longer than {model_config.get('max_inference_subtokens')} subtokens are refused "
            "(memory grows with the square of the spans kept); the incremental model reads any length."
        )
    else:
        lines.append(
            "- Any length of document in bounded memory: clusters are kept as the text goes, segment by segment."
        )
    lines.append(
        "- Coreference models repeat the biases of their training data (e.g. gendered pronouns linked to "
        "stereotypical occupations: WinoBias measures it, `evaluate.test_sets` with `kind: winobias`)."
    )
    return lines


def encoder_card(pretrain: Mapping[str, Any], metrics: Mapping[str, float], corpus: str) -> str:
    """The card of an encoder directory the ``pretrain`` pipeline writes: SpanBERT's objective continued from
    ``pretrain["encoder"]`` on ``corpus``'s text; ``metrics`` the held-out figures it was kept at (what the
    pipeline returns), with ``steps`` and ``best_step``. It holds nothing the clock decides (the wall time is in
    ``training_time.json`` beside it), so the same run writes the same card."""
    encoder = str(pretrain.get("encoder", ""))
    hub_encoder = base_model(encoder)
    header: dict[str, Any] = {
        "library_name": "transformers",
        "tags": [LIBRARY, "spanbert", "feature-extraction"],
        "datasets": [corpus],
    }
    if hub_encoder:
        header["base_model"] = hub_encoder
    figures = {key: value for key, value in metrics.items() if key not in ("steps", "best_step")}
    held_out = _result(figures, corpus, "train", f"{corpus} (held-out train documents)", FILL_MASK)
    header["model-index"] = [{"name": f"{corpus}-pretrained-encoder", "results": [held_out]}]
    objective = "span masking" if pretrain.get("masking") == "span" else f"{pretrain.get('masking')} masking"
    objective += " and the span boundary objective" if pretrain.get("sbo") else " (no span boundary objective)"
    body = [
        f"# {corpus}-pretrained-encoder",
        "",
        f"`{encoder}`{f' ({hub_encoder})' if hub_encoder and hub_encoder != encoder else ''} continued with "
        f"SpanBERT's objective ({objective}; Joshi et al. 2020) on the text of {corpus} by {LIBRARY}'s `pretrain` "
        "pipeline: a BERT encoder (`AutoModel.from_pretrained` reads it) and its tokenizer; the masked-LM and SBO "
        "heads are kept apart (`pretraining_heads.safetensors`), the settings in `pretraining.json`.",
        "",
        "## Held-out figures",
        "",
        "| " + " | ".join(figures) + " |",
        "|---" * len(figures) + "|",
        "| " + " | ".join(f"{value:.4f}" for value in figures.values()) + " |",
        "",
        f"Kept at step {metrics.get('best_step')} of {metrics.get('steps')}, by the held-out masked-token accuracy "
        f"(percent); the training's wall time is in `{TRAINING_TIME}`.",
        "",
        "## Use",
        "",
        "Fine-tune a coreference model on it: `coref_train.encoder_from` names this directory. It is an encoder, "
        "not a coreference model: `CorefModel.load` does not read it.",
    ]
    return _card(header, body)
