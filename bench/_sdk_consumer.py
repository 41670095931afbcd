"""The official SDK's ConsumerWorker as a separate process, for daemon_bench.py.

    python bench/_sdk_consumer.py --port P --project X --logstore L --group G --name N \
        --expect LOGS [--heartbeat 2] [--fetch-interval 0.2] [--records]

Reaches `loghubd serve` through the HTTP_PROXY trick (PROTOCOL.md §2): endpoint
`sls.local:<port>`, HTTP_PROXY=http://127.0.0.1:<port> (set here, before `requests` loads).
With --records the processor is a ConsumerJsonProcessorBase: the SDK builds the flattened
dict of every log (`__time__`, `__topic__`, `__source__`, `__tag__:*`, contents), the same
records loghubd's `null` processor builds through `Batch.logs()` with `records = true`, and
drops them. Without it, a ConsumerProcessorBase counts the logs of the LogGroupList the SDK
parsed (like loghubd's plain `null`).

Prints JSON lines on stdout: {"event": "started"} once the worker thread runs, and
{"event": "done", "t": <unix time>, "logs": N} when N >= --expect logs were processed.
SIGTERM shuts the worker down (checkpoints flushed) and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--project", required=True)
    p.add_argument("--logstore", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--expect", type=int, required=True)
    p.add_argument("--heartbeat", type=int, default=2)  # int: the SDK sends 2x as the group timeout
    p.add_argument("--fetch-interval", type=float, default=0.2)
    p.add_argument("--records", action="store_true", help="build every log's dict")
    args = p.parse_args()

    proxy = f"http://127.0.0.1:{args.port}"
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)
    os.environ["HTTP_PROXY"] = os.environ["http_proxy"] = proxy

    from aliyun.log.consumer import (
        ConsumerJsonProcessorBase,
        ConsumerProcessorBase,
        ConsumerWorker,
        CursorPosition,
        LogHubConfig,
    )

    lock = threading.Lock()
    state = {"logs": 0, "done": False}

    def emit(obj: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def counted(n: int) -> None:
        with lock:
            state["logs"] += n
            if not state["done"] and state["logs"] >= args.expect:
                state["done"] = True
                emit({"event": "done", "t": time.time(), "logs": state["logs"]})

    class Records(ConsumerJsonProcessorBase):  # type: ignore[misc]
        def process(self, flattern_json_list: list[dict[str, object]], tracker: object) -> None:
            n = 0
            for _record in flattern_json_list:
                n += 1
            counted(n)
            self.save_checkpoint(tracker)

    class Counting(ConsumerProcessorBase):  # type: ignore[misc]
        def process(self, log_groups: object, tracker: object) -> None:
            counted(sum(len(g.Logs) for g in log_groups.LogGroups))  # type: ignore[attr-defined]
            self.save_checkpoint(tracker)

    config = LogHubConfig(
        f"sls.local:{args.port}",
        "bench-ak",  # the server runs without --access-keys: signatures are not checked
        "bench-secret",
        args.project,
        args.logstore,
        args.group,
        args.name,
        cursor_position=CursorPosition.BEGIN_CURSOR,
        heartbeat_interval=args.heartbeat,
        data_fetch_interval=args.fetch_interval,
    )
    worker = ConsumerWorker(Records if args.records else Counting, config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.start()
    emit({"event": "started", "t": time.time()})
    stop.wait()
    worker.shutdown()
    worker.join(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
