"""Conversion (log groups → Arrow) in child processes, off the daemon's GIL.

Conversion holds the GIL (~0.25 µs per 9-field log with the C extension `_fastarrow`, ~4.5 µs
in pure Python over protobuf objects; the children load the extension as the daemon does, and
inherit `LOGHUBD_NO_C`). In the daemon's process it competes for the GIL with the Spark thread
(every py4j round trip waits for the GIL) and with the event loop; on a small machine that kept
conversions from overlapping the JVM's writes. A child process has a GIL of its own: the
calling worker thread just waits on a pipe (GIL released) and receives an Arrow IPC stream
(one copy).

Children are `python -m loghubd_spark.convert_worker` (not multiprocessing: `python -m
loghubd` would be re-run by its spawn start method). Protocol on stdin/stdout, one request at a
time per child: `<II` header (meta length, raw length), JSON meta, raw LogGroupList; answer
`<BII` (ok, meta length, body length), JSON meta (`groups`, `offsets`, or `error`), Arrow IPC
stream. A child exits at EOF on stdin, i.e. also when the daemon dies (`kill -9`).

A child that dies or fails is replaced; that batch is converted in the calling thread instead
(so a real conversion error surfaces with its own type, and no batch waits on a broken child).
"""

from __future__ import annotations

import json
import os
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import pyarrow as pa
import structlog

from loghubd.arrow import Converted, Span, convert

log = structlog.get_logger("loghubd.spark")

REQUEST = struct.Struct("<II")
ANSWER = struct.Struct("<BII")


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError("convert worker pipe closed")
    return data


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: one request, one answer, until EOF."""
    while True:
        header = stdin.read(REQUEST.size)
        if not header:
            return  # EOF: the daemon closed the pipe (or died)
        if len(header) != REQUEST.size:
            raise EOFError("truncated request")
        meta_len, raw_len = REQUEST.unpack(header)
        meta = json.loads(_read_exact(stdin, meta_len))
        raw = _read_exact(stdin, raw_len)
        try:
            keep = None if meta["keep"] is None else [tuple(s) for s in meta["keep"]]
            c = convert(meta["shard"], meta["cursor"], raw, keep, per_group=meta["per_group"])
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, c.table.schema) as writer:
                writer.write_table(c.table)
            body = sink.getvalue().to_pybytes()
            answer = json.dumps({"groups": c.groups, "offsets": c.offsets}).encode()
            ok = 1
        except Exception as exc:
            body, answer, ok = b"", json.dumps({"error": repr(exc)[:2000]}).encode(), 0
        stdout.write(ANSWER.pack(ok, len(answer), len(body)))
        stdout.write(answer)
        stdout.write(body)
        stdout.flush()


class _Child:
    def __init__(self) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loghubd_spark.convert_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def convert(
        self, shard: int, cursor: str, raw: bytes, keep: list[Span] | None, per_group: bool
    ) -> Converted:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        meta = json.dumps(
            {"shard": shard, "cursor": cursor, "keep": keep, "per_group": per_group}
        ).encode()
        self.proc.stdin.write(REQUEST.pack(len(meta), len(raw)))
        self.proc.stdin.write(meta)
        self.proc.stdin.write(raw)
        self.proc.stdin.flush()
        ok, meta_len, body_len = ANSWER.unpack(_read_exact(self.proc.stdout, ANSWER.size))
        answer = json.loads(_read_exact(self.proc.stdout, meta_len))
        body = _read_exact(self.proc.stdout, body_len)
        if not ok:
            raise RuntimeError(f"convert worker: {answer.get('error')}")
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        return Converted(table, list(answer["groups"]), list(answer["offsets"]))

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(5)
        except Exception:
            self.proc.kill()
            self.proc.wait(5)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()


class ConvertPool:
    """`processes` children; each call takes an idle one (or waits), falls back in-thread."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._idle: queue.Queue[_Child | None] = queue.Queue()
        self._lock = threading.Lock()
        self._children: list[_Child] = []
        self._closed = False

    def start(self) -> None:
        for _ in range(self.processes):
            child = _Child()
            self._children.append(child)
            self._idle.put(child)
        # Warm every child (imports) before the daemon is ready.
        from loghubd_spark.warmup import synthetic_batch

        b = synthetic_batch()
        taken = [self._idle.get() for _ in range(self.processes)]
        for each in taken:
            if each is not None:
                each.convert(b.shard, b.cursor, b.raw, None, False)
            self._idle.put(each)

    def convert(
        self,
        shard: int,
        cursor: str,
        raw: bytes,
        keep: Iterable[Span] | None = None,
        *,
        per_group: bool = True,
    ) -> Converted:
        spans = None if keep is None else [(int(a), int(b)) for a, b in keep]
        child = self._idle.get()
        if child is None:  # closing
            self._idle.put(None)
            return convert(shard, cursor, raw, spans, per_group=per_group)
        try:
            result = child.convert(shard, cursor, raw, spans, per_group)
        except Exception as exc:
            log.warning("spark_convert_worker_failed", error=repr(exc)[:300])
            self._idle.put(self._replace(child))
            return convert(shard, cursor, raw, spans, per_group=per_group)
        self._idle.put(child)
        return result

    def _replace(self, child: _Child) -> _Child | None:
        child.proc.kill()
        child.close()
        with self._lock:
            if self._closed:
                return None
            fresh = _Child()
            self._children = [c for c in self._children if c is not child] + [fresh]
            return fresh

    def close(self) -> None:
        with self._lock:
            self._closed = True
            children = list(self._children)
            self._children = []
        for child in children:
            child.close()
        self._idle.put(None)


def main() -> None:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # the answers own stdout: anything printed goes to stderr
    serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
