"""`loghubd group` (list, describe, reset, delete) and `loghubd status`: argument parsing and
the runs, printing tables or JSON. Errors are UserError / SLS errors for `loghubd.cli` to turn
into one line and an exit code (`admin.errors`)."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from loghubd.admin import inspect, reset, view
from loghubd.admin.connect import Target, client_for, positive_seconds, target
from loghubd.admin.errors import NOT_FOUND, OK, REFUSED, USAGE, UserError
from loghubd.admin.helpfmt import DefaultsFormatter
from loghubd.config import Config

Fmt = DefaultsFormatter

# argparse takes a word that starts with "-" and is not a plain number for an option, so the
# documented `--shift-by -1h` failed with "expected one argument"; `join_dash_values` joins
# such a value to its flag ("--shift-by=-1h"), the form argparse reads as a value. So does an
# abbreviation argparse accepts ("--shift -1h"; an ambiguous one stays argparse's error).
DASH_VALUE_FLAGS = ("--shift-by",)
_DASH_VALUE = re.compile(r"-[\d.]")


def join_dash_values(argv: Sequence[str]) -> list[str]:
    """`argv` with `--shift-by -1h` written as `--shift-by=-1h` (a value that looks like a
    negative duration; not `--shift-by --execute`, which stays a missing value)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":  # the rest are positional arguments
            return out + list(argv[i:])
        following = argv[i + 1] if i + 1 < len(argv) else ""
        if _takes_dash_values(word) and _DASH_VALUE.match(following):
            out.append(f"{word}={following}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def _takes_dash_values(word: str) -> bool:
    """`word` is one of DASH_VALUE_FLAGS, or an abbreviation of one."""
    return (
        len(word) > 2
        and word.startswith("--")
        and any(f.startswith(word) for f in DASH_VALUE_FLAGS)
    )


def _where(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-c",
        "--config",
        help="take endpoint, project, logstore, credentials and group from this config file",
    )
    p.add_argument("--endpoint", help="service URL (default: source.endpoint of -c)")
    p.add_argument("--project", help="(default: source.project of -c)")
    p.add_argument("--logstore", help="(default: source.logstore of -c)")
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds for each call, retries included (above 0)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_parsers(sub: Any, load: Callable[[str | None], Config | None]) -> None:
    """`status` and `group ...` on the CLI's subparsers; `load` reads a -c config."""
    status = sub.add_parser(
        "status",
        formatter_class=Fmt,
        help="describe a consumer group (same as `loghubd group describe`)",
        description="Each shard's owner, state, committed position as a time, and lag in log "
        "groups, logs and seconds.",
    )
    _where(status)
    status.add_argument("--group", help="(default: consumer.group of -c)")
    _describe_flags(status)
    status.set_defaults(func=lambda a: _run_describe(a, load(a.config)), group_label="--group")

    group = sub.add_parser(
        "group",
        formatter_class=Fmt,
        help="list, describe, reset or delete consumer groups (like kafka-consumer-groups)",
    )
    gsub = group.add_subparsers(dest="group_command", required=True)

    p = gsub.add_parser("list", formatter_class=Fmt, help="the groups of a logstore")
    _where(p)
    p.set_defaults(func=lambda a: _run_list(a, load(a.config)))

    p = gsub.add_parser(
        "describe", formatter_class=Fmt, help="consumers, shards, positions, lag of one group"
    )
    _where(p)
    p.add_argument("group", nargs="?", help="the group (default: consumer.group of -c)")
    _describe_flags(p)
    p.set_defaults(func=lambda a: _run_describe(a, load(a.config)))

    p = gsub.add_parser(
        "reset",
        formatter_class=Fmt,
        help="move checkpoints (prints the plan; --execute applies it)",
        description="Moves the group's checkpoints to the target, for every shard or --shards. "
        "Without --execute only the plan is printed (old -> new per shard). Refused while the "
        "group has live consumers unless --force.",
    )
    _where(p)
    p.add_argument("group", nargs="?", help="the group (default: consumer.group of -c)")
    p.add_argument(
        "--to",
        help="begin, end, or a time (unix seconds, ISO-8601; UTC if no zone; 1970 to 9999)",
    )
    p.add_argument("--to-cursor", help="a cursor (one shard at a time makes most sense)")
    p.add_argument(
        "--shift-by",
        metavar="DURATION",
        help="move the current checkpoint by a duration: -1h, +30m, -90s (--shift-by -1h and "
        "--shift-by=-1h both work)",
    )
    p.add_argument(
        "--shards", help="only these shards: ids and LOW-HIGH ranges, 0,2,5-7 (default: all)"
    )
    p.add_argument("--execute", action="store_true", help="apply the plan (default: dry run)")
    p.add_argument("--force", action="store_true", help="even while consumers are live")
    p.set_defaults(func=lambda a: _run_reset(a, load(a.config)))

    p = gsub.add_parser("delete", formatter_class=Fmt, help="delete a group and its checkpoints")
    _where(p)
    p.add_argument("group", nargs="?", help="the group (default: consumer.group of -c)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--force", action="store_true", help="even while consumers are live")
    p.set_defaults(func=lambda a: _run_delete(a, load(a.config)))


def _describe_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--watch", action="store_true", help="refresh in place until Ctrl-C")
    p.add_argument(
        "--interval", type=float, default=2.0, help="seconds between --watch refreshes (above 0)"
    )
    p.add_argument(
        "--no-count",
        action="store_true",
        help="do not read the unconsumed log groups to count their logs",
    )


def _run(t: Target, fn: Callable[[], Awaitable[int]]) -> int:
    # Ctrl-C ends a run quietly (exit 130, by loghubd.cli); the context names what was asked.
    code: int = anyio.run(fn)
    return code


def _target(args: argparse.Namespace, cfg: Config | None, need_group: bool = True) -> Target:
    return target(args, cfg, os.environ, need_group=need_group)


def _run_list(args: argparse.Namespace, cfg: Config | None) -> int:
    t = _target(args, cfg, need_group=False)
    args.context = t.context

    async def go() -> int:
        async with client_for(t) as client:
            groups = await inspect.list_groups(client, t.logstore)
        print(
            json.dumps(groups, indent=2)
            if args.json
            else view.render_groups(groups, t.project, t.logstore)
        )
        return OK

    return _run(t, go)


def _run_describe(args: argparse.Namespace, cfg: Config | None) -> int:
    positive_seconds("--interval", args.interval)
    t = _target(args, cfg)
    args.context = t.context

    async def go() -> int:
        if not args.watch:
            return await show()
        # --watch: Ctrl-C (or SIGTERM) ends it between or during refreshes, exit 130.
        async with anyio.create_task_group() as tg:
            stopped = False

            async def on_signal() -> None:
                nonlocal stopped
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        stopped = True
                        tg.cancel_scope.cancel()

            tg.start_soon(on_signal)
            await show()
        if stopped:
            raise KeyboardInterrupt
        return OK

    async def show() -> int:
        async with client_for(t) as client:
            while True:
                v = await inspect.describe(
                    client, t.logstore, t.group, time.time(), count=not args.no_count
                )
                text = json.dumps(view.to_json(v), indent=2) if args.json else view.render(v)
                if not args.watch:
                    print(text)
                    return OK
                if sys.stdout.isatty():
                    sys.stdout.write("\x1b[H\x1b[2J")  # home, clear: refresh in place
                stamp = time.strftime("%H:%M:%S")
                print(f"{text}\n\n(every {args.interval:g}s, {stamp}; Ctrl-C to stop)")
                sys.stdout.flush()
                await anyio.sleep(args.interval)

    return _run(t, go)


def _run_reset(args: argparse.Namespace, cfg: Config | None) -> int:
    # A bad --to, --shift-by or --shards is named before connecting to the service.
    try:
        target_ = reset.parse_target(args.to, args.to_cursor, args.shift_by)
        reset.parse_shard_ids(args.shards)
    except reset.TargetError as exc:
        raise UserError(USAGE, str(exc)) from None
    t = _target(args, cfg)
    args.context = t.context

    async def go() -> int:
        async with client_for(t) as client:
            v = await inspect.describe(client, t.logstore, t.group, time.time(), count=False)
            try:
                shards = reset.parse_shards(args.shards, [s.shard for s in v.shards])
            except reset.TargetError as exc:
                raise UserError(NOT_FOUND if "no shard" in str(exc) else USAGE, str(exc)) from None
            live = v.live_consumers
            if live and args.execute and not args.force:
                raise UserError(
                    REFUSED,
                    f"group {t.group} has live consumers ({', '.join(live)}): stop them first, "
                    "or --force (their next commits would undo the reset)",
                )
            moves = await reset.plan(client, t.logstore, t.group, shards, target_)
            if args.execute:
                await reset.apply(client, t.logstore, t.group, moves)
        _print_reset(args, t, target_, moves, live)
        return OK

    return _run(t, go)


def _print_reset(
    args: argparse.Namespace,
    t: Target,
    target_: reset.Target,
    moves: list[reset.Move],
    live: list[str],
) -> None:
    if args.json:
        print(
            json.dumps(
                {
                    "group": t.group,
                    "target": target_.describe(),
                    "executed": bool(args.execute),
                    "live_consumers": live,
                    "shards": [m.as_dict() for m in moves],
                },
                indent=2,
            )
        )
        return
    verb = "reset" if args.execute else "would reset (dry run; --execute applies it)"
    print(f"group {t.group} on {t.project}/{t.logstore}: {verb} to {target_.describe()}")
    for m in moves:
        print("  " + m.line())
    if live:
        note = "forced while live" if args.execute else "live consumers"
        print(f"{note} ({', '.join(live)}): {reset.LIVE_OWNERS}")


def _run_delete(args: argparse.Namespace, cfg: Config | None) -> int:
    t = _target(args, cfg)
    args.context = t.context

    async def go() -> int:
        async with client_for(t) as client:
            v = await inspect.describe(client, t.logstore, t.group, time.time(), count=False)
            if v.live_consumers and not args.force:
                raise UserError(
                    REFUSED,
                    f"group {t.group} has live consumers ({', '.join(v.live_consumers)}): "
                    "stop them first, or --force",
                )
            if not args.yes:
                if not sys.stdin.isatty():
                    raise UserError(
                        REFUSED, f"deleting group {t.group} needs confirmation: add --yes"
                    )
                answer = await anyio.to_thread.run_sync(
                    input, f"delete group {t.group} and its checkpoints on {t.logstore}? [y/N] "
                )
                if answer.strip().lower() not in ("y", "yes"):
                    print("not deleted")
                    return REFUSED
            await client.delete_group(t.logstore, t.group)
        print(f"deleted group {t.group} on {t.project}/{t.logstore}")
        if v.live_consumers:  # --force: say what it did to them
            print(
                f"warning: {len(v.live_consumers)} live consumer(s) were in it "
                f"({', '.join(v.live_consumers)}): their heartbeats now fail "
                "(ConsumerGroupNotExist) and they consume nothing, unready, until restarted; "
                "a restarted daemon creates the group again and starts from consumer.start",
                file=sys.stderr,
            )
        return OK

    return _run(t, go)
