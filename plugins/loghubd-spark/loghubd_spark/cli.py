"""`loghubd spark-stream` and `loghubd spark-archive`: the plugin's subcommands (the
`loghubd_cli_commands` hook).

The core CLI does not know Spark: it lists this command because the plugin declares it, and
runs it through `CliCommand.run`. pyspark is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loghubd import CliCommand


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", required=True, help="TOML config file")
    parser.add_argument(
        "--available-now", action="store_true", help="read what is there now, then stop"
    )
    parser.add_argument(
        "--check", action="store_true", help="validate the file, print it (secrets masked)"
    )


def _run(args: argparse.Namespace) -> int:
    try:  # the plugin brings pyspark: import it only for this command
        from loghubd_spark.stream_app import run_cli
    except ImportError as exc:
        print(
            "loghubd spark-stream: needs the loghubd-spark plugin (pip install "
            f"./plugins/loghubd-spark, with pyspark >= 4.2 and Java 17): {exc}",
            file=sys.stderr,
        )
        return 2
    code: int = run_cli(
        args.config,
        check=args.check,
        available_now=args.available_now,
        debug=bool(getattr(args, "debug", False)),  # `loghubd --debug spark-stream ...`
    )
    return code


SPARK_STREAM = CliCommand(
    name="spark-stream",
    help="run a Spark Structured Streaming pipeline over a logstore (the loghubd-spark plugin)",
    description="Reads [source], [consumer] and [spark_stream] (or [processor.spark]) of the "
    "config file; see plugins/loghubd-spark/README.md.",
    arguments=_arguments,
    run=_run,
    logs_are_output=True,
)


def _archive_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="where the archive goes (its directory is made)")


def _archive(args: argparse.Namespace) -> int:
    try:
        from loghubd_spark.cds import ArchiveError, make, submit_opts
    except ImportError as exc:
        print(f"loghubd spark-archive: needs the loghubd-spark plugin: {exc}", file=sys.stderr)
        return 2
    path: Path = args.path.absolute()
    try:
        size = make(path)
    except (ArchiveError, OSError) as exc:
        print(f"loghubd spark-archive: no archive at {path}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # pyspark's: Java missing or failing to start
        if getattr(args, "debug", False):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"loghubd spark-archive: Spark failed: {first}", file=sys.stderr)
        return 1
    print(f"made {path} ({size / 2**20:.0f} MiB). Start Spark drivers with it:")
    print(f"  SPARK_SUBMIT_OPTS='{submit_opts(path)}'")
    return 0


SPARK_ARCHIVE = CliCommand(
    name="spark-archive",
    help="make a class-data sharing archive that halves the Spark JVM's start (loghubd-spark)",
    description="Runs a small Spark job in a JVM that archives the classes it loaded, and says "
    "how to point the `spark` processor's and `spark-stream`'s driver JVMs at the archive; see "
    "plugins/loghubd-spark/README.md, Sizing.",
    arguments=_archive_arguments,
    run=_archive,
)
