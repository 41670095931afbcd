"""The LogHub protobuf schema (PROTOCOL.md §5), built from a descriptor at import time.

Building the descriptor in code instead of shipping protoc output keeps us independent of the
protoc/runtime version pairing; the classes are ordinary (upb-backed) protobuf messages.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import message as _message

# The framing helpers need no protobuf: they live apart so that the daemon's hot path can
# use them without importing it (see framing.py). Re-exported for the code that has both.
from loghubd.protocol.framing import decode_varint as decode_varint
from loghubd.protocol.framing import encode_varint as encode_varint
from loghubd.protocol.framing import frame_log_groups as frame_log_groups

_PACKAGE = "loghubd.sls"


def _build_file(name: str, value_type: int, suffix: str) -> descriptor_pb2.FileDescriptorProto:
    F = descriptor_pb2.FieldDescriptorProto
    req, opt, rep = F.LABEL_REQUIRED, F.LABEL_OPTIONAL, F.LABEL_REPEATED
    fdp = descriptor_pb2.FileDescriptorProto(name=name, package=_PACKAGE, syntax="proto2")

    def add(
        msg: descriptor_pb2.DescriptorProto,
        fname: str,
        num: int,
        label: int,
        ftype: int,
        type_name: str = "",
    ) -> None:
        f = msg.field.add(name=fname, number=num, label=label, type=ftype)
        if type_name:
            f.type_name = type_name

    log = fdp.message_type.add(name="Log" + suffix)
    content = log.nested_type.add(name="Content")
    add(content, "Key", 1, req, F.TYPE_STRING)
    add(content, "Value", 2, req, value_type)
    add(log, "Time", 1, req, F.TYPE_UINT32)
    add(log, "Contents", 2, rep, F.TYPE_MESSAGE, f".{_PACKAGE}.Log{suffix}.Content")
    add(log, "Time_ns", 4, opt, F.TYPE_FIXED32)

    tag = fdp.message_type.add(name="LogTag" + suffix)
    add(tag, "Key", 1, req, F.TYPE_STRING)
    add(tag, "Value", 2, req, F.TYPE_STRING)

    group = fdp.message_type.add(name="LogGroup" + suffix)
    add(group, "Logs", 1, rep, F.TYPE_MESSAGE, f".{_PACKAGE}.Log{suffix}")
    add(group, "Reserved", 2, opt, F.TYPE_STRING)
    add(group, "Topic", 3, opt, F.TYPE_STRING)
    add(group, "Source", 4, opt, F.TYPE_STRING)
    add(group, "MachineUUID", 5, opt, F.TYPE_STRING)
    add(group, "LogTags", 6, rep, F.TYPE_MESSAGE, f".{_PACKAGE}.LogTag{suffix}")

    glist = fdp.message_type.add(name="LogGroupList" + suffix)
    add(glist, "LogGroups", 1, rep, F.TYPE_MESSAGE, f".{_PACKAGE}.LogGroup{suffix}")
    return fdp


_pool = descriptor_pool.DescriptorPool()
_T = descriptor_pb2.FieldDescriptorProto
_pool.Add(_build_file("loghubd/sls.proto", _T.TYPE_STRING, ""))
# The "Raw" twin: identical except that values are bytes, for data that is not valid UTF-8.
_pool.Add(_build_file("loghubd/sls_raw.proto", _T.TYPE_BYTES, "Raw"))


def _cls(name: str) -> Any:
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


Log: Any = _cls("Log")
LogTag: Any = _cls("LogTag")
LogGroup: Any = _cls("LogGroup")
LogGroupList: Any = _cls("LogGroupList")
LogRaw: Any = _cls("LogRaw")
LogGroupRaw: Any = _cls("LogGroupRaw")
LogGroupListRaw: Any = _cls("LogGroupListRaw")

DecodeError = _message.DecodeError
