"""TensorFlow checkpoints (the tensor-bundle format of ``tf.train.Saver``) read with numpy alone.

A checkpoint ``PREFIX`` is two kinds of file:

    PREFIX.index                   an SSTable (LevelDB's table format): under the empty key a
                                   ``BundleHeaderProto`` (shards, endianness), under each variable's
                                   name a ``BundleEntryProto`` (dtype, shape, shard, offset, size, crc32c)
    PREFIX.data-0000N-of-0000M     the arrays' raw little-endian bytes, one shard a file

A directory may also hold a ``checkpoint`` file (a text proto naming its latest prefix).
This module parses both with a small protobuf wire-format decoder of its own, checks the
masked CRC-32C of every block and every array it reads, and never imports TensorFlow.
Sliced (partitioned) variables and string tensors are refused with a message naming them.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coref_pipeline.errors import UserError

INDEX_SUFFIX = ".index"
CHECKPOINT_STATE_FILE = "checkpoint"  # the text proto tf.train.Saver writes beside its checkpoints
TABLE_MAGIC = 0xDB4775248B80FB57  # the last 8 bytes of an SSTable
FOOTER_SIZE = 48  # two block handles padded to 40 bytes, then the magic number
BLOCK_TRAILER_SIZE = 5  # compression type (1 byte) and the block's masked crc32c (4 bytes)
NO_COMPRESSION = 0

# tensorflow/core/framework/types.proto: the DataType enum values this reader turns into numpy dtypes.
NUMPY_DTYPES = {
    1: np.dtype("<f4"),  # DT_FLOAT
    2: np.dtype("<f8"),  # DT_DOUBLE
    3: np.dtype("<i4"),  # DT_INT32
    4: np.dtype("u1"),  # DT_UINT8
    5: np.dtype("<i2"),  # DT_INT16
    6: np.dtype("i1"),  # DT_INT8
    9: np.dtype("<i8"),  # DT_INT64
    10: np.dtype("?"),  # DT_BOOL
    14: np.dtype("<u2"),  # DT_BFLOAT16: the upper half of a float32, widened on reading
    17: np.dtype("<u2"),  # DT_UINT16
    19: np.dtype("<f2"),  # DT_HALF
    22: np.dtype("<u4"),  # DT_UINT32
    23: np.dtype("<u8"),  # DT_UINT64
}
DT_BFLOAT16 = 14
DT_STRING = 7


class CheckpointError(UserError, ValueError):
    """A file that is not a TensorFlow checkpoint this reader reads; the message names the file."""


# ------------------------------------------------------------------ CRC-32C


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)  # Castagnoli, reflected
        table[byte] = crc
    return table


_TABLE = _crc_table()
_TABLE_LIST = [int(value) for value in _TABLE]
_LANES = 65536  # parallel lanes of the vectorised CRC for large buffers


def _register_update(register: int, data: bytes | memoryview) -> int:
    """The CRC register after ``data`` (no initial or final inversion), one byte at a time."""
    table = _TABLE_LIST
    for byte in bytes(data):
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def _zeros_operator(length: int) -> list[list[int]]:
    """The register after ``length`` zero bytes, as a function of the register before: four byte tables.

    The register's update is linear over GF(2), so its effect on each of the 32 bits is computed
    once (vectorised over the bits) and combined per byte value.
    """
    basis = np.left_shift(np.uint32(1), np.arange(32, dtype=np.uint32))  # [32]
    for _ in range(length):
        basis = _TABLE[basis & 0xFF] ^ (basis >> 8)
    images = [int(value) for value in basis]
    tables = []
    for byte_index in range(4):
        bits = images[8 * byte_index : 8 * byte_index + 8]
        table = [0] * 256
        for value in range(1, 256):
            low = value & -value
            table[value] = table[value ^ low] ^ bits[low.bit_length() - 1]
        tables.append(table)
    return tables


def crc32c(data: bytes | memoryview | np.ndarray) -> int:
    """The CRC-32C (Castagnoli) of ``data``.

    Large buffers are cut into equal lanes whose registers are computed side by side with numpy
    (one byte of every lane per step), then chained: the register after lane i is carried over
    lane i + 1's length of zeros (a linear map, tabulated once) and xored with lane i + 1's own.
    """
    buffer = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    register = 0xFFFFFFFF
    lanes = min(_LANES, buffer.size // 1024)
    if lanes >= 2:
        lane_length = buffer.size // lanes
        columns = np.ascontiguousarray(buffer[: lanes * lane_length].reshape(lanes, lane_length).T)
        lane_registers = np.zeros(lanes, dtype=np.uint32)  # [lanes]
        for column in columns:  # [lanes] bytes each
            lane_registers = _TABLE[(lane_registers ^ column) & 0xFF] ^ (lane_registers >> 8)
        shift = _zeros_operator(lane_length)
        for lane_register in lane_registers.tolist():
            register = (
                shift[0][register & 0xFF]
                ^ shift[1][(register >> 8) & 0xFF]
                ^ shift[2][(register >> 16) & 0xFF]
                ^ shift[3][register >> 24]
                ^ lane_register
            )
        buffer = buffer[lanes * lane_length :]
    return _register_update(register, buffer.tobytes()) ^ 0xFFFFFFFF


def unmask_crc(masked: int) -> int:
    """LevelDB's and TensorFlow's stored checksum form back to the CRC (``crc32c::Unmask``)."""
    rotated = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """The stored form of a CRC (``crc32c::Mask``): rotated right by 15 bits plus a constant."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ------------------------------------------------------------ protobuf wire format


def _varint(buffer: bytes, position: int, where: str) -> tuple[int, int]:
    """A base-128 varint at ``position``: ``(value, next position)``."""
    value, shift = 0, 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise CheckpointError(f"{where}: truncated or malformed varint")
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _fields(buffer: bytes, where: str) -> Iterator[tuple[int, int | bytes]]:
    """``(field number, value)`` of each field of a protobuf message: ints for varint and fixed fields,
    bytes for length-delimited ones."""
    position = 0
    while position < len(buffer):
        key, position = _varint(buffer, position, where)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(buffer, position, where)
        elif wire_type == 1:
            value, position = int.from_bytes(buffer[position : position + 8], "little"), position + 8
        elif wire_type == 2:
            length, position = _varint(buffer, position, where)
            value, position = bytes(buffer[position : position + length]), position + length
        elif wire_type == 5:
            value, position = int.from_bytes(buffer[position : position + 4], "little"), position + 4
        else:
            raise CheckpointError(f"{where}: unsupported protobuf wire type {wire_type}")
        if position > len(buffer):
            raise CheckpointError(f"{where}: truncated protobuf message")
        yield number, value


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True)
class TensorEntry:
    """One variable of a checkpoint (a ``BundleEntryProto``)."""

    name: str
    dtype_code: int  # TensorFlow's DataType enum value
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int  # bytes
    crc32c: int  # masked, as stored
    sliced: bool  # a partitioned variable, stored as slices under other keys

    @property
    def dtype(self) -> np.dtype | None:
        """The numpy dtype of the stored bytes (None for a type this reader does not read)."""
        return NUMPY_DTYPES.get(self.dtype_code)

    @property
    def num_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def _parse_shape(buffer: bytes, where: str) -> tuple[int, ...]:
    dims = []
    for number, value in _fields(buffer, where):
        if number == 2:  # TensorShapeProto.dim
            size = 0
            for dim_number, dim_value in _fields(value, where):
                if dim_number == 1:
                    size = _signed64(dim_value)
            dims.append(size)
        elif number == 3 and value:  # unknown_rank
            raise CheckpointError(f"{where}: a tensor of unknown rank")
    return tuple(dims)


def _parse_entry(name: str, buffer: bytes, where: str) -> TensorEntry:
    values: dict[str, int] = {"dtype": 0, "shard_id": 0, "offset": 0, "size": 0, "crc32c": 0}
    shape: tuple[int, ...] = ()
    sliced = False
    for number, value in _fields(buffer, where):
        if number == 1:
            values["dtype"] = value
        elif number == 2:
            shape = _parse_shape(value, where)
        elif number in (3, 4, 5):
            values[{3: "shard_id", 4: "offset", 5: "size"}[number]] = _signed64(value)
        elif number == 6:
            values["crc32c"] = value
        elif number == 7:
            sliced = True
    return TensorEntry(
        name, values["dtype"], shape, values["shard_id"], values["offset"], values["size"], values["crc32c"], sliced
    )


# ------------------------------------------------------------------ SSTable


def _block_handle(buffer: bytes, position: int, where: str) -> tuple[int, int, int]:
    """A ``BlockHandle`` (offset, size) at ``position``, and the position after it."""
    offset, position = _varint(buffer, position, where)
    size, position = _varint(buffer, position, where)
    return offset, size, position


def _read_block(table: bytes, offset: int, size: int, where: str) -> bytes:
    """A block's contents, its trailer's checksum checked."""
    end = offset + size + BLOCK_TRAILER_SIZE
    if offset < 0 or end > len(table):
        raise CheckpointError(f"{where}: a block lies outside the file (truncated?)")
    contents = table[offset : offset + size]
    compression = table[offset + size]
    (stored,) = struct.unpack_from("<I", table, offset + size + 1)
    if crc32c(table[offset : offset + size + 1]) != unmask_crc(stored):
        raise CheckpointError(f"{where}: a block's checksum does not match (a corrupt file)")
    if compression != NO_COMPRESSION:
        raise CheckpointError(f"{where}: compressed table blocks (type {compression}) are not supported")
    return contents


def _block_entries(block: bytes, where: str) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of a block's entries; keys are prefix-compressed against the previous one."""
    if len(block) < 4:
        raise CheckpointError(f"{where}: a block too short to hold its restart points")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 * (num_restarts + 1)
    if limit < 0:
        raise CheckpointError(f"{where}: a block's restart array is larger than the block")
    position, key = 0, b""
    while position < limit:
        shared, position = _varint(block, position, where)
        non_shared, position = _varint(block, position, where)
        value_length, position = _varint(block, position, where)
        if shared > len(key) or position + non_shared + value_length > limit:
            raise CheckpointError(f"{where}: a malformed block entry")
        key = key[:shared] + block[position : position + non_shared]
        position += non_shared
        yield key, block[position : position + value_length]
        position += value_length


def read_table(path: Path) -> dict[bytes, bytes]:
    """Every key and value of an SSTable file (the data blocks the index block points to)."""
    where = str(path)
    table = path.read_bytes()
    if len(table) < FOOTER_SIZE:
        raise CheckpointError(f"{where}: too short to be a TensorFlow checkpoint index")
    footer = table[-FOOTER_SIZE:]
    (magic,) = struct.unpack_from("<Q", footer, FOOTER_SIZE - 8)
    if magic != TABLE_MAGIC:
        raise CheckpointError(f"{where}: not a TensorFlow checkpoint index (no table magic number)")
    _, _, position = _block_handle(footer, 0, where)  # the metaindex block: empty in checkpoints
    index_offset, index_size, _ = _block_handle(footer, position, where)
    entries: dict[bytes, bytes] = {}
    for _, handle in _block_entries(_read_block(table, index_offset, index_size, where), where):
        offset, size, _ = _block_handle(handle, 0, where)
        for key, value in _block_entries(_read_block(table, offset, size, where), where):
            entries[key] = value
    return entries


# ------------------------------------------------------------------ bundles


def checkpoint_prefix(path: str | Path) -> Path:
    """The checkpoint prefix ``path`` names: a prefix itself, its ``.index`` file, or a directory.

    In a directory: ``model.max.ckpt`` (what the original coreference code restores), else the
    prefix its ``checkpoint`` file names, else its only ``*.index`` file.
    """
    path = Path(path)
    if path.name.endswith(INDEX_SUFFIX) and path.is_file():
        return path.with_name(path.name[: -len(INDEX_SUFFIX)])
    if path.with_name(path.name + INDEX_SUFFIX).is_file() and not path.is_dir():
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint (neither a directory nor a prefix with an .index file)")
    preferred = path / "model.max.ckpt"
    if preferred.with_name(preferred.name + INDEX_SUFFIX).is_file():
        return preferred
    state = path / CHECKPOINT_STATE_FILE
    if state.is_file():
        match = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', state.read_text(encoding="utf-8"), re.MULTILINE)
        if match:
            named = Path(match.group(1))
            named = named if named.is_absolute() else path / named
            if named.with_name(named.name + INDEX_SUFFIX).is_file():
                return named
            named = path / named.name  # a checkpoint moved since: its file names still hold
            if named.with_name(named.name + INDEX_SUFFIX).is_file():
                return named
    indexes = sorted(path.glob(f"*{INDEX_SUFFIX}"))
    if len(indexes) == 1:
        return indexes[0].with_name(indexes[0].name[: -len(INDEX_SUFFIX)])
    if not indexes:
        raise CheckpointError(f"{path}: no TensorFlow checkpoint in this directory (no *.index file)")
    names = ", ".join(index.name for index in indexes)
    raise CheckpointError(f"{path}: several checkpoints ({names}); name one by its prefix")


class TensorBundle:
    """A TensorFlow checkpoint's variables: names, dtypes and shapes, and their arrays on request."""

    def __init__(self, prefix: Path, entries: dict[str, TensorEntry], num_shards: int) -> None:
        self.prefix = prefix
        self.entries = entries
        self.num_shards = num_shards

    @classmethod
    def open(cls, path: str | Path) -> TensorBundle:
        """The checkpoint at ``path`` (a directory, a prefix or an ``.index`` file; see :func:`checkpoint_prefix`)."""
        prefix = checkpoint_prefix(path)
        index = prefix.with_name(prefix.name + INDEX_SUFFIX)
        where = str(index)
        table = read_table(index)
        header = table.pop(b"", None)
        if header is None:
            raise CheckpointError(f"{where}: no bundle header (not a tensor-bundle checkpoint, an older format?)")
        num_shards, endianness = 1, 0
        for number, value in _fields(header, where):
            if number == 1:
                num_shards = value
            elif number == 2:
                endianness = value
        if endianness != 0:
            raise CheckpointError(f"{where}: a big-endian checkpoint, which this reader does not read")
        entries = {}
        for key, value in table.items():
            name = key.decode("utf-8", errors="replace")
            entries[name] = _parse_entry(name, value, f"{where}: variable {name!r}")
        bundle = cls(prefix, entries, num_shards)
        for shard in range(num_shards):
            if not bundle.data_path(shard).is_file():
                raise CheckpointError(f"{bundle.data_path(shard)}: missing (the checkpoint's data file)")
        return bundle

    def data_path(self, shard: int) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}.data-{shard:05d}-of-{self.num_shards:05d}")

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.entries))

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name].shape

    def read(self, name: str, check_crc: bool = True) -> np.ndarray:
        """The variable ``name`` as a numpy array (bfloat16 widened to float32), its checksum checked."""
        entry = self.entries[name]
        where = f"{self.prefix}: variable {name!r}"
        if entry.sliced:
            raise CheckpointError(f"{where} is partitioned into slices, which this reader does not read")
        if entry.dtype_code == DT_STRING or entry.dtype is None:
            raise CheckpointError(f"{where} has TensorFlow dtype {entry.dtype_code}, which this reader does not read")
        if entry.size != entry.num_elements * entry.dtype.itemsize:
            raise CheckpointError(f"{where}: {entry.size} bytes stored for shape {list(entry.shape)}")
        path = self.data_path(entry.shard_id)
        with path.open("rb") as handle:
            handle.seek(entry.offset)
            data = handle.read(entry.size)
        if len(data) != entry.size:
            raise CheckpointError(f"{path}: truncated (variable {name!r} runs past its end)")
        if check_crc and crc32c(data) != unmask_crc(entry.crc32c):
            raise CheckpointError(f"{path}: variable {name!r} does not match its checksum (a corrupt file)")
        array = np.frombuffer(data, dtype=entry.dtype).reshape(entry.shape)
        if entry.dtype_code == DT_BFLOAT16:
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array.astype(array.dtype.newbyteorder("="), copy=True)
