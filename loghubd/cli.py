"""Command line: `loghubd serve`, `loghubd run`, and the operator tools."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from loghubd import __version__
from loghubd import config as config_mod
from loghubd import logging as loghubd_logging
from loghubd.admin.errors import FAILED, UNREACHABLE, USAGE, UserError
from loghubd.admin.helpfmt import DefaultsFormatter
from loghubd.config import Config
from loghubd.ops.systemd import SystemdNotifier

if TYPE_CHECKING:
    from loghubd import CliCommand
    from loghubd.app import Daemon
    from loghubd.server.runner import ServeOptions

Fmt = DefaultsFormatter


async def wait_for_signal() -> None:
    """Return at the first SIGTERM or SIGINT: the production shutdown trigger."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            return


def _cmd_serve(args: argparse.Namespace) -> int:
    from loghubd.server.api import DEFAULT_SERVICE_HOSTS
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
        console_token=args.console_token,
        console_open=args.console_open,
        service_hosts=(*DEFAULT_SERVICE_HOSTS, *(h.lower().rstrip(".") for h in args.service_host)),
        max_inflight_body_bytes=args.max_inflight_body_bytes,
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
    )
    problem = _serve_limits_problem(opts)
    if problem:
        print(f"loghubd serve: {problem}", file=sys.stderr)
        return USAGE
    try:  # the data directory first, so a problem with it is not taken for the port's
        opts.data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile_in(opts.data_dir):
            pass
    except OSError as exc:
        print(
            f"loghubd serve: --data-dir {opts.data_dir} cannot be used: "
            f"{exc.strerror or exc}; pick a writable directory",
            file=sys.stderr,
        )
        return USAGE
    try:
        anyio.run(lambda: serve(opts, shutdown_trigger=wait_for_signal))
    except AccessKeysError as exc:
        print(f"loghubd serve: --access-keys: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"loghubd serve: cannot listen on {opts.host}:{opts.port}: {exc}", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def tempfile_in(directory: Path) -> Iterator[None]:
    """Prove `directory` is writable: make and remove a file there."""
    import tempfile

    with tempfile.NamedTemporaryFile(dir=directory, prefix=".loghubd-probe-"):
        yield


def _serve_limits_problem(opts: ServeOptions) -> str:
    """What is wrong with the request limits of `loghubd serve`, naming the flag ("" none)."""
    wire_cap = opts.max_body_bytes + 1024 * 1024  # a compressed body may exceed the raw cap
    if opts.max_inflight_body_bytes < wire_cap:
        return (
            f"--max-inflight-body-bytes {opts.max_inflight_body_bytes} must be at least "
            f"--max-body-bytes + 1 MiB ({wire_cap}), or no full-size body could be read"
        )
    for flag, value in (
        ("--max-connections", opts.max_connections),
        ("--header-timeout", opts.header_timeout),
        ("--body-timeout", opts.body_timeout),
    ):
        if value <= 0:
            return f"{flag} must be positive, not {value}"
    return ""


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
    # A --log-level/--log-format flag wins over the config's [log].
    loghubd_logging.configure(args.log_level or cfg.log.level, args.log_format or cfg.log.format)
    if args.workers > 1:  # this process supervises N daemon processes
        from loghubd.workers import run_workers

        return run_workers(args.workers, sys.argv[1:], cfg)
    with _startup():
        daemon = _build_daemon(cfg)
    if isinstance(daemon, int):
        return daemon
    from loghubd import shutdown
    from loghubd.app import StartupError

    notify = SystemdNotifier.from_env()
    try:
        code: int = anyio.run(
            lambda: daemon.run(
                shutdown.first_signal,
                on_ready=notify.send,
                watchdog_interval=notify.watchdog_interval(),
            )
        )
    except BaseExceptionGroup as group:
        if _port_taken(group):
            print(
                f"loghubd run: ops.listen {cfg.ops.listen} is already in use (another loghubd "
                "run?): stop that process, or set ops.listen (LOGHUBD_OPS__LISTEN)",
                file=sys.stderr,
            )
            return UNREACHABLE
        matched, rest = group.split(StartupError)
        if matched is None or rest is not None:
            raise
        for err in matched.exceptions:
            print(f"loghubd run: cannot start: {err}", file=sys.stderr)
        return 1
    except StartupError as exc:
        print(f"loghubd run: cannot start: {exc}", file=sys.stderr)
        return 1
    if daemon.abandoned():  # their worker threads would be joined at exit, maybe for ever
        shutdown.exit_now(code, "exiting_without_stuck_threads", shards=daemon.abandoned())
    return code


def _port_taken(exc: BaseException) -> bool:
    import errno

    from loghubd.errors import leaves

    return any(isinstance(e, OSError) and e.errno == errno.EADDRINUSE for e in leaves(exc))


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

    from loghubd.admin.connect import env_credentials
    from loghubd.admin.errors import check_endpoint
    from loghubd.produce import ProduceOptions, run
    from loghubd.protocol.signing import Credentials

    cfg = _config_or_none(args.config)
    src = cfg.source if cfg is not None else None
    endpoint = args.endpoint or (src.endpoint if src else "http://127.0.0.1:7100")
    project = args.project or (src.project if src else "")
    logstore = args.logstore or (src.logstore if src else "")
    if not project or not logstore:
        raise UserError(USAGE, "--project and --logstore required, or -c CONFIG to take them")
    check_endpoint(endpoint)
    creds = env_credentials(os.environ)
    if src is not None and not creds.access_key_id:
        if src.credentials != "static":
            raise UserError(
                USAGE,
                f"-c {args.config}: produce signs with static keys only (source.credentials "
                f"is {src.credentials!r}): set LOGHUBD_SOURCE__ACCESS_KEY_ID and _SECRET",
            )
        creds = Credentials(src.access_key_id, src.access_key_secret)
    return run(
        ProduceOptions(
            endpoint=endpoint,
            project=project,
            logstore=logstore,
            count=args.count,
            rate=args.rate,
            group_size=args.group_size,
            keys=args.keys,
            prefix=args.prefix,
            start=args.start,
            create_shards=args.create_shards,
            access_key_id=creds.access_key_id,
            access_key_secret=creds.access_key_secret,
        ),
        progress_every=args.progress,
    )


def _cmd_check_config(args: argparse.Namespace) -> int:
    import json

    from loghubd.plugins.manager import PluginError, Plugins

    args.file = args.file or args.config_file
    if not args.file:
        raise UserError(USAGE, "which config file? loghubd check-config FILE (or -c FILE)")
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


def _config_or_none(path: str | None) -> Config | None:
    """The -c config of an operator command (None without -c); bad config: exit 2."""
    if not path:
        return None
    try:
        return _load_config(path, {})
    except config_mod.ConfigError as exc:
        raise UserError(
            USAGE, f"{path}: invalid configuration: {'; '.join(exc.problems)}"
        ) from None


def _cmd_plugins(args: argparse.Namespace) -> int:
    from loghubd.plugins.manager import PluginError, Plugins

    try:
        infos = Plugins().describe()
    except PluginError as exc:
        print(f"loghubd plugins: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([dataclasses.asdict(i) for i in infos], indent=1, default=dict))
        return 0
    for info in infos:
        print(f"{info.name}  ({info.distribution} {info.version})  {info.description}")
        width = max((len(k) for k in info.options), default=0)
        for key, meaning in info.options.items():
            print(f"    {key.ljust(width)}  {meaning}")
        if not info.options:
            print("    (no options declared)")
    return 0


def _cmd_new_plugin(args: argparse.Namespace) -> int:
    from loghubd.plugins import scaffold

    try:
        made = scaffold.files(args.distribution, args.processor)
    except ValueError as exc:
        print(f"loghubd new-plugin: {exc}", file=sys.stderr)
        return 2
    root = Path(args.dir or args.distribution)
    if root.exists():
        print(f"loghubd new-plugin: {root} already exists", file=sys.stderr)
        return 2
    for relative, text in made.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _dist, _package, name = scaffold.names(args.distribution, args.processor)
    print(f"{root}: the processor {name!r}; next: pip install -e '{root}[test]' && pytest {root}")
    return 0


EPILOG = """exit codes: 0 done; 1 failed (the service refused, or some work failed); 2 usage or
configuration error; 3 not found (project, logstore, group, shard); 4 cannot reach the
service, or a local port is taken; 5 refused for safety (live consumers: --force; no
confirmation: --yes); 130 interrupted. --debug prints the traceback of an error."""


def _core_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The command line of the core's commands, and its subparsers (to add plugins')."""
    parser = argparse.ArgumentParser(
        prog="loghubd",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"loghubd {__version__}")
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="default: info (run: log.level of the config; this flag wins)",
    )
    parser.add_argument(
        "--log-format",
        choices=["auto", "json", "console"],
        help="default: auto (run: log.format of the config; this flag wins)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="print the Python traceback of an error"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve", formatter_class=Fmt, help="run a local LogHub (SLS-compatible) service"
    )
    serve.add_argument("--data-dir", default="./.loghubd-data", help="where SQLite data lives")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=7100, help="port to listen on")
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
        "--max-inflight-body-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="request body bytes read or held at once, server-wide; past it a request is "
        "answered 503 ServerBusy (which SDKs retry) before its body is read",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=512,
        help="open connections at once; past it a new one is answered 503 ServerBusy",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        default=20.0,
        help="seconds a client may take to send a request line and headers",
    )
    serve.add_argument(
        "--body-timeout",
        type=float,
        default=120.0,
        help="seconds a client may take to send one request body (10 MB at 1 Mbit/s: ~84 s)",
    )
    serve.add_argument(
        "--service-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name that names no project, as SLS's region endpoint "
        "(PROJECT.NAME names project PROJECT); repeatable; IPs, single labels, localhost and "
        "sls.local always are",
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
    serve.add_argument(
        "--console-token",
        default=os.environ.get("LOGHUBD_CONSOLE_TOKEN", ""),
        metavar="TOKEN",
        help="a token that signs in to the web console at /console with full view "
        "(default: $LOGHUBD_CONSOLE_TOKEN)",
    )
    serve.add_argument(
        "--console-open",
        action="store_true",
        help="without --access-keys or --console-token, let the console answer clients "
        "that are not on loopback",
    )
    serve.set_defaults(func=_cmd_serve)

    run = sub.add_parser("run", formatter_class=Fmt, help="run the consumer daemon")
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
        formatter_class=Fmt,
        help="write synthetic logs (unique ids), optionally keyed and rate-limited",
        description="Credentials, if the service checks them, come from "
        "LOGHUBD_SOURCE__ACCESS_KEY_ID and LOGHUBD_SOURCE__ACCESS_KEY_SECRET (the names "
        "`loghubd run` reads). Ctrl-C stops it and still prints the summary.",
    )
    produce.add_argument(
        "-c",
        "--config",
        help="take endpoint, project, logstore and static keys from this config's [source]",
    )
    produce.add_argument(
        "--endpoint",
        help="service URL (default: source.endpoint of -c, else http://127.0.0.1:7100)",
    )
    produce.add_argument("--project", help="project to write to (default: source.project of -c)")
    produce.add_argument("--logstore", help="logstore to write to (default: source.logstore of -c)")
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
    produce.add_argument(
        "--progress",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help='every SECONDS, a line {"written": N, "rate": R} on stderr (0: none)',
    )
    produce.set_defaults(func=_cmd_produce)

    check = sub.add_parser(
        "check-config",
        formatter_class=Fmt,
        help="validate a config file; print it, secrets masked",
    )
    check.add_argument("file", nargs="?", help="the TOML config file (or -c FILE)")
    check.add_argument("-c", "--config", dest="config_file", help="the TOML config file")
    check.set_defaults(func=_cmd_check_config)

    from loghubd.admin import commands as admin_commands
    from loghubd.admin import deadletters

    admin_commands.add_parsers(sub, _config_or_none)
    deadletters.add_parser(sub, _config_or_none)

    plugins = sub.add_parser(
        "plugins",
        formatter_class=Fmt,
        help="list the installed processors: distribution, version, options",
    )
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(func=_cmd_plugins)

    new_plugin = sub.add_parser(
        "new-plugin",
        formatter_class=Fmt,
        help="start a processor plugin package (code, entry point, tests) in a new directory",
    )
    new_plugin.add_argument("distribution", help="its distribution name, e.g. loghubd-audit")
    new_plugin.add_argument("--processor", help="the processor's name (default: from the name)")
    new_plugin.add_argument("--dir", help="where to write it (default: ./<distribution>)")
    new_plugin.set_defaults(func=_cmd_new_plugin)

    return parser, sub


def build_parser(plugin_commands: Sequence[CliCommand] = ()) -> argparse.ArgumentParser:
    """The command line: the core's commands, then `plugin_commands` (`_plugin_commands`)."""
    parser, sub = _core_parser()
    for command in plugin_commands:
        if command.name in sub.choices:
            from loghubd.plugins.manager import PluginError

            raise PluginError(f"a plugin adds the command {command.name!r}, which is already taken")
        added = sub.add_parser(
            command.name,
            formatter_class=Fmt,
            help=command.help,
            description=command.description or None,
        )
        command.arguments(added)
        added.set_defaults(func=command.run, logs_are_output=command.logs_are_output)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand the command line names (None: none, e.g. `loghubd --help`)."""
    words = iter(argv)
    for word in words:
        if word in ("--log-level", "--log-format"):
            next(words, None)  # its value
        elif not word.startswith("-"):
            return word
    return None


def _plugin_commands(argv: Sequence[str]) -> list[CliCommand]:
    """The subcommands plugins add (`loghubd_cli_commands`), loaded only when the command
    line may name one: a core command does not pay for importing every plugin."""
    core = frozenset(_core_parser()[1].choices)
    if _command_word(argv) in core:
        return []
    from loghubd.plugins.manager import PluginError, Plugins

    try:
        return Plugins().cli_commands(taken=core)
    except PluginError as exc:  # a core command still works; a plugin's is then unknown
        print(f"loghubd: plugin commands unavailable: {exc}", file=sys.stderr)
        return []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_plugin_commands(argv)).parse_args(argv)
    logs_are_output = args.func in (_cmd_run, _cmd_serve) or getattr(args, "logs_are_output", False)
    loghubd_logging.configure(
        args.log_level or "info",
        args.log_format or "auto",
        stream=sys.stdout if logs_are_output else sys.stderr,
    )
    try:
        code: int = args.func(args)
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:
        from loghubd.errors import leaves

        if all(isinstance(e, BrokenPipeError) for e in leaves(exc)):
            _quiet_stdout()  # e.g. `loghubd status | head`: the reader had enough
            return 0
        return _report(args, exc)
    return code


def _quiet_stdout() -> None:
    """No second BrokenPipeError when the interpreter flushes stdout at exit."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _report(args: argparse.Namespace, exc: BaseException) -> int:
    """One line naming the problem and the fix, and its exit code; --debug adds the
    traceback. Everything a command did not handle itself ends here."""
    import traceback

    from loghubd.admin.errors import Context, explain

    if args.debug:
        traceback.print_exception(exc, file=sys.stderr)
    ctx = getattr(args, "context", None) or Context(
        endpoint=getattr(args, "endpoint", None) or "",
        project=getattr(args, "project", None) or "",
        logstore=getattr(args, "logstore", None) or "",
        group=getattr(args, "group", None) or "",
    )
    known = explain(exc, ctx)
    if known is None:
        code, line = FAILED, f"unexpected error: {exc!r}"
        if not args.debug:
            line += " (run again with --debug for the traceback, and please report it)"
    else:
        code, line = known
    print(f"loghubd {args.command}: {line}", file=sys.stderr)
    return code
