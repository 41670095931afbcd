"""Cursor strings: padded standard base64 of a decimal integer (PROTOCOL.md §7).

One integer step per LogGroup, from a per-shard base, so one canonical string stands for each
position and the SDK's "previous cursor" arithmetic (decode, minus one, encode) works. The
Python SDK encodes that arithmetic's result with `base64.encodebytes`, which ends it with a
newline: `decode` accepts one trailing newline, and nothing else that is not canonical.
"""

from __future__ import annotations

import base64
import binascii

# Each shard's positions start at base(shard) = (shard_id + 1) * SHARD_STRIDE, so a cursor from
# another shard of the same logstore is recognisably foreign.
SHARD_STRIDE = 10**15


class InvalidCursorString(ValueError):
    pass


def encode(value: int) -> str:
    return base64.b64encode(str(value).encode()).decode()


def decode(text: str) -> int:
    body = text[:-1] if text.endswith("\n") else text  # as base64.encodebytes writes it
    try:
        raw = base64.b64decode(body.encode("ascii"), validate=True)
        value = int(raw.decode("ascii"))
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise InvalidCursorString(f"cursor {text[:64]!r} is not a base64 decimal") from exc
    if value < 0 or encode(value) != body:
        raise InvalidCursorString(f"cursor {text[:64]!r} is not canonical")
    return value


def shard_base(shard_id: int) -> int:
    return (shard_id + 1) * SHARD_STRIDE


def shard_of(value: int) -> int:
    """The shard a decoded cursor value belongs to (-1: none, below the first shard's base)."""
    return value // SHARD_STRIDE - 1


def to_seq(shard_id: int, text: str) -> int:
    """The shard-local sequence number (position) a cursor stands for; foreign → error."""
    value = decode(text)
    seq = value - shard_base(shard_id)
    if not 0 <= seq < SHARD_STRIDE:
        raise InvalidCursorString(f"cursor {text[:64]!r} belongs to another shard")
    return seq


def from_seq(shard_id: int, seq: int) -> str:
    return encode(shard_base(shard_id) + seq)
