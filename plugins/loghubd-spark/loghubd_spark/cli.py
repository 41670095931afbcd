"""`loghubd spark-stream`: the plugin's subcommand (the `loghubd_cli_commands` hook).

The core CLI does not know Spark: it lists this command because the plugin declares it, and
runs it through `CliCommand.run`. pyspark is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys

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
