"""Model cards: the Hub's format (YAML metadata, a model-index of the metrics given), what the body says."""

from __future__ import annotations

import pytest
import yaml

from coref_pipeline.models.config import BaselineConfig, ConfigError, IncrementalConfig
from coref_pipeline.sharing.model_card import (
    REPO_PLACEHOLDER,
    TRAINED_HEADING,
    ModelCardSettings,
    base_model,
    model_card,
    with_training_time,
)

DEV = {"conll_f1": 66.0718, "muc_f1": 80.0, "bcub_f1": 66.4225, "ceafe_f1": 51.7929, "lea_f1": 64.1104}
TEST = {"conll_f1": 49.1367, "muc_f1": 62.8099, "bcub_f1": 44.1899, "ceafe_f1": 40.4103, "lea_f1": 38.7255}
RECORD = {
    "model_type": "baseline",
    "preset": "cpu_minilm",
    "overrides": {"max_steps": 3, "bert_learning_rate": 1e-05},
    "encoder": "embedded:minilm",
    "steps": 3,
    "best_step": 3,
    "best_dev_conll_f1": 66.0718,
    "train_minutes": 0.21,
    "precision": "bf16-mixed",
    "device": "cpu",
    "devices": 1,
    "seed": 13,
    "train_documents": 3,
    "dev_documents": 2,
    "coref_pipeline": "0.2.0",
    "torch": "2.13.0+cpu",
    "run_fingerprint": "f" * 64,
}


def split_card(card: str) -> tuple[dict, str]:
    assert card.startswith("---\n")
    front, body = card[4:].split("\n---\n", 1)
    return yaml.safe_load(front), body


def metrics_of(result: dict) -> dict[str, float]:
    return {metric["type"]: metric["value"] for metric in result["metrics"]}


def test_the_model_index_holds_the_metrics_given_exactly():
    winobias = {"conll_f1": 59.03, "pronouns_linked": 71.5}
    card = model_card(
        "baseline",
        BaselineConfig().to_dict(),
        RECORD,
        {"dev": DEV, "test": TEST},
        {"winobias.type1_pro": winobias},
        ModelCardSettings(corpus="data/01_raw/litbank", license="apache-2.0"),
        remove_singletons=True,
    )
    header, body = split_card(card)
    assert header["library_name"] == "coref-pipeline" and header["license"] == "apache-2.0"
    assert header["language"] == ["en"] and "coreference-resolution" in header["tags"]
    assert header["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert header["datasets"] == ["litbank"]  # the training corpus, by its folder's name
    (index,) = header["model-index"]
    assert index["name"] == "litbank-baseline"
    dev, test, wino = index["results"]
    assert (dev["dataset"]["type"], dev["dataset"]["split"], test["dataset"]["split"]) == ("litbank", "dev", "test")
    assert metrics_of(dev) == DEV and metrics_of(test) == TEST and metrics_of(wino) == winobias
    assert dev["task"]["type"] == "coreference-resolution"
    # The body: the same figures rounded, how it was trained, how to load it, its limits.
    assert "| litbank test | 49.14 | 62.81 | 44.19 | 40.41 | 38.73 |" in body
    assert "| winobias.type1_pro (named test set) | 59.03 |" in body
    assert "singletons removed from key and response" in body
    assert "preset: `cpu_minilm`; keys changed from it: `max_steps: 3`, `bert_learning_rate: 1e-05`" in body
    assert "3 steps (one document each) on 1 cpu device, precision `bf16-mixed`" in body
    assert f"`{'f' * 64}`" in body and "coref-pipeline 0.2.0, torch 2.13.0+cpu" in body
    assert f'CorefModel.load("{REPO_PLACEHOLDER}")' in body
    assert f"Documents longer than {BaselineConfig().max_inference_subtokens} subtokens are refused" in body


def test_the_probes_have_a_section_of_their_own_only_where_given():
    counts = {"probes": 60, "right": 44, "right_percent": 73.33, "linked": 48, "wrong_merges": 10, "non_mentions": 1}
    config = BaselineConfig().to_dict()
    _, body = split_card(model_card("baseline", config, RECORD, {"test": TEST}, probes={"pronoun_probes": counts}))
    assert "## Pronoun probes" in body
    assert "| pronoun_probes | 44 of 60 (73.3%) | 48 | 10 | 1 |" in body
    assert body.index("## Pronoun probes") < body.index("## How it was trained")
    _, without = split_card(model_card("baseline", config, RECORD, {"test": TEST}))
    assert "Pronoun probes" not in without


def test_a_model_without_scores_or_record_says_so():
    header, body = split_card(
        model_card("incremental", IncrementalConfig().to_dict(), None, origin="Imported from elsewhere.")
    )
    assert "model-index" not in header and "license" not in header
    assert "Not scored by this project yet" in body and "Imported from elsewhere." in body
    assert "Any length of document in bounded memory" in body
    assert header["tags"] == ["coreference-resolution", "coref-pipeline", "incremental"]


@pytest.mark.parametrize(
    ("encoder", "hub_id"),
    [
        ("embedded:minilm", "sentence-transformers/all-MiniLM-L6-v2"),
        ("SpanBERT/spanbert-large-cased", "SpanBERT/spanbert-large-cased"),
        ("data/06_models/pretrained_encoder", None),
        ("/models/encoder", None),
        ("./encoder", None),
    ],
)
def test_the_base_model_is_a_hub_id_or_nothing(encoder, hub_id):
    assert base_model(encoder) == hub_id


def test_unknown_card_settings_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match="licence"):
        ModelCardSettings.from_dict({"licence": "mit"})


def test_the_hubs_own_card_parser_reads_the_results():
    """``huggingface_hub.ModelCard`` (what the Hub's library reads a README.md with) finds every figure."""
    from huggingface_hub import ModelCard

    card = ModelCard(
        model_card("baseline", BaselineConfig().to_dict(), RECORD, {"dev": DEV, "test": TEST}, {}, ModelCardSettings())
    )
    assert (card.data.model_name, card.data.library_name) == ("corpus-baseline", "coref-pipeline")
    read = {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert read == {**{("dev", k): v for k, v in DEV.items()}, **{("test", k): v for k, v in TEST.items()}}
    assert {r.task_type for r in card.data.eval_results} == {"coreference-resolution"}


def test_the_same_inputs_make_the_same_card_whatever_the_training_took():
    """The card ``evaluate`` writes is kept in git: two runs that differ only in their wall time give the same
    bytes; the time is in the record, and in the card a push uploads."""
    cards = [
        model_card("baseline", BaselineConfig().to_dict(), {**RECORD, "train_minutes": minutes}, {"test": TEST})
        for minutes in (0.21, 7.5)
    ]
    assert cards[0] == cards[1] and "0.21" not in cards[0] and "minutes" not in cards[0]
    pushed = with_training_time(cards[0], RECORD)
    added = [line for line in pushed.splitlines() if line not in cards[0].splitlines()]
    assert added == ["- wall time: 0.21 minutes of training (from `training_time.json`)"]
    # The line ends the training section's list, before the next heading.
    lines = pushed.splitlines()
    section = lines[lines.index(TRAINED_HEADING) : lines.index("## Use")]
    assert section[-2] == added[0] and section[-1] == ""
    assert with_training_time(pushed, RECORD) == pushed  # given once
    assert with_training_time(cards[0], None) == cards[0]  # no record: nothing to add
    assert with_training_time(cards[0], {"steps": 3}) == cards[0]  # a record without a time
    assert with_training_time("---\na: 1\n---\n\n# A card of the user's\n", RECORD).endswith("user's\n")
