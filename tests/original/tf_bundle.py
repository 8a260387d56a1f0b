"""A small writer of TensorFlow's tensor-bundle format, for tests that need checkpoints TensorFlow did not write.

The reader is checked against TensorFlow's own files (tests/fixtures/tf_checkpoints, written by
TensorFlow); this writer makes the variants those files do not cover (extra or missing variables,
several table blocks, sliced or string entries, a big-endian header) without TensorFlow.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from coref_pipeline.original.tf_checkpoint import TABLE_MAGIC, crc32c, mask_crc

DTYPE_CODES = {
    np.dtype("float32"): 1,
    np.dtype("float64"): 2,
    np.dtype("int32"): 3,
    np.dtype("int64"): 9,
    np.dtype("float16"): 19,
}


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, wire_type: int, payload: bytes | int) -> bytes:
    key = varint(number << 3 | wire_type)
    if wire_type == 0:
        return key + varint(payload)
    if wire_type == 5:
        return key + struct.pack("<I", payload)
    return key + varint(len(payload)) + payload


def entry_proto(
    dtype: int, shape: tuple[int, ...], offset: int, size: int, crc: int, sliced: bool = False, shard: int = 0
) -> bytes:
    dims = b"".join(field(2, 2, field(1, 0, dim)) for dim in shape)
    proto = field(1, 0, dtype) + field(2, 2, dims)
    if shard:
        proto += field(3, 0, shard)
    proto += field(4, 0, offset) + field(5, 0, size) + field(6, 5, crc)
    if sliced:
        proto += field(7, 2, field(1, 2, b""))
    return proto


def _block(entries: list[tuple[bytes, bytes]], restart_interval: int) -> bytes:
    out, restarts, previous = bytearray(), [], b""
    for index, (key, value) in enumerate(entries):
        shared = 0
        if index % restart_interval:
            while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
                shared += 1
        else:
            restarts.append(len(out))
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        previous = key
    restarts = restarts or [0]
    return bytes(out) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def _write_block(table: bytearray, contents: bytes) -> bytes:
    """Append a block and its trailer; its handle."""
    offset = len(table)
    table += contents + b"\x00" + struct.pack("<I", mask_crc(crc32c(contents + b"\x00")))
    return varint(offset) + varint(len(contents))


def write_table(path: Path, items: list[tuple[bytes, bytes]], block_size: int, restart_interval: int) -> None:
    table, index, current, size = bytearray(), [], [], 0
    for key, value in sorted(items):
        current.append((key, value))
        size += len(key) + len(value)
        if size >= block_size:
            index.append((key, _write_block(table, _block(current, restart_interval))))
            current, size = [], 0
    if current:
        index.append((current[-1][0], _write_block(table, _block(current, restart_interval))))
    metaindex = _write_block(table, _block([], restart_interval))
    index_handle = _write_block(table, _block(index, 1))
    footer = (metaindex + index_handle).ljust(40, b"\x00") + struct.pack("<Q", TABLE_MAGIC)
    path.write_bytes(bytes(table) + footer)


def write_bundle(
    prefix: Path,
    arrays: dict[str, np.ndarray],
    block_size: int = 1 << 20,
    restart_interval: int = 16,
    sliced: tuple[str, ...] = (),
    raw: dict[str, tuple[int, tuple[int, ...], bytes]] | None = None,
    big_endian: bool = False,
) -> None:
    """``prefix.index`` and ``prefix.data-00000-of-00001`` holding ``arrays`` (and ``raw`` entries:
    ``name -> (dtype code, shape, bytes)``), ``sliced`` names marked as partitioned."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    data, items = bytearray(), []
    stored = {
        name: (DTYPE_CODES[np.asarray(a).dtype], np.asarray(a).shape, np.asarray(a).tobytes())
        for name, a in arrays.items()
    }
    for name, (dtype, shape, payload) in sorted({**stored, **(raw or {})}.items()):
        entry = entry_proto(dtype, shape, len(data), len(payload), mask_crc(crc32c(payload)), name in sliced)
        items.append((name.encode(), entry))
        data += payload
    header = field(1, 0, 1) + (field(2, 0, 1) if big_endian else b"") + field(3, 2, field(1, 0, 1))
    items.append((b"", header))
    write_table(prefix.with_name(prefix.name + ".index"), items, block_size, restart_interval)
    prefix.with_name(prefix.name + ".data-00000-of-00001").write_bytes(bytes(data))
