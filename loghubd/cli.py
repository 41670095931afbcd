"""Command line: parsing, `main`, and how an error reaches the user (one line and an exit
code; `--debug` for the traceback). What each core command does is `loghubd.commands`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from loghubd import __version__, commands
from loghubd import logging as loghubd_logging
from loghubd.admin.errors import FAILED
from loghubd.admin.helpfmt import DefaultsFormatter

if TYPE_CHECKING:
    from loghubd import CliCommand

Fmt = DefaultsFormatter


EPILOG = """exit codes: 0 done; 1 failed (the service refused, or some work failed); 2 usage or
configuration error; 3 not found (project, logstore, group, shard); 4 cannot reach the
service (or, at start, a sink), or a local port is taken; 5 refused for safety (live
consumers: --force; no confirmation: --yes); 130 interrupted. run and serve exit 0 when a
SIGTERM or SIGINT stops them cleanly; run retries a service it cannot reach. --debug prints
the traceback of an error."""


def _core_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The command line of the core's commands, and its subparsers (to add plugins')."""
    parser = argparse.ArgumentParser(
        prog="loghubd",
        description="Consume LogHub (Alibaba Cloud SLS) logstores through consumer groups "
        "(run), serve a local LogHub (serve), and look after groups and what they left aside.",
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
        "--max-connections-per-address",
        type=int,
        default=0,
        help="open connections at once from one client: an IPv4 address or an IPv6 /64 (0: no "
        "limit); past it a new one from that client is answered 503 ServerBusy",
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
        "(default: $LOGHUBD_CONSOLE_TOKEN). A token given here shows in the process list "
        "(ps) to every local user; set LOGHUBD_CONSOLE_TOKEN instead to keep it out",
    )
    serve.add_argument(
        "--console-open",
        action="store_true",
        help="without --access-keys or --console-token, let the console answer clients "
        "that are not on loopback",
    )
    serve.add_argument(
        "--metrics-open",
        action="store_true",
        help="with --access-keys, let /metrics (unsigned; its labels name every project and "
        "logstore) answer clients that are not on loopback",
    )
    serve.set_defaults(func=commands.cmd_serve)

    run = sub.add_parser("run", formatter_class=Fmt, help="run the consumer daemon")
    run.add_argument("-c", "--config", required=True, help="TOML config file")
    run.add_argument("--name", help="consumer name (overrides consumer.name)")
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run N consumer processes in the same group, restarted if they die",
    )
    run.set_defaults(func=commands.cmd_run)

    produce = sub.add_parser(
        "produce",
        formatter_class=Fmt,
        help="write synthetic logs (unique ids), optionally keyed and rate-limited",
        description="Credentials, if the service checks them, come from "
        "LOGHUBD_SOURCE__ACCESS_KEY_ID and LOGHUBD_SOURCE__ACCESS_KEY_SECRET (the names "
        "`loghubd run` reads). Ctrl-C stops it and still prints the summary. A negative "
        "number (or --group-size 0) is refused, exit 2.",
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
        "--timeout",
        type=float,
        default=30.0,
        help="seconds for each call, retries included: how long a service that does not "
        "answer is waited for (above 0)",
    )
    produce.add_argument(
        "--progress",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help='every SECONDS, a line {"written": N, "rate": R} on stderr (0: none)',
    )
    produce.set_defaults(func=commands.cmd_produce)

    check = sub.add_parser(
        "check-config",
        formatter_class=Fmt,
        help="validate a config file; print it, secrets masked",
        description="Validate a config file and print it, secrets masked. Each processor is "
        "built as `run` builds it, so what it checks at start is checked here too: a "
        "`parquet` output directory is created and probed, a `postgres` database is "
        "connected to (and its table created with create_table = true).",
    )
    check.add_argument("file", nargs="?", help="the TOML config file (or -c FILE)")
    check.add_argument("-c", "--config", dest="config_file", help="the TOML config file")
    check.set_defaults(func=commands.cmd_check_config)

    from loghubd.admin import commands as admin_commands
    from loghubd.admin import deadletters

    admin_commands.add_parsers(sub, commands.config_or_none)
    deadletters.add_parser(sub, commands.config_or_none)

    plugins = sub.add_parser(
        "plugins",
        formatter_class=Fmt,
        help="list the installed processors: distribution, version, options",
    )
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(func=commands.cmd_plugins)

    new_plugin = sub.add_parser(
        "new-plugin",
        formatter_class=Fmt,
        help="start a processor plugin package (code, entry point, tests) in a new directory",
    )
    new_plugin.add_argument("distribution", help="its distribution name, e.g. loghubd-audit")
    new_plugin.add_argument("--processor", help="the processor's name (default: from the name)")
    new_plugin.add_argument("--dir", help="where to write it (default: ./<distribution>)")
    new_plugin.set_defaults(func=commands.cmd_new_plugin)

    return parser, sub


def build_parser(plugin_commands: Sequence[CliCommand] = ()) -> argparse.ArgumentParser:
    """The command line: the core's commands, then `plugin_commands` (`_plugin_commands`)."""
    parser, sub = _core_parser()
    _add_plugin_commands(sub, plugin_commands)
    return parser


def _add_plugin_commands(sub: Any, plugin_commands: Sequence[CliCommand]) -> None:
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


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand the command line names (None: none, e.g. `loghubd --help`)."""
    words = iter(argv)
    for word in words:
        if word in ("--log-level", "--log-format"):
            next(words, None)  # its value
        elif not word.startswith("-"):
            return word
    return None


def _plugin_commands(argv: Sequence[str], core: frozenset[str]) -> list[CliCommand]:
    """The subcommands plugins add (`loghubd_cli_commands`), loaded only when the command
    line may name one (not one of the `core` commands): a core command does not pay for
    importing every plugin."""
    if _command_word(argv) in core:
        return []
    from loghubd.plugins.manager import PluginError, Plugins

    try:
        plugins = Plugins()
        commands = plugins.cli_commands(taken=core)
    except PluginError as exc:  # a core command still works; a plugin's is then unknown
        print(f"loghubd: plugin commands unavailable: {exc}", file=sys.stderr)
        return []
    if "--debug" in argv:
        plugins.print_tracebacks()
    for broken in plugins.broken:  # the others' commands work; this one's may be missing
        print(f"loghubd: warning: {broken}", file=sys.stderr)
    return commands


def prefer_jemalloc(environ: MutableMapping[str, str], platform: str) -> None:
    """Arrow's allocator for this process: jemalloc, unless the operator chose one.

    pyarrow's Linux wheels default to mimalloc, which hands freed blocks back to the kernel
    soon after: a daemon converting and writing batches then faults in (and the kernel zeroes)
    fresh memory for every batch. Profiled on a `parquet` daemon draining 2 M logs, 24 % of its
    CPU was `clear_page` under those faults with mimalloc, 3.5 % with jemalloc; over 8
    interleaved drains each, the `arrow` and `parquet` daemons' CPU medians fell 19 % and 16 %,
    their peak RSS 87 and 36 MB (bench/README.md, "Arrow's allocator").
    Arrow reads ARROW_DEFAULT_MEMORY_POOL once, at its first allocation, so this runs before
    anything imports pyarrow; `ARROW_DEFAULT_MEMORY_POOL=mimalloc` (or `system`) overrides it.
    Only on Linux, where the wheels are built with jemalloc.
    """
    if platform.startswith("linux"):
        environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")


def main(argv: list[str] | None = None) -> int:
    prefer_jemalloc(os.environ, sys.platform)
    argv = sys.argv[1:] if argv is None else argv
    from loghubd.admin.commands import join_dash_values

    argv = join_dash_values(argv)
    parser, sub = _core_parser()  # built once: every command's start-up pays for it
    _add_plugin_commands(sub, _plugin_commands(argv, frozenset(sub.choices)))
    args = parser.parse_args(argv)
    logs_are_output = args.func in (commands.cmd_run, commands.cmd_serve) or getattr(
        args, "logs_are_output", False
    )
    loghubd_logging.configure(
        args.log_level or "info",
        args.log_format or "auto",
        stream=sys.stdout if logs_are_output else sys.stderr,
        tracebacks=args.debug,  # serve's failure lines too (run sets up its own, the same)
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
    # `loghubd group reset: ...`: the subcommand too, where there is one
    sub = getattr(args, "group_command", None) if args.command == "group" else None
    where = f"{args.command} {sub}" if sub else args.command
    print(f"loghubd {where}: {line}", file=sys.stderr)
    return code
