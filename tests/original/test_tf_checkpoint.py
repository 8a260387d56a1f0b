"""Reading TensorFlow checkpoints without TensorFlow: TensorFlow's own files, and variants written here."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from coref_pipeline.original.tf_checkpoint import (
    CheckpointError,
    TensorBundle,
    _register_update,
    checkpoint_prefix,
    crc32c,
    mask_crc,
    unmask_crc,
)
from tests.original.tf_bundle import write_bundle
from tests.paths import FIXTURES

CHECKPOINTS = FIXTURES / "tf_checkpoints"
TINY = CHECKPOINTS / "tiny_coref"


def test_every_variable_tensorflow_wrote_reads_back_as_tensorflow_held_it():
    bundle = TensorBundle.open(TINY)
    expected = np.load(CHECKPOINTS / "tiny_coref.npz")
    assert bundle.prefix == TINY / "model.max.ckpt" and bundle.num_shards == 1
    assert set(expected.files) <= set(bundle.entries)
    for name in expected.files:
        array = bundle.read(name)
        assert array.dtype == expected[name].dtype and np.array_equal(array, expected[name]), name
    # the optimiser's state is there too, with its own dtypes
    assert bundle.read("global_step").dtype == np.int64 and int(bundle.read("global_step")) == 1
    assert bundle.shape("bert/embeddings/word_embeddings/adam_m") == bundle.shape("bert/embeddings/word_embeddings")
    assert bundle.shape("mention_scores/hidden_weights_0/Adam_1") == bundle.shape("mention_scores/hidden_weights_0")


def test_the_checkpoint_is_found_from_a_directory_a_prefix_or_its_index(tmp_path):
    assert checkpoint_prefix(TINY) == TINY / "model.max.ckpt"
    assert checkpoint_prefix(TINY / "model.max.ckpt") == TINY / "model.max.ckpt"
    assert checkpoint_prefix(TINY / "model.max.ckpt.index") == TINY / "model.max.ckpt"
    assert checkpoint_prefix(CHECKPOINTS / "bert_only") == CHECKPOINTS / "bert_only" / "bert_model.ckpt"
    # A `checkpoint` state file naming a prefix where it was written, on another machine: its name is used.
    moved = tmp_path / "moved"
    shutil.copytree(TINY, moved)
    for path in moved.glob("model.max.ckpt.*"):
        path.rename(moved / path.name.replace("model.max.ckpt", "model.ckpt-57000"))
    (moved / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/spanbert_base/model.ckpt-57000"\n')
    shutil.copy(moved / "model.ckpt-57000.index", moved / "model.ckpt-1.index")
    assert checkpoint_prefix(moved) == moved / "model.ckpt-57000"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "no TensorFlow checkpoint in this directory (no *.index file)"),
        (lambda d: [(d / f"{n}.index").write_bytes(b"") for n in ("a", "b")], "several checkpoints (a.index, b.index)"),
        (lambda d: (d / "x.index").write_bytes(b"not a table" * 10), "not a TensorFlow checkpoint index"),
        (lambda d: (d / "x.index").write_bytes(b""), "too short to be a TensorFlow checkpoint index"),
    ],
)
def test_a_directory_without_a_readable_checkpoint_is_named(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(CheckpointError) as error:
        TensorBundle.open(tmp_path)
    assert message in str(error.value) and str(tmp_path) in str(error.value)


def test_a_corrupt_or_missing_data_file_is_named_with_the_variable(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(TINY, copy)
    bundle = TensorBundle.open(copy)
    entry = bundle.entries["coref_layer/f/output_weights"]
    data = bytearray(bundle.data_path(0).read_bytes())
    data[entry.offset + 5] ^= 0x40
    bundle.data_path(0).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"variable 'coref_layer/f/output_weights' does not match its checksum"):
        bundle.read("coref_layer/f/output_weights")
    assert bundle.read("coref_layer/f/output_bias").shape == bundle.shape(
        "coref_layer/f/output_bias"
    )  # the others read
    bundle.data_path(0).write_bytes(bytes(data[: entry.offset]))
    with pytest.raises(CheckpointError, match="truncated"):
        bundle.read("coref_layer/f/output_weights")
    bundle.data_path(0).unlink()
    with pytest.raises(CheckpointError, match=r"model.max.ckpt.data-00000-of-00001: missing"):
        TensorBundle.open(copy)


def test_a_corrupt_index_block_is_refused(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(TINY, copy)
    index = copy / "model.max.ckpt.index"
    table = bytearray(index.read_bytes())
    table[20] ^= 0x01  # inside the first data block
    index.write_bytes(bytes(table))
    with pytest.raises(CheckpointError, match="a block's checksum does not match"):
        TensorBundle.open(copy)


def test_tables_of_several_blocks_and_prefix_compressed_keys(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"scope/layer_{i}/kernel": rng.normal(size=(3, i + 1)).astype(np.float32) for i in range(40)}
    arrays["step"] = np.array(7, dtype=np.int64)
    arrays["half"] = rng.normal(size=(4,)).astype(np.float16)
    write_bundle(tmp_path / "ckpt", arrays, block_size=200, restart_interval=3)
    bundle = TensorBundle.open(tmp_path / "ckpt")
    assert set(bundle) == set(arrays)
    for name, array in arrays.items():
        assert np.array_equal(bundle.read(name), array) and bundle.read(name).dtype == array.dtype


def test_bfloat16_is_widened_and_unsupported_entries_are_named(tmp_path):
    values = np.array([1.5, -2.25, 3.0], dtype=np.float32)
    bfloat16 = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    write_bundle(
        tmp_path / "ckpt",
        {"partitioned": np.zeros(2, dtype=np.float32)},
        sliced=("partitioned",),
        raw={"text": (7, (1,), b"\x03abc"), "bf16": (14, (3,), bfloat16)},
    )
    bundle = TensorBundle.open(tmp_path / "ckpt")
    assert np.array_equal(bundle.read("bf16"), values) and bundle.read("bf16").dtype == np.float32
    with pytest.raises(CheckpointError, match=r"variable 'partitioned' is partitioned into slices"):
        bundle.read("partitioned")
    with pytest.raises(CheckpointError, match=r"variable 'text' has TensorFlow dtype 7"):
        bundle.read("text")
    write_bundle(tmp_path / "big", {"x": values}, big_endian=True)
    with pytest.raises(CheckpointError, match="big-endian"):
        TensorBundle.open(tmp_path / "big")


def test_crc32c():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert crc32c(b"") == 0
    data = np.random.default_rng(1).integers(0, 256, 3_000_017, dtype=np.uint8).tobytes()
    assert crc32c(data) == _register_update(0xFFFFFFFF, data) ^ 0xFFFFFFFF  # lanes and chaining = byte by byte
    assert unmask_crc(mask_crc(0x12345678)) == 0x12345678 and mask_crc(0) == 0xA282EAD8
