"""LogGroupList framing without protobuf: varints and the records of a repeated field.

The daemon reads batches with its C decoders (or slices them, `Batch.part`) and never needs
the protobuf classes of `pb` on its way; keeping these few helpers apart spares every daemon
the descriptor pool's import and build at start-up (`pb` re-exports them).
"""

from __future__ import annotations


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def decode_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The protobuf varint at `data[pos:]`: (value, position after it)."""
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def frame_log_groups(serialized_groups: list[bytes]) -> bytes:
    """Assemble a LogGroupList from already-serialized LogGroups without decoding them.

    A repeated message field is just the concatenation of (tag, length, bytes) records, so the
    server can serve stored LogGroup bytes as they are.
    """
    parts: list[bytes] = []
    for raw in serialized_groups:
        parts.append(b"\x0a")  # field 1, wire type 2 (length-delimited)
        parts.append(encode_varint(len(raw)))
        parts.append(raw)
    return b"".join(parts)
