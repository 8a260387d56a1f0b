"""Importing the original's TensorFlow checkpoints: scores equal to the original's equations, the mapping, the
errors."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil

import numpy as np
import pytest
import torch
from pyhocon import ConfigFactory

from coref_pipeline.evaluation.predictions import word_clusters
from coref_pipeline.formats.conll import SCORER_READING, parse_conll_lines
from coref_pipeline.formats.text import split_text
from coref_pipeline.models.baseline import predicted_clusters
from coref_pipeline.original import tf_import
from coref_pipeline.original.tf_checkpoint import TensorBundle
from coref_pipeline.original.tf_import import (
    TFImportError,
    VariableMapping,
    build_imported_model,
    import_tf_checkpoint,
    is_optimiser_state,
    original_config,
    variable_mappings,
)
from coref_pipeline.serving.coref_model import CorefModel
from tests.original.original_equations import original_forward
from tests.original.tf_bundle import write_bundle
from tests.released import BERT_ONLY_CHECKPOINT, TINY_CHECKPOINT

TOLERANCE = 1e-5
TEXT = (
    "John met Mary in Paris . He gave her the book .\n\nShe read the books in the train . Ada and Charles saw the "
    "city . They met John . He said the engine of the train read her book . Mary gave it to Charles , and he read it ."
)


def checkpoint_arrays(directory=TINY_CHECKPOINT) -> dict[str, np.ndarray]:
    """The model's variables as stored (TF names and layouts), the optimiser's state left out."""
    bundle = TensorBundle.open(directory)
    model_names = {name for name in bundle if name.rpartition("/")[2] not in tf_import.OPTIMISER_SLOTS}
    return {name: bundle.read(name) for name in bundle if not is_optimiser_state(name, model_names)}


def experiment() -> dict:
    """The fixture's experiment, read with pyhocon directly (not through the importer)."""
    text = (TINY_CHECKPOINT / "experiments.conf").read_text()
    return ConfigFactory.parse_string("data_dir = /unused\n" + text)["tiny_coref"]


def reference_document(model: CorefModel) -> dict:
    """Five segments of at most 16 subtokens, two speakers, the broadcast-news genre (genre index 1)."""
    split = split_text(TEXT)
    speakers = ["Ann" if index % 2 == 0 else "Bob" for index in range(len(split.sentences))]
    return model.jsonlines_document(split, speakers, "bn", "doc")


@functools.cache
def original_scores(document: str):
    """The original's equations on a document (JSON), over the fixture checkpoint's raw arrays."""
    vocabulary = {token: index for index, token in enumerate((TINY_CHECKPOINT / "vocab.txt").read_text().splitlines())}
    bert_config = json.loads((TINY_CHECKPOINT / "bert_config.json").read_text())
    return original_forward(json.loads(document), vocabulary, checkpoint_arrays(), bert_config, experiment())


def differences(model: CorefModel) -> dict[str, float]:
    """The largest absolute differences between the model's scores of the reference document and the original's
    equations over the checkpoint's raw arrays: every candidate's mention score, every kept span's antecedent
    scores, BERT's pooled output (infinite when the kept spans or antecedents differ)."""
    document = reference_document(model)
    original = original_scores(json.dumps(document))
    tensors = model.tensorize(document)
    with torch.no_grad():
        output = model.model.eval()(tensors, with_loss=False)
        pooled = model.model.encoder.model(input_ids=tensors.input_ids, attention_mask=tensors.attention_mask)
    result = {"mention": math.inf, "antecedent": math.inf}
    candidates = {
        (int(s), int(e)): float(score)
        for s, e, score in zip(
            output.candidate_starts, output.candidate_ends, output.candidate_mention_scores, strict=True
        )
    }
    if candidates.keys() == original.candidate_scores.keys():
        result["mention"] = max(abs(candidates[span] - original.candidate_scores[span]) for span in candidates)
    kept = list(zip(output.top_span_starts.tolist(), output.top_span_ends.tolist(), strict=True))
    antecedents = [
        {
            int(output.top_antecedents[i, j]): float(output.top_antecedent_scores[i, j + 1])
            for j in range(output.top_antecedents.shape[1])
            if output.top_antecedent_mask[i, j]
        }
        for i in range(len(kept))
    ]
    if kept == original.top_spans and [a.keys() for a in antecedents] == [a.keys() for a in original.antecedent_scores]:
        result["antecedent"] = max(
            abs(scores[j] - expected[j])
            for scores, expected in zip(antecedents, original.antecedent_scores, strict=True)
            for j in scores
        )
    result["pooled"] = float(np.abs(pooled.pooler_output.numpy() - original.pooled).max())
    result["pairs"] = sum(len(a) for a in antecedents)
    return result


def test_the_imported_model_scores_a_document_as_the_original_equations(imported_tiny_coref):
    model = CorefModel.load(imported_tiny_coref)
    found = differences(model)
    assert found["pairs"] >= 50  # enough antecedent pairs for the comparison to mean something
    assert found["mention"] < TOLERANCE and found["antecedent"] < TOLERANCE and found["pooled"] < TOLERANCE, found


def transposed_names() -> list[str]:
    config = original_config(TINY_CHECKPOINT / "experiments.conf", "tiny_coref", "tokenizer")
    return [mapping.tf_name for mapping in variable_mappings(config, 2) if mapping.transpose]


@pytest.mark.parametrize("name", transposed_names())
def test_dropping_any_transposition_fails_the_comparison(name, monkeypatch):
    """Each kernel left in TF's [in, out] layout is caught: by its shape, or (square ones) by the scores."""
    original = tf_import.variable_mappings

    def without_one(config, num_layers):
        return [
            VariableMapping(m.tf_name, m.torch_name, False) if m.tf_name == name else m
            for m in original(config, num_layers)
        ]

    monkeypatch.setattr(tf_import, "variable_mappings", without_one)
    try:
        model, tokenizer, _ = build_imported_model(TINY_CHECKPOINT)
    except TFImportError as error:
        assert f"variable {name!r} has shape" in str(error)
        return
    found = differences(CorefModel("baseline", model, tokenizer))
    assert max(found["mention"], found["antecedent"], found["pooled"]) > 1e-3, found


def test_exactly_the_kernels_and_ffnn_weights_transpose():
    config = original_config(TINY_CHECKPOINT / "experiments.conf", "tiny_coref", "tokenizer")
    mappings = variable_mappings(config, 2)
    for mapping in mappings:
        leaf = mapping.tf_name.rpartition("/")[2]
        kernel = leaf in ("kernel", "output_weights") or leaf.startswith("hidden_weights_")
        assert mapping.transpose == kernel, mapping
        assert mapping.torch_name.endswith(".weight") or not mapping.transpose
    assert len({m.tf_name for m in mappings}) == len({m.torch_name for m in mappings}) == len(mappings)
    # The coarse distance prior is the original's root-scope embedding and projection.
    pairs = {(m.tf_name, m.torch_name) for m in mappings}
    assert ("antecedent_distance_emb", "antecedent_distance_prior.weight") in pairs
    assert ("output_weights", "distance_prior_projection.weight") in pairs
    assert ("coref_layer/antecedent_distance_emb", "pair_scorer.antecedent_distance_emb.weight") in pairs
    assert ("coref_layer/f/output_weights", "gate.weight") in pairs


def test_every_parameter_comes_from_the_checkpoint_and_the_optimiser_state_is_skipped(imported_tiny_coref):
    model, _, summary = build_imported_model(TINY_CHECKPOINT)
    arrays = checkpoint_arrays()
    assert summary.initialised == [] and summary.imported == len(arrays) == 66
    assert summary.parameters == sum(a.size for a in arrays.values())
    # what the checkpoint holds beyond the model: both optimisers' slots, Adam's accumulators, the step
    bundle = TensorBundle.open(TINY_CHECKPOINT)
    assert sorted(summary.skipped) == sorted(set(bundle) - set(arrays))
    assert {"global_step", "beta1_power", "beta2_power"} <= set(summary.skipped)
    assert sum(name.endswith(("/adam_m", "/adam_v")) for name in summary.skipped) == 2 * sum(
        name.startswith("bert/") for name in arrays
    )
    assert sum(name.endswith(("/Adam", "/Adam_1")) for name in summary.skipped) == 2 * sum(
        not name.startswith("bert/") for name in arrays
    )
    assert summary.skipped_bytes == sum(bundle.entries[name].size for name in summary.skipped)
    text = summary.describe()
    assert "imported 66 variables" in text and f"skipped {len(summary.skipped)} optimiser variables" in text
    for kind in ("adam_m", "adam_v", "Adam", "Adam_1", "beta1_power", "beta2_power", "global_step"):
        assert kind in text
    # the saved directory holds exactly those weights
    saved = CorefModel.load(imported_tiny_coref).model.state_dict()
    assert all(torch.equal(saved[name], tensor) for name, tensor in model.state_dict().items())
    provenance = json.loads((imported_tiny_coref / tf_import.PROVENANCE_FILE).read_text())
    assert provenance["experiment"] == "tiny_coref" and provenance["skipped_optimiser_variables"] == len(
        summary.skipped
    )


def test_the_configuration_is_the_experiments_and_the_tokenizer_is_the_cased_vocabulary(imported_tiny_coref):
    model = CorefModel.load(imported_tiny_coref)
    config = model.config
    conf = experiment()
    for key in ("max_segment_len", "max_training_sentences", "max_span_width", "feature_size", "ffnn_size",
                "ffnn_depth", "max_top_antecedents", "coref_depth", "top_span_ratio", "dropout_rate"):  # fmt: skip
        assert getattr(config, key) == conf[key], key
    assert list(config.genres) == list(conf["genres"]) and config.default_genre == "bc"  # the original's genre 0
    assert config.encoder == "tf-checkpoint:tiny_coref" and config.tokenizer == str(imported_tiny_coref / "tokenizer")
    # the original's candidate rule, recorded in the directory so that the model predicts the same wherever it loads
    assert json.loads((imported_tiny_coref / "coref_config.json").read_text())["model"]["special_token_spans"] is True
    assert (
        model.model.encoder.model.config.hidden_act == "gelu"
        and model.model.encoder.model.config.layer_norm_eps == 1e-12
    )
    assert model.tokenizer.tokenize("John gave Mary the books") == ["John", "gave", "Mary", "the", "book", "##s"]
    vocabulary = (TINY_CHECKPOINT / "vocab.txt").read_text().splitlines()
    assert model.tokenizer.convert_tokens_to_ids(vocabulary) == list(range(len(vocabulary)))


def test_a_released_experiment_names_its_encoder_as_the_presets_do(tmp_path):
    """Imported under the name of a released model, the encoder and tokenizer are the project's preset's."""
    directory = tmp_path / "spanbert_base"
    shutil.copytree(TINY_CHECKPOINT, directory)
    conf = directory / "experiments.conf"
    conf.write_text(conf.read_text().replace("tiny_coref = ", "spanbert_base = "))
    model, _, summary = build_imported_model(directory)
    assert summary.experiment == "spanbert_base"
    assert (model.config.encoder, model.config.tokenizer) == ("SpanBERT/spanbert-base-cased", "bert-base-cased")


def test_the_experiment_is_chosen_by_name(tmp_path):
    directory = tmp_path / "downloaded"
    shutil.copytree(TINY_CHECKPOINT, directory)
    conf = directory / "experiments.conf"
    conf.write_text(conf.read_text() + "\nother = ${best}{\n  ffnn_size = 3\n}\n")
    with pytest.raises(TFImportError, match=r"None is named 'downloaded'; choose one of \['other', 'tiny_coref'\]"):
        build_imported_model(directory)
    assert build_imported_model(directory, "tiny_coref")[2].experiment == "tiny_coref"
    with pytest.raises(TFImportError, match=r"experiments.conf has no experiment 'nope'"):
        build_imported_model(directory, "nope")
    # another experiment's sizes contradict the checkpoint: the first variable it shapes is named
    with pytest.raises(TFImportError, match=r"variable 'mention_scores/hidden_weights_0' has shape \[29, 9\]; "
                       r"experiment 'other' .* gives it \[29, 3\]"):  # fmt: skip
        build_imported_model(directory, "other")


def rewritten(tmp_path, arrays: dict[str, np.ndarray]):
    """The fixture's configuration files beside a checkpoint of ``arrays`` (written without TensorFlow)."""
    directory = tmp_path / "tiny_coref"
    directory.mkdir()
    for name in ("experiments.conf", "bert_config.json", "vocab.txt"):
        shutil.copy(TINY_CHECKPOINT / name, directory / name)
    write_bundle(directory / "model.max.ckpt", arrays)
    return directory


def test_a_rewritten_checkpoint_imports_to_the_same_weights(tmp_path, imported_tiny_coref):
    """The test writer's bundles are read as TensorFlow's (so the error cases below differ in one thing only)."""
    model, _, _ = build_imported_model(rewritten(tmp_path, checkpoint_arrays()))
    expected = CorefModel.load(imported_tiny_coref).model.state_dict()
    assert all(torch.equal(expected[name], tensor) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda a: a.update({"mention_scores/extra_weights": np.zeros((2, 3), np.float32)}),
            r"variable 'mention_scores/extra_weights' \[2, 3\] is neither a variable of experiment 'tiny_coref' nor "
            "optimiser state",
        ),
        (
            lambda a: a.update({"coref_layer/f/output_weights/Momentum": np.zeros((58, 29), np.float32)}),
            r"variable 'coref_layer/f/output_weights/Momentum'",
        ),
        (lambda a: a.pop("coref_layer/f/output_bias"), r"lacks variable 'coref_layer/f/output_bias'"),
        (
            lambda a: a.update({"genre_embeddings": np.zeros((7, 4), np.float32)}),
            r"variable 'genre_embeddings' has shape \[7, 4\]; experiment 'tiny_coref' .* gives it \[7, 5\]",
        ),
        (
            lambda a: a.update({"src_projection/output_bias": np.zeros(29, np.float64)}),
            r"variable 'src_projection/output_bias' has TensorFlow dtype 2, not float32",
        ),
    ],
)
def test_a_checkpoint_the_configuration_does_not_explain_is_refused(tmp_path, change, message):
    arrays = checkpoint_arrays()
    change(arrays)
    with pytest.raises(TFImportError, match=message):
        build_imported_model(rewritten(tmp_path, arrays))


def test_other_checkpoints_and_missing_files_are_named(tmp_path):
    with pytest.raises(TFImportError, match="a BERT checkpoint without the coreference model's variables"):
        build_imported_model(BERT_ONLY_CHECKPOINT)
    with pytest.raises(TFImportError, match="no TensorFlow checkpoint in this directory"):
        build_imported_model(tmp_path)
    no_bert = {name: a for name, a in checkpoint_arrays().items() if not name.startswith("bert/")}
    with pytest.raises(TFImportError, match=r"no BERT encoder variables"):
        build_imported_model(rewritten(tmp_path, no_bert))
    copy = tmp_path / "copy" / "tiny_coref"
    shutil.copytree(TINY_CHECKPOINT, copy)
    (copy / "experiments.conf").unlink()
    with pytest.raises(TFImportError, match=r"tiny_coref/experiments.conf: missing"):
        build_imported_model(copy)
    (copy / "experiments.conf").write_text("best { ffnn_size = ")
    with pytest.raises(TFImportError, match=r"tiny_coref/experiments.conf: not a HOCON experiments file"):
        build_imported_model(copy)
    (copy / "experiments.conf").write_text((TINY_CHECKPOINT / "experiments.conf").read_text())
    (copy / "bert_config.json").write_text(json.dumps({**json.loads((TINY_CHECKPOINT / "bert_config.json").read_text()),
                                                       "hidden_sise": 8}))  # fmt: skip
    with pytest.raises(TFImportError, match=r"bert_config.json: unknown key\(s\) \['hidden_sise'\]"):
        build_imported_model(copy)


def test_nothing_is_written_on_an_error_and_an_occupied_directory_is_refused(tmp_path, imported_tiny_coref):
    out = tmp_path / "out"
    with pytest.raises(TFImportError):
        import_tf_checkpoint(BERT_ONLY_CHECKPOINT, out)
    assert not out.exists() and not list(tmp_path.iterdir())
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    with pytest.raises(TFImportError, match="exists and is not an empty directory or a model directory"):
        import_tf_checkpoint(TINY_CHECKPOINT, occupied)
    assert (occupied / "notes.txt").read_text() == "mine"
    replaced = tmp_path / "model"
    shutil.copytree(imported_tiny_coref, replaced)
    import_tf_checkpoint(TINY_CHECKPOINT, replaced)  # a model directory is replaced whole
    assert (replaced / "model.safetensors").is_file()


# The released models' experiments.conf entries as the original repository writes them: `best`, and each
# released model's own sizes (segment length, crop) on top.
RELEASED_CONF = """
best {
  data_dir = /data
  model_type = independent
  max_top_antecedents = 50
  max_training_sentences = 5
  top_span_ratio = 0.4
  max_num_speakers = 20
  max_segment_len = 256
  dropout_rate = 0.3
  ffnn_size = 1000
  ffnn_depth = 1
  feature_size = 20
  max_span_width = 30
  use_metadata = true
  use_features = true
  use_segment_distance = true
  model_heads = true
  coref_depth = 2
  coarse_to_fine = true
  fine_grained = true
  use_prior = true
  genres = ["bc", "bn", "mz", "nw", "pt", "tc", "wb"]
  log_root = ${data_dir}
}
bert_base = ${best}{ max_segment_len = 128, ffnn_size = 3000, max_training_sentences = 11 }
bert_large = ${best}{ max_segment_len = 384, ffnn_size = 3000, max_training_sentences = 3 }
spanbert_base = ${best}{ max_segment_len = 384, ffnn_size = 3000, max_training_sentences = 3 }
spanbert_large = ${best}{ max_segment_len = 512, ffnn_size = 3000, max_training_sentences = 3 }
"""


@pytest.mark.parametrize("name", ["bert_base", "bert_large", "spanbert_base", "spanbert_large"])
def test_a_released_model_is_its_presets_architecture_but_for_the_default_genre(tmp_path, name):
    """So that `coref_train.init_from` fine-tunes it under the project's preset of the same name (README)."""
    import yaml

    from coref_pipeline.models.config import SHARED_ARCHITECTURE_KEYS, baseline_settings
    from tests.paths import PROJECT_ROOT

    conf = tmp_path / "experiments.conf"
    conf.write_text(RELEASED_CONF)
    imported = original_config(conf, name, "unused").to_dict()
    params = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_coref_train.yml").read_text())["coref_train"]
    preset = baseline_settings(params["presets"], name)[0].to_dict()
    differing = {key for key in (*SHARED_ARCHITECTURE_KEYS, "max_segment_len") if imported[key] != preset[key]}
    assert differing == {"default_genre"} and (imported["default_genre"], preset["default_genre"]) == ("bc", "nw")


# The original code itself (independent.py's graph, its ExtractSpans kernel, bert/modeling.py, minimize.py and
# conll.output_conll), run once by TensorFlow on the fixture checkpoint (write_tf_checkpoint.py --original).
ORIGINAL_RUN = TINY_CHECKPOINT.parent / "tiny_coref_original"


def original_run(name: str) -> dict:
    return json.loads((ORIGINAL_RUN / name).read_text())


def original_document() -> dict:
    """The fixture document as the original's minimize.py segmented it (four segments, one inside a sentence)."""
    return json.loads((ORIGINAL_RUN / "document.jsonlines").read_text())


def mismatches_with_the_original(model: CorefModel, outputs: dict, order: bool) -> list[str]:
    """What differs between the model's outputs on the original's document and the original graph's
    ``outputs``: spans, antecedents (in order where ``order``, else as sets), predicted antecedents and
    clusters exactly, scores and the loss to ``TOLERANCE``."""
    tensors = model.tensorize(original_document())
    with torch.no_grad():
        output = model.model.eval()(tensors, with_loss=True)
    found = []
    candidates = list(zip(output.candidate_starts.tolist(), output.candidate_ends.tolist(), strict=True))
    if candidates != list(zip(outputs["candidate_starts"], outputs["candidate_ends"], strict=True)):
        return [f"candidate spans: {len(candidates)} here, {len(outputs['candidate_starts'])} in the original"]
    mention = (output.candidate_mention_scores - torch.tensor(outputs["candidate_mention_scores"])).abs().max()
    if not mention < TOLERANCE:
        found.append(f"candidate mention scores differ by {float(mention):.2g}")
    kept = list(zip(output.top_span_starts.tolist(), output.top_span_ends.tolist(), strict=True))
    if kept != list(zip(outputs["top_span_starts"], outputs["top_span_ends"], strict=True)):
        return [*found, f"kept spans: {kept} here, other ones in the original"]
    antecedents = output.top_antecedents.tolist()
    expected = outputs["top_antecedents"]
    same = antecedents == expected if order else [sorted(row) for row in antecedents] == [sorted(r) for r in expected]
    if not same:
        return [*found, f"antecedents: {antecedents} here, {expected} in the original"]
    # each antecedent's score, by antecedent (the column order differs where order is not compared); -inf alike
    ours = {
        (i, j): s
        for i, row in enumerate(antecedents)
        for j, s in zip(row, output.top_antecedent_scores[i, 1:], strict=True)
    }
    theirs = {
        (i, j): s
        for i, row in enumerate(expected)
        for j, s in zip(row, outputs["top_antecedent_scores"][i][1:], strict=True)
    }
    difference = max(0.0 if s == theirs[p] else abs(float(s) - theirs[p]) for p, s in ours.items())
    if not difference < TOLERANCE:
        found.append(f"antecedent scores differ by {difference:.2g}")
    if not abs(float(output.loss) - outputs["loss"]) < TOLERANCE * max(1.0, abs(outputs["loss"])):
        found.append(f"loss {float(output.loss)} here, {outputs['loss']} in the original")
    best = output.top_antecedent_scores.argmax(dim=1) - 1
    predicted = [-1 if b < 0 else antecedents[i][b] for i, b in enumerate(best.tolist())]
    if predicted != outputs["predicted_antecedents"]:
        found.append(f"predicted antecedents: {predicted} here, {outputs['predicted_antecedents']} in the original")
    clusters = predicted_clusters(output.top_span_starts, output.top_span_ends, output.top_antecedents,
                                  output.top_antecedent_scores)  # fmt: skip
    if [[list(span) for span in cluster] for cluster in clusters] != outputs["predicted_clusters"]:
        found.append(f"clusters: {clusters} here, {outputs['predicted_clusters']} in the original")
    return found


@pytest.mark.parametrize(("outputs", "order"), [("outputs.json", False), ("outputs_every_antecedent.json", True)])
def test_the_imported_model_predicts_what_the_original_graph_predicts(imported_tiny_coref, outputs, order):
    """Against the original's own outputs: with 5 antecedents of 20 kept spans TensorFlow's unsorted top_k leaves
    them in its heap's order (another on a GPU), so they are compared as sets there; with every earlier span
    kept top_k sorts them (equal scores by index), and so does the model."""
    original = original_run(outputs)
    model = CorefModel.load(imported_tiny_coref, max_top_antecedents=original["max_top_antecedents"])
    assert model.config.special_token_spans
    assert mismatches_with_the_original(model, original, order) == []
    # the document exercises the rule: candidates over [CLS] and [SEP], and predicted mentions over them
    document = original_document()
    tokens = [token for segment in document["sentences"] for token in segment]
    spans = zip(original["candidate_starts"], original["candidate_ends"], strict=True)
    covered = {tokens[t] for s, e in spans for t in range(s, e + 1)}
    assert {"[CLS]", "[SEP]"} <= covered
    assert any(tokens[s] == "[CLS]" for cluster in original["predicted_clusters"] for s, _ in cluster)


def test_this_projects_candidate_rule_does_not_predict_what_the_original_does(imported_tiny_coref):
    """The mutation: the import under the rule of models trained here (no span over [CLS]/[SEP]) fails the check."""
    model = CorefModel.load(imported_tiny_coref)
    model.model.config = dataclasses.replace(model.model.config, special_token_spans=False)
    found = mismatches_with_the_original(model, original_run("outputs.json"), order=False)
    assert found == ["candidate spans: 132 here, 167 in the original"]  # 35 spans over [CLS]/[SEP] fewer


def test_predicted_clusters_map_to_words_as_the_originals_output_conll(imported_tiny_coref):
    """Spans over [CLS]/[SEP] become word spans through subtoken_map, as the original's conll.output_conll writes
    them: the response file's mentions, a repeated word span once (first wins, as the reference scorer keeps it)."""
    model = CorefModel.load(imported_tiny_coref)
    predicted = model.predict_jsonlines(original_document())
    response = (ORIGINAL_RUN / "response.v4_gold_conll").read_text()
    [written] = parse_conll_lines(response.splitlines(), "response", **SCORER_READING)
    seen, expected = set(), []
    for cluster in written.clusters:
        kept = [tuple(span) for span in cluster if tuple(span) not in seen and not seen.add(tuple(span))]
        if kept:
            expected.append(kept)
    assert [sorted(tuple(span) for span in cluster) for cluster in word_clusters(predicted)] == [
        sorted(cluster) for cluster in expected
    ]
    assert (0, 0) in expected[0] and (9, 10) in expected[0]  # [CLS] alone, and [CLS] with the word after it
