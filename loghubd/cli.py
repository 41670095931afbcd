"""Command line: `loghubd serve`, `loghubd run`, and the operator tools."""

from __future__ import annotations

import argparse
import contextlib
import gc
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from loghubd import config as config_mod
from loghubd import logging as loghubd_logging
from loghubd.config import Config
from loghubd.ops.systemd import SystemdNotifier

if TYPE_CHECKING:
    from loghubd.app import Daemon


async def wait_for_signal() -> None:
    """Return at the first SIGTERM or SIGINT: the production shutdown trigger."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            return


def _cmd_serve(args: argparse.Namespace) -> int:
    from loghubd.server.auth import AccessKeysError
    from loghubd.server.runner import ServeOptions, serve

    opts = ServeOptions(
        data_dir=Path(args.data_dir),
        host=args.host,
        port=args.port,
        access_keys=Path(args.access_keys) if args.access_keys else None,
        default_project=args.default_project,
        max_body_bytes=args.max_body_bytes,
        max_groups_per_logstore=args.max_groups,
        ttl_day_seconds=args.ttl_day_seconds,
        expire_interval=args.expire_interval,
        fsync=args.fsync,
    )
    try:
        anyio.run(lambda: serve(opts, shutdown_trigger=wait_for_signal))
    except AccessKeysError as exc:
        print(f"loghubd serve: --access-keys: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"loghubd serve: cannot listen on {opts.host}:{opts.port}: {exc}", file=sys.stderr)
        return 1
    return 0


def _load_config(path: str | None, overrides: dict[str, object]) -> Config:
    import os

    return config_mod.load(path, os.environ, overrides)


@contextlib.contextmanager
def _startup() -> Iterator[None]:
    """No garbage collection while the daemon starts, then freeze what start-up made.

    Start-up (imports above all) allocates a few hundred thousand objects that live as long as
    the process; the cyclic collector would traverse them again and again while they are made
    (~8 % of the daemon's start-up CPU) and at every full collection afterwards. Freezing moves
    them out of the collector's sight for good; everything allocated later is collected as
    usual."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _cmd_run(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    if args.name:
        overrides["consumer.name"] = args.name
    try:
        cfg = _load_config(args.config, overrides)
    except config_mod.ConfigError as exc:
        print(f"loghubd run: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    loghubd_logging.configure(cfg.log.level, cfg.log.format)
    if args.workers > 1:  # this process supervises N daemon processes
        from loghubd.workers import run_workers

        return run_workers(args.workers, sys.argv[1:], cfg)
    with _startup():
        daemon = _build_daemon(cfg)
    if isinstance(daemon, int):
        return daemon
    from loghubd.source import StartupError

    notify = SystemdNotifier.from_env()
    try:
        code: int = anyio.run(
            lambda: daemon.run(
                wait_for_signal,
                on_ready=notify.send,
                watchdog_interval=notify.watchdog_interval(),
            )
        )
    except BaseExceptionGroup as group:
        matched, rest = group.split(StartupError)
        if matched is None or rest is not None:
            raise
        for err in matched.exceptions:
            print(f"loghubd run: cannot start: {err}", file=sys.stderr)
        return 1
    except StartupError as exc:
        print(f"loghubd run: cannot start: {exc}", file=sys.stderr)
        return 1
    return code


def _build_daemon(cfg: Config) -> Daemon | int:
    """The configured daemon, or exit code 2 when a plugin does not load or the configured
    processor refuses its options."""
    from loghubd.app import Daemon
    from loghubd.plugins.manager import PluginError, Plugins

    try:
        return Daemon(cfg, Plugins())
    except (PluginError, ValueError) as exc:
        print(f"loghubd run: {exc}", file=sys.stderr)
        return 2


def _cmd_produce(args: argparse.Namespace) -> int:
    import os

    from loghubd.produce import ProduceOptions, run

    return run(
        ProduceOptions(
            endpoint=args.endpoint,
            project=args.project,
            logstore=args.logstore,
            count=args.count,
            rate=args.rate,
            group_size=args.group_size,
            keys=args.keys,
            prefix=args.prefix,
            start=args.start,
            create_shards=args.create_shards,
            access_key_id=os.environ.get("LOGHUBD_ACCESS_KEY_ID", ""),
            access_key_secret=os.environ.get("LOGHUBD_ACCESS_KEY_SECRET", ""),
        )
    )


def _cmd_check_config(args: argparse.Namespace) -> int:
    import json

    from loghubd.plugins.manager import PluginError, Plugins

    try:
        cfg = _load_config(args.file, {})
        # Each processor validates its own table: build it the way `run` would (no I/O).
        plugins = Plugins()
        for spec in cfg.sources:
            try:
                plugins.processor(spec.processor.name).create(spec.processor.selected_options)
            except ValueError as exc:
                raise ValueError(f"sources.{spec.name}: {exc}" if cfg.multi else exc) from exc
    except config_mod.ConfigError as exc:
        print(f"{args.file}: invalid configuration:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    except (PluginError, ValueError) as exc:
        print(f"{args.file}: invalid configuration:\n  {exc}", file=sys.stderr)
        return 2
    print(json.dumps(cfg.redacted(), indent=2, default=str))
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from loghubd.status import run_status

    try:
        cfg = _load_config(args.config, {}) if args.config else None
    except config_mod.ConfigError as exc:
        print(f"loghubd status: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    return run_status(args, cfg)


def _cmd_spark_stream(args: argparse.Namespace) -> int:
    try:  # the plugin brings pyspark: import it only for this command
        from loghubd_spark.stream_app import run_cli
    except ImportError as exc:
        print(
            "loghubd spark-stream: needs the loghubd-spark plugin (pip install "
            f"./plugins/loghubd-spark, with pyspark >= 4.2 and Java 17): {exc}",
            file=sys.stderr,
        )
        return 2
    code: int = run_cli(args.config, check=args.check, available_now=args.available_now)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loghubd", description=__doc__)
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("--log-format", default="auto", choices=["auto", "json", "console"])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a local LogHub (SLS-compatible) service")
    serve.add_argument("--data-dir", default="./.loghubd-data", help="where SQLite data lives")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=7100)
    serve.add_argument(
        "--access-keys",
        metavar="FILE",
        help="TOML file of [[keys]] id/secret; without it no signature is checked",
    )
    serve.add_argument(
        "--default-project",
        default="",
        help="project for requests whose Host names none (created on demand)",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=10 * 1024 * 1024,
        help="largest raw PutLogs body accepted",
    )
    serve.add_argument(
        "--max-groups", type=int, default=30, help="consumer groups allowed per logstore"
    )
    serve.add_argument(
        "--ttl-day-seconds",
        type=float,
        default=86400.0,
        help="seconds in one TTL day (shrink it to test expiry)",
    )
    serve.add_argument(
        "--expire-interval", type=float, default=60.0, help="seconds between TTL expiry sweeps"
    )
    serve.add_argument(
        "--fsync",
        action="store_true",
        help="fsync every commit (survives power loss, not just kill -9)",
    )
    serve.set_defaults(func=_cmd_serve)

    run = sub.add_parser("run", help="run the consumer daemon")
    run.add_argument("-c", "--config", required=True, help="TOML config file")
    run.add_argument("--name", help="consumer name (overrides consumer.name)")
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run N consumer processes in the same group, restarted if they die",
    )
    run.set_defaults(func=_cmd_run)

    produce = sub.add_parser(
        "produce",
        help="write synthetic logs (unique ids), optionally keyed and rate-limited",
        description="Credentials, if the service checks them, come from LOGHUBD_ACCESS_KEY_ID "
        "and LOGHUBD_ACCESS_KEY_SECRET.",
    )
    produce.add_argument("--endpoint", default="http://127.0.0.1:7100")
    produce.add_argument("--project", required=True)
    produce.add_argument("--logstore", required=True)
    produce.add_argument("--count", type=int, default=10_000, help="logs to write")
    produce.add_argument("--rate", type=float, default=0.0, help="logs/s, 0 = unlimited")
    produce.add_argument("--group-size", type=int, default=100, help="logs per log group")
    produce.add_argument(
        "--keys", type=int, default=0, help="route by hash of N distinct keys (0: load-balanced)"
    )
    produce.add_argument("--prefix", default="", help="prefix of every log id")
    produce.add_argument("--start", type=int, default=0, help="first id number")
    produce.add_argument(
        "--create-shards",
        type=int,
        default=0,
        metavar="N",
        help="create the project and logstore with N shards if missing",
    )
    produce.set_defaults(func=_cmd_produce)

    check = sub.add_parser("check-config", help="validate a config file; print it, secrets masked")
    check.add_argument("file")
    check.set_defaults(func=_cmd_check_config)

    status = sub.add_parser(
        "status", help="describe a consumer group: each shard's owner, state, checkpoint, lag"
    )
    status.add_argument(
        "-c",
        "--config",
        help="take endpoint, project, logstore, credentials and group from this config file",
    )
    status.add_argument("--endpoint")
    status.add_argument("--project")
    status.add_argument("--logstore")
    status.add_argument("--group")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_cmd_status)

    stream = sub.add_parser(
        "spark-stream",
        help="run a Spark Structured Streaming pipeline over a logstore (the loghubd-spark plugin)",
        description="Reads [source], [consumer] and [spark_stream] (or [processor.spark]) of the "
        "config file; see plugins/loghubd-spark/README.md.",
    )
    stream.add_argument("-c", "--config", required=True, help="TOML config file")
    stream.add_argument(
        "--available-now", action="store_true", help="read what is there now, then stop"
    )
    stream.add_argument(
        "--check", action="store_true", help="validate the file, print it (secrets masked)"
    )
    stream.set_defaults(func=_cmd_spark_stream)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logs_are_output = args.func in (_cmd_run, _cmd_serve, _cmd_spark_stream)
    loghubd_logging.configure(
        args.log_level, args.log_format, stream=sys.stdout if logs_are_output else sys.stderr
    )
    try:
        code: int = args.func(args)
    except BrokenPipeError:  # e.g. `loghubd status | head`
        return 0
    return code
