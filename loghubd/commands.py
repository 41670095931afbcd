"""What each core command does: `serve`, `run`, `produce`, `check-config`, `plugins`,
`new-plugin`. The command line itself (parsing, `main`, how errors are reported) is
`loghubd.cli`; the operator tools (`group`, `status`, `dead-letters`) are `loghubd.admin`.
"""

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
from typing import TYPE_CHECKING

import anyio
import structlog

from loghubd import config as config_mod
from loghubd import logging as loghubd_logging
from loghubd.admin.errors import FAILED, UNREACHABLE, USAGE, UserError
from loghubd.config import Config
from loghubd.ops.systemd import SystemdNotifier
from loghubd.plugins.api import SinkUnreachable

if TYPE_CHECKING:
    from loghubd import shutdown
    from loghubd.app import Daemon
    from loghubd.plugins.manager import BrokenPlugin, Plugins, ProcessorInfo
    from loghubd.rollback import ReloadState
    from loghubd.server.runner import ServeOptions


SERVE_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_early_stops: list[int] = []  # stop signals that came before `wait_for_signal` listened


def _remember_stop(signum: int, _frame: object) -> None:
    _early_stops.append(signum)


async def wait_for_signal() -> None:
    """`loghubd serve`'s shutdown trigger: return at the first SIGTERM, SIGINT or SIGHUP,
    including one that came while it started (`cmd_serve` remembers those). SIGHUP (a
    terminal's hang-up; serve has no file to reload) stops it cleanly too, where its default
    action would end the process at once, closing no connection."""
    from loghubd.shutdown import stop_signals_after_the_first

    with anyio.open_signal_receiver(*SERVE_STOPS) as signals:
        signum = _early_stops[0] if _early_stops else await signals.__anext__()
        structlog.get_logger("loghubd.serve").info("stopping", signal=signal.Signals(signum).name)
    stop_signals_after_the_first()  # the receiver gave the default actions back


def cmd_serve(args: argparse.Namespace) -> int:
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
        metrics_open=args.metrics_open,
        service_hosts=(*DEFAULT_SERVICE_HOSTS, *(h.lower().rstrip(".") for h in args.service_host)),
        max_inflight_body_bytes=args.max_inflight_body_bytes,
        max_connections=args.max_connections,
        max_connections_per_address=args.max_connections_per_address,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
    )
    problem = _serve_limits_problem(opts)
    if problem:
        print(f"loghubd serve: {problem}", file=sys.stderr)
        return USAGE
    from loghubd.server.datadir import DataDirInUse, DataDirUnusable
    from loghubd.server.runner import listen_problem

    for stop in SERVE_STOPS:  # until `wait_for_signal` listens: a stop then is not lost
        signal.signal(stop, _remember_stop)
    try:  # serve() locks and checks the data directory before it binds the port
        anyio.run(lambda: serve(opts, shutdown_trigger=wait_for_signal))
        from loghubd.shutdown import exiting

        exiting(0)  # a stop's late second copy meets the exit, not the default action
    except AccessKeysError as exc:
        print(f"loghubd serve: --access-keys: {exc}", file=sys.stderr)
        return 2
    except DataDirUnusable as exc:
        print(f"loghubd serve: {exc}", file=sys.stderr)
        return USAGE
    except DataDirInUse as exc:  # a local resource another server holds, as a taken port
        print(f"loghubd serve: {exc}", file=sys.stderr)
        return UNREACHABLE
    except OSError as exc:
        print(f"loghubd serve: {listen_problem(opts.host, opts.port, exc)}", file=sys.stderr)
        return UNREACHABLE  # docs/operations.md, "Exit codes and errors": a port is taken
    return 0


def _serve_limits_problem(opts: ServeOptions) -> str:
    """What is wrong with the request limits of `loghubd serve`, naming the flag ("" none)."""
    if not 0 <= opts.port <= 65535:
        return f"--port must be between 0 and 65535, not {opts.port}"
    for flag, count in (
        ("--max-body-bytes", opts.max_body_bytes),
        ("--max-groups", opts.max_groups_per_logstore),
    ):
        if count < 1:
            return f"{flag} must be at least 1, not {count}"
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
    if opts.max_connections_per_address < 0:
        return (
            "--max-connections-per-address must be 0 (no limit) or more, "
            f"not {opts.max_connections_per_address}"
        )
    return ""


def _load_config(path: str | None, overrides: dict[str, object]) -> Config:

    return config_mod.load(path, os.environ, overrides)


@contextlib.contextmanager
def startup() -> Iterator[None]:
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


class _StartFailed(Exception):
    """`loghubd run` could not start: the exit code, and what stderr says."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def cmd_run(args: argparse.Namespace) -> int:
    from loghubd import rollback, shutdown

    shutdown.hold_reloads()
    handed = rollback.take(os.environ)  # set by a reload's exec
    try:
        return _run(args, handed)
    except _StartFailed as failed:
        print(failed.message, file=sys.stderr)
        if handed is not None and handed.failed is None:  # a reload's image, not a rollback's
            shutdown.roll_back(handed, failed.message.removeprefix("loghubd run: "))
        return failed.code


def _run(args: argparse.Namespace, handed: ReloadState | None) -> int:
    from loghubd import shutdown

    overrides: dict[str, object] = {}
    if args.name:
        overrides["consumer.name"] = args.name
    origin = args.config or "<none>"
    try:
        if handed is not None and handed.failed is not None:  # a reload that did not start
            text, origin = handed.previous, f"{origin} (as it ran before the failed reload)"
        else:
            text = config_mod.read_text(args.config) if args.config else ""
        cfg = config_mod.loads(text, os.environ, overrides, origin=origin)
    except config_mod.ConfigError as exc:
        raise _StartFailed(USAGE, _invalid(f"({origin})", exc)) from None
    # A --log-level/--log-format flag wins over the config's [log].
    loghubd_logging.configure(
        args.log_level or cfg.log.level,
        args.log_format or cfg.log.format,
        tracebacks=bool(getattr(args, "debug", False)),
    )
    if args.workers < 1:
        print(f"loghubd run: --workers must be at least 1, not {args.workers}", file=sys.stderr)
        return USAGE
    if args.workers > 1:  # this process supervises N daemon processes
        from loghubd.workers import run_workers

        supervised = run_workers(args.workers, sys.argv[1:], cfg)
        shutdown.exiting(supervised)
        return supervised
    with startup():
        daemon = _build_daemon(cfg, args.debug, origin)
    if handed is not None and handed.failed is not None:
        reason = f"the reloaded configuration did not start: {handed.failed}"
        daemon.config_reloads.checked(reason, handed.failed_at)
        structlog.get_logger("loghubd.shutdown").warning(
            "reload_rolled_back", reason=reason, config=args.config
        )
    notify = SystemdNotifier.from_env()
    trigger = shutdown.Trigger(args.config, notify.send, daemon.config_reloads.checked)
    code = _run_daemon(daemon, cfg, trigger, notify)
    if trigger.reload:
        # Shards parked on a failure do not hold a reload up: it may be what cures them.
        shutdown.reload_after(0 if daemon.failed_shards_only() else code, text)
    if daemon.abandoned():  # their worker threads would be joined at exit, maybe for ever
        shutdown.exit_now(code, "exiting_without_stuck_threads", shards=daemon.abandoned())
    shutdown.exiting(code)
    return code


def _invalid(where: str, exc: config_mod.ConfigError) -> str:
    """`run`'s refusal of a configuration: a header, then each problem on its own line (as
    `check-config` prints them)."""
    header = f"loghubd run: invalid configuration {where}".rstrip() + ":"
    return "\n".join([header, *(f"  {problem}" for problem in exc.problems)])


def _run_daemon(
    daemon: Daemon, cfg: Config, trigger: shutdown.Trigger, notify: SystemdNotifier
) -> int:
    """Run `daemon` until it stops; its exit code. A failure to start: `_StartFailed`."""
    from loghubd.app import StartupError

    try:
        code: int = anyio.run(
            lambda: daemon.run(
                trigger,
                on_ready=lambda state: notify.send(trigger.systemd_state(state)),
                watchdog_interval=notify.watchdog_interval(),
            )
        )
    except BaseExceptionGroup as group:
        if _port_taken(group):
            raise _StartFailed(
                UNREACHABLE,
                f"loghubd run: ops.listen {cfg.ops.listen} is already in use (another loghubd "
                "run?): stop that process, or set ops.listen (LOGHUBD_OPS__LISTEN)",
            ) from None
        from loghubd.errors import leaves
        from loghubd.ops.server import ListenError

        listen, _ = group.split(ListenError)
        if listen is not None:
            reason = leaves(listen)[0]
            why = reason.strerror if isinstance(reason, OSError) else str(reason)
            raise _StartFailed(
                UNREACHABLE,
                f"loghubd run: ops.listen {cfg.ops.listen} cannot be listened on: "
                f"{why}; give an address of this host (LOGHUBD_OPS__LISTEN)",
            ) from None
        matched, rest = group.split(StartupError)
        if matched is None or rest is not None:
            raise
        errors = matched.exceptions
        codes = {err.exit_code if isinstance(err, StartupError) else 1 for err in errors}
        raise _StartFailed(
            codes.pop() if len(codes) == 1 else 1,
            "\n".join(f"loghubd run: cannot start: {err}" for err in errors),
        ) from None
    except StartupError as exc:
        raise _StartFailed(exc.exit_code, f"loghubd run: cannot start: {exc}") from None
    return code


def _port_taken(exc: BaseException) -> bool:
    import errno

    from loghubd.errors import leaves

    return any(isinstance(e, OSError) and e.errno == errno.EADDRINUSE for e in leaves(exc))


def _build_daemon(cfg: Config, debug: bool = False, origin: str = "") -> Daemon:
    """The configured daemon; `_StartFailed` (exit code 2) when the plugins are inconsistent,
    the configured processor is not installed or refuses its options. A plugin that does not
    load is logged and left out: the daemon needs only the processors it runs."""
    from loghubd.app import Daemon
    from loghubd.plugins.manager import PluginError, Plugins

    try:
        plugins = Plugins()
        _plugin_tracebacks(plugins, debug)
        _refuse_unknown_processors(cfg, plugins)
        for broken in plugins.broken:
            structlog.get_logger("loghubd.plugins").warning(
                "plugin_not_loaded", problem=str(broken)
            )
        return Daemon(cfg, plugins)
    except config_mod.ConfigError as exc:  # before ValueError: it is one
        _traceback_if(debug, exc)
        raise _StartFailed(USAGE, _invalid(f"({origin})" if origin else "", exc)) from None
    except (PluginError, ValueError) as exc:  # not always the file's fault (HTTP_PROXY)
        _traceback_if(debug, exc)
        raise _StartFailed(USAGE, f"loghubd run: {exc}") from None
    except SinkUnreachable as exc:  # the configuration may be right: a restart may succeed
        _traceback_if(debug, exc)
        raise _StartFailed(UNREACHABLE, f"loghubd run: cannot start: {exc}") from None


def _refuse_unknown_processors(cfg: Config, plugins: Plugins) -> None:
    """`refuse_unknown_processors`, and when an entry point did not load, each of those too:
    a processor that is missing is then most likely one of theirs."""
    from loghubd.plugins.configured import refuse_unknown_processors

    try:
        refuse_unknown_processors(cfg, plugins.processors())
    except config_mod.ConfigError as exc:
        if not plugins.broken:
            raise
        raise config_mod.ConfigError([*exc.problems, *plugins.missing_hints()]) from exc


def _plugin_tracebacks(plugins: Plugins, debug: bool) -> None:
    """With --debug, why each entry point that does not load failed, on stderr."""
    if debug:
        plugins.print_tracebacks()


def _traceback_if(debug: bool, exc: BaseException) -> None:
    """With --debug, `exc`'s traceback on stderr (the error itself is said in one line)."""
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)


def cmd_produce(args: argparse.Namespace) -> int:

    from loghubd.admin.connect import env_credentials
    from loghubd.admin.errors import check_endpoint
    from loghubd.produce import ProduceOptions, run
    from loghubd.protocol.signing import Credentials

    cfg = config_or_none(args.config)
    src = cfg.source if cfg is not None else None
    endpoint = args.endpoint or (src.endpoint if src else "http://127.0.0.1:7100")
    project = args.project or (src.project if src else "")
    logstore = args.logstore or (src.logstore if src else "")
    if not project or not logstore:
        raise UserError(USAGE, "--project and --logstore required, or -c CONFIG to take them")
    check_endpoint(endpoint, project=project)
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
            request_timeout=args.timeout,
        ),
        progress_every=args.progress,
    )


def cmd_check_config(args: argparse.Namespace) -> int:
    import json

    from loghubd.plugins.configured import naming_source
    from loghubd.plugins.manager import PluginError, Plugins
    from loghubd.sls.endpoint import project_in_host

    if args.file and args.config_file and args.file != args.config_file:
        raise UserError(
            USAGE, f"two config files ({args.file} and -c {args.config_file}): give one"
        )
    args.file = args.file or args.config_file
    if not args.file:
        raise UserError(USAGE, "which config file? loghubd check-config FILE (or -c FILE)")
    try:
        cfg = _load_config(args.file, {})
        # Each processor validates its own table: build it the way `run` would (with what it
        # checks at start: an output directory made and probed, a database connected to).
        plugins = Plugins()
        _plugin_tracebacks(plugins, args.debug)
        _refuse_unknown_processors(cfg, plugins)
        for broken in plugins.broken:  # not needed by this file: it may still run
            print(f"{args.file}: warning: {broken}", file=sys.stderr)
        for spec in cfg.sources:
            try:
                with naming_source(cfg, spec):
                    plugins.create(spec.processor.name, spec.processor.selected_options)
            except config_mod.ConfigError:
                raise
            except ValueError as exc:
                raise config_mod.ConfigError([str(exc)]) from exc
    except config_mod.ConfigError as exc:
        _traceback_if(args.debug, exc)
        print(f"{args.file}: invalid configuration:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    except (PluginError, ValueError) as exc:
        _traceback_if(args.debug, exc)
        print(f"{args.file}: invalid configuration:\n  {exc}", file=sys.stderr)
        return 2
    except SinkUnreachable as exc:  # not a verdict on the file: where it points is down
        _traceback_if(args.debug, exc)
        print(f"{args.file}: cannot check: {exc}", file=sys.stderr)
        return UNREACHABLE
    for warning in cfg.warnings:  # accepted, but to be changed (run logs them at start)
        print(f"{args.file}: warning: {warning}", file=sys.stderr)
    listen = cfg.ops.listen_warning()  # true here, maybe not where the file runs: exit 0
    if listen:
        print(f"{args.file}: warning: {listen}", file=sys.stderr)
    for spec in cfg.sources:  # maybe right: a project may be named like the endpoint's host
        named = project_in_host(spec.source.endpoint, spec.source.project)
        if named:
            print(f"{args.file}: warning: {spec.keys}.endpoint: {named}", file=sys.stderr)
    print(json.dumps(cfg.redacted(), indent=2, default=str))
    return 0


def config_or_none(path: str | None) -> Config | None:
    """The -c config of an operator command (None without -c); bad config: exit 2."""
    if not path:
        return None
    try:
        return _load_config(path, {})
    except config_mod.ConfigError as exc:
        raise UserError(
            USAGE, f"{path}: invalid configuration: {'; '.join(exc.problems)}"
        ) from None


def cmd_plugins(args: argparse.Namespace) -> int:
    from loghubd.plugins.manager import PluginError, Plugins

    try:
        plugins = Plugins()
    except PluginError as exc:
        _traceback_if(args.debug, exc)
        print(f"loghubd plugins: {exc}", file=sys.stderr)
        return 2
    _plugin_tracebacks(plugins, args.debug)
    infos = plugins.describe()
    if args.json:
        listed = [{**dataclasses.asdict(i), "error": None} for i in infos]
        listed += [_broken_json(b) for b in plugins.broken]
        print(json.dumps(listed, indent=1, default=dict))
    else:
        _print_plugins(infos, plugins.broken)
    if plugins.broken:
        names = ", ".join(sorted({b.origin.distribution for b in plugins.broken}))
        print(f"loghubd plugins: some plugins do not load: {names}", file=sys.stderr)
        return FAILED
    return 0


def _print_plugins(infos: list[ProcessorInfo], broken: Sequence[BrokenPlugin]) -> None:
    """`loghubd plugins`' text: each processor and its options, then each plugin that does not
    load, marked BROKEN with why and the fix."""
    for info in infos:
        print(f"{info.name}  ({info.distribution} {info.version})  {info.description}")
        width = max((len(k) for k in info.options), default=0)
        for key, meaning in info.options.items():
            print(f"    {key.ljust(width)}  {meaning}")
        if not info.options:
            print("    (no options declared)")
    for b in broken:
        print(f"BROKEN  {b}")


def _broken_json(broken: BrokenPlugin) -> dict[str, object]:
    """A plugin that does not load in `loghubd plugins --json`: a processor's keys (no name,
    since its processors are unknown) and `error`, the line the text output prints."""
    o = broken.origin
    return {
        "name": None,
        "description": "",
        "distribution": o.distribution,
        "version": o.version,
        "plugin": o.plugin,
        "options": {},
        "error": str(broken),
    }


def cmd_new_plugin(args: argparse.Namespace) -> int:
    from loghubd.plugins import scaffold

    try:
        made = scaffold.files(args.distribution, args.processor)
    except ValueError as exc:
        print(f"loghubd new-plugin: {exc}", file=sys.stderr)
        return 2
    root = Path(args.dir or args.distribution)
    scaffold.write(root, made)  # UserError: one line naming the path (exit 2, or 1)
    _dist, _package, name = scaffold.names(args.distribution, args.processor)
    print(f"{root}: the processor {name!r}; next: pip install -e '{root}[test]' && pytest {root}")
    return 0
