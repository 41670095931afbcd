"""The official SDK's ConsumerWorker as a separate process, for daemon_bench.py.

    python bench/_sdk_consumer.py --port P --project X --logstore L --group G --name N \
        --expect LOGS [--heartbeat 2] [--fetch-interval 0.2] [--records | --jsonl DIR]
        [--pool N] [--max-groups N]

Reaches `loghubd serve` through the HTTP_PROXY trick (PROTOCOL.md §2): endpoint
`sls.local:<port>`, HTTP_PROXY=http://127.0.0.1:<port> (set here, before `requests` loads).
With --records the processor is a ConsumerJsonProcessorBase: the SDK builds the flattened
dict of every log (`__time__`, `__topic__`, `__source__`, `__tag__:*`, contents), the same
records loghubd's `null` processor builds through `Batch.logs()` with `records = true`, and
drops them. Without it, a ConsumerProcessorBase counts the logs of the LogGroupList the SDK
parsed (like loghubd's plain `null`). With --jsonl DIR it builds the same dicts and writes
each as `json.dumps(record) + "\n"` to DIR/shard-<shard>.jsonl (what loghubd's `jsonl`
processor writes, the way a user of the SDK would write it), one write per batch, then saves
the checkpoint. --pool and --max-groups set worker_pool_size and max_fetch_log_group_size.

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
    p.add_argument("--jsonl", default="", help="write every log's dict as a JSON line here")
    p.add_argument("--pool", type=int, default=0, help="worker_pool_size (SDK default if 0)")
    p.add_argument("--max-groups", type=int, default=0, help="max_fetch_log_group_size")
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

    class JsonLines(ConsumerJsonProcessorBase):  # type: ignore[misc]
        def initialize(self, shard: int) -> None:
            super().initialize(shard)
            self.out = open(os.path.join(args.jsonl, f"shard-{shard}.jsonl"), "ab")  # noqa: SIM115

        def process(self, flattern_json_list: list[dict[str, object]], tracker: object) -> None:
            dumps = json.dumps
            self.out.write("".join(dumps(r) + "\n" for r in flattern_json_list).encode())
            self.out.flush()
            counted(len(flattern_json_list))
            self.save_checkpoint(tracker)

        def shutdown(self, tracker: object) -> None:
            self.out.close()
            super().shutdown(tracker)

    class Counting(ConsumerProcessorBase):  # type: ignore[misc]
        def process(self, log_groups: object, tracker: object) -> None:
            counted(sum(len(g.Logs) for g in log_groups.LogGroups))  # type: ignore[attr-defined,misc]
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
        max_fetch_log_group_size=args.max_groups or None,
        worker_pool_size=args.pool or None,
    )
    if args.jsonl:
        os.makedirs(args.jsonl, exist_ok=True)
    kind = JsonLines if args.jsonl else Records if args.records else Counting
    worker = ConsumerWorker(kind, config)
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
