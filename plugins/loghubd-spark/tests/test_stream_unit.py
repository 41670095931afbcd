"""The `loghub` streaming source without a service: options, lineage, offset planning,
admission control, partitions, the schema, and `loghubd spark-stream`'s configuration."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from loghubd_spark import LogHubDataSource
from loghubd_spark.planning import ShardInfo, admit, lineage, plan
from loghubd_spark.stream import (
    LogHubStreamReader,
    OffsetError,
    OptionError,
    StreamOptions,
    partitions,
)
from loghubd_spark.stream_config import StreamConfigError, parse

from loghubd.arrow import SCHEMA
from loghubd.protocol import cursor as cursors

pytestmark = pytest.mark.spark

BASE = {"endpoint": "http://127.0.0.1:7100", "project": "p", "logstore": "app"}
HALF = 2**127


def cur(shard: int, seq: int) -> str:
    return cursors.from_seq(shard, seq)


def shard(
    sid: int,
    begin: int,
    end: int,
    *,
    readonly: bool = False,
    parents: tuple[int, ...] | None = None,
) -> ShardInfo:
    return ShardInfo(sid, readonly, begin, end, parents)


# -- options -------------------------------------------------------------------------------------


def test_options_parse_case_insensitively_and_keep_secrets_out_of_repr() -> None:
    opts = StreamOptions.parse(
        {
            **BASE,
            "accesskeyid": "AKID-123",
            "ACCESSKEYSECRET": "s3cr3t-value",
            "consumerGroup": "g",
            "startingPosition": "1700000000",
            "maxLogGroupsPerTrigger": "500",
            "order": "TRUE",
        }
    )
    assert opts.access_key_secret == "s3cr3t-value"
    assert opts.starting_position == "1700000000"
    assert opts.max_log_groups_per_trigger == 500
    assert opts.order is True
    assert opts.fail_on_data_loss is True  # the default, as Kafka's
    assert StreamOptions.parse({**BASE, "FAILONDATALOSS": "False"}).fail_on_data_loss is False
    text = repr(opts)
    assert "s3cr3t-value" not in text and "AKID-123" not in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"project": "p", "logstore": "a"}, "'endpoint': required"),
        ({**BASE, "startingPosition": "yesterday"}, "'startingPosition': expected begin, end"),
        ({**BASE, "maxLogGroupsPerTrigger": "0"}, "'maxLogGroupsPerTrigger': must be > 0"),
        ({**BASE, "maxLogGroupsPerTrigger": "many"}, "expected an integer"),
        ({**BASE, "order": "maybe"}, "'order': expected true or false"),
        ({**BASE, "failOnDataLoss": "no"}, "'failOnDataLoss': expected true or false"),
        ({**BASE, "accessKeyId": "x"}, "'accessKeySecret': give both or neither"),
        ({**BASE, "authVersion": "v4"}, "'region': required with authVersion v4"),
        ({**BASE, "maxLogGroups": "5"}, "'maxLogGroups': unknown option"),
        # Spark hands the keys over lower-cased: the nearest option in its documented spelling
        (
            {**BASE, "maxlogspertrigger": "5"},
            r"'maxlogspertrigger': unknown option \(did you mean maxLogGroupsPerTrigger\?\)",
        ),
        ({**BASE, "zzz": "5"}, r"'zzz': unknown option \(known: endpoint, project"),
        # as `loghubd run` refuses it: without a scheme it would be used as plain http://
        (
            {**BASE, "endpoint": "cn-hangzhou.log.aliyuncs.com"},
            r"'endpoint': expected an http:// or https:// URL such as "
            r"https://cn-hangzhou.log.aliyuncs.com, got 'cn-hangzhou.log.aliyuncs.com'$",
        ),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        StreamOptions.parse(options)


def test_the_reader_pickles_without_its_driver_state() -> None:
    reader = LogHubStreamReader(StreamOptions.parse(BASE))
    reader._committed["0"] = "x"
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options
    assert copy._committed == {} and copy._sls is None


# -- lineage and planning ------------------------------------------------------------------------


def test_lineage_uses_the_services_parents_when_it_has_them() -> None:
    shards = [
        shard(0, 0, HALF, readonly=True, parents=()),
        shard(1, HALF, 2 * HALF, parents=()),
        shard(2, 0, HALF // 2, parents=(0,)),
        shard(3, HALF // 2, HALF, parents=(0,)),
    ]
    assert lineage(shards) == {0: (), 1: (), 2: (0,), 3: (0,)}


def test_lineage_heuristic_older_overlapping_shards_are_ancestors() -> None:
    # 0 and 1 original; 0 split into 2 and 3; 2 and 3 merged into 4; 1 split into 5, 6.
    shards = [
        shard(0, 0, HALF, readonly=True),
        shard(1, HALF, 2 * HALF, readonly=True),
        shard(2, 0, HALF // 2, readonly=True),
        shard(3, HALF // 2, HALF, readonly=True),
        shard(4, 0, HALF),
        shard(5, HALF, HALF + HALF // 2),
        shard(6, HALF + HALF // 2, 2 * HALF),
    ]
    assert lineage(shards) == {0: (), 1: (), 2: (0,), 3: (0,), 4: (0, 2, 3), 5: (1,), 6: (1,)}


def split_world(*, parents: bool) -> tuple[list[ShardInfo], dict[int, str]]:
    """Shard 0 (read-only, 10 groups) split into 2 and 3 (5 groups each); shard 1 live."""
    p: Any = (lambda *ids: tuple(ids)) if parents else (lambda *ids: None)
    shards = [
        shard(0, 0, HALF, readonly=True, parents=p()),
        shard(1, HALF, 2 * HALF, parents=p()),
        shard(2, 0, HALF // 2, parents=p(0)),
        shard(3, HALF // 2, HALF, parents=p(0)),
    ]
    ends = {0: cur(0, 10), 1: cur(1, 7), 2: cur(2, 5), 3: cur(3, 5)}
    return shards, ends


@pytest.mark.parametrize("with_parents", [True, False])
def test_an_ordered_child_waits_until_its_parent_is_finished(with_parents: bool) -> None:
    shards, ends = split_world(parents=with_parents)
    begins = {2: cur(2, 0), 3: cur(3, 0)}
    start = {"0": cur(0, 4), "1": cur(1, 7)}
    # New children enter the offsets at their begin cursor; nothing of theirs is read yet.
    first = plan(start, shards, ends, begins, order=True)
    assert first == {"0": cur(0, 10), "1": cur(1, 7), "2": cur(2, 0), "3": cur(3, 0)}
    assert [(p.shard, p.start, p.end) for p in partitions(start, first)] == [
        (0, cur(0, 4), cur(0, 10))
    ]
    # The parent is not finished in `start` of the batch that finishes it: children wait.
    held = plan(
        {**first, "0": cur(0, 6)}, shards, ends, {}, order=True
    )  # a batch still reading the parent
    assert held["2"] == cur(2, 0) and held["3"] == cur(3, 0)
    # Once the parent is at its end in the start offsets, the children move.
    after = plan(first, shards, ends, {}, order=True)
    assert after == {"0": cur(0, 10), "1": cur(1, 7), "2": cur(2, 5), "3": cur(3, 5)}
    assert list(after) == ["0", "1", "2", "3"]  # shard order: equal offsets, equal JSON


def test_unordered_children_are_read_at_once() -> None:
    shards, ends = split_world(parents=True)
    start = {"0": cur(0, 4), "1": cur(1, 7), "2": cur(2, 0), "3": cur(3, 0)}
    assert plan(start, shards, ends, {}, order=False) == {
        "0": cur(0, 10),
        "1": cur(1, 7),
        "2": cur(2, 5),
        "3": cur(3, 5),
    }


def test_a_child_of_an_empty_parent_still_waits_for_the_grandparent() -> None:
    # 0 split into 1 and 2; 1 (empty) merged with 2 into 3: 3 waits while 0 is unfinished.
    shards = [
        shard(0, 0, HALF, readonly=True, parents=()),
        shard(1, 0, HALF // 2, readonly=True, parents=(0,)),
        shard(2, HALF // 2, HALF, readonly=True, parents=(0,)),
        shard(3, 0, HALF, parents=(1, 2)),
    ]
    ends = {0: cur(0, 9), 1: cur(1, 0), 2: cur(2, 0), 3: cur(3, 4)}
    start = {"0": cur(0, 3), "1": cur(1, 0), "2": cur(2, 0), "3": cur(3, 0)}
    assert plan(start, shards, ends, {}, order=True)["3"] == cur(3, 0)
    done = {**start, "0": cur(0, 9)}
    assert plan(done, shards, ends, {}, order=True)["3"] == cur(3, 4)


def test_gone_shards_leave_the_offsets_and_count_as_finished() -> None:
    shards = [shard(2, 0, HALF, parents=(0,)), shard(1, HALF, 2 * HALF, parents=())]
    ends = {1: cur(1, 3), 2: cur(2, 6)}
    start = {"0": cur(0, 5), "1": cur(1, 3), "2": cur(2, 1)}
    assert plan(start, shards, ends, {}, order=True) == {"1": cur(1, 3), "2": cur(2, 6)}


def test_admission_control_shares_the_budget_fairly() -> None:
    assert admit({"0": 100, "1": 3, "2": 100}, 50) == {"0": 24, "1": 3, "2": 23}
    assert admit({"0": 5, "1": 0}, 50) == {"0": 5, "1": 0}
    assert sum(admit({"0": 7, "1": 7, "2": 7}, 10).values()) == 10
    shards = [shard(0, 0, HALF, parents=()), shard(1, HALF, 2 * HALF, parents=())]
    ends = {0: cur(0, 100), 1: cur(1, 4)}
    start = {"0": cur(0, 10), "1": cur(1, 0)}
    assert plan(start, shards, ends, {}, order=False, budget=20) == {
        "0": cur(0, 26),
        "1": cur(1, 4),
    }


def test_available_now_targets_cap_the_offsets() -> None:
    shards = [shard(0, 0, HALF, parents=()), shard(1, HALF, 2 * HALF, parents=())]
    ends = {0: cur(0, 100), 1: cur(1, 50)}
    start = {"0": cur(0, 10), "1": cur(1, 0)}
    out = plan(start, shards, ends, {}, order=False, targets={0: cur(0, 40)})
    assert out == {"0": cur(0, 40), "1": cur(1, 0)}


def test_partitions_are_one_per_moved_shard() -> None:
    start = {"0": cur(0, 1), "1": cur(1, 5)}
    end = {"0": cur(0, 4), "1": cur(1, 5), "2": cur(2, 0)}
    parts = partitions(start, end)
    assert [(p.shard, p.start, p.end) for p in parts] == [(0, cur(0, 1), cur(0, 4))]
    assert pickle.loads(pickle.dumps(parts[0])).end == cur(0, 4)


def test_a_range_starting_after_its_end_is_refused_as_inconsistent() -> None:
    with pytest.raises(OffsetError, match=r"inconsistent offsets for shard 0: .* after its end"):
        partitions({"0": cur(0, 20)}, {"0": cur(0, 10)})


@pytest.mark.parametrize("where", ["begin", "end", "1700000000"])
def test_the_initial_offset_depends_on_the_options_only(where: str) -> None:
    """Spark asks again for micro-batch 0's start after a restart: no cursor of the moment
    (nothing listens on this endpoint: no service call either)."""
    options = StreamOptions.parse(
        {**BASE, "endpoint": "http://127.0.0.1:9", "startingPosition": where}
    )
    first = LogHubStreamReader(options).initialOffset()
    assert first == LogHubStreamReader(options).initialOffset() == {"@start": where}
    assert json.loads(json.dumps(first)) == first


def test_the_schema_is_the_processors(spark: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    ds = LogHubDataSource(BASE)
    ddl = ds.schema()
    assert isinstance(ddl, str)
    struct = StructType.fromDDL(ddl)
    assert isinstance(struct, StructType)
    assert to_arrow_schema(struct, timezone="UTC").equals(SCHEMA)


# -- `loghubd spark-stream` configuration ---------------------------------------------------------

FILE: dict[str, Any] = {
    "source": {
        "endpoint": "http://127.0.0.1:7100",
        "project": "p",
        "logstore": "app",
        "access_key_id": "AKID",
        "access_key_secret": "file-secret",
    },
    "consumer": {"group": "g", "start": "2024-05-01T00:00:00+08:00", "heartbeat_interval": 2},
    "spark_stream": {
        "path": "/lake/app",
        "checkpoint_location": "/lake/_chk/app",
        "sql": "SELECT * FROM {logs}",
        "max_log_groups_per_trigger": 300,
        "conf": {"spark.sql.shuffle.partitions": 4},
    },
}


def test_config_maps_onto_the_source_options_and_masks_secrets() -> None:
    env = {"LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "env-secret", "LOGHUBD_SPARK_STREAM__ORDER": "1"}
    with pytest.raises(StreamConfigError, match=r"spark_stream\.order: unknown key"):
        parse(FILE, env)
    env = {"LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "env-secret", "LOGHUBD_CONSUMER__ORDER": "true"}
    cfg = parse(FILE, env)
    opts = cfg.source_options()
    assert opts["accessKeySecret"] == "env-secret"
    assert opts["startingPosition"] == "1714492800"
    assert opts["maxLogGroupsPerTrigger"] == "300" and opts["order"] == "true"
    assert opts["consumerGroup"] == "g"
    assert opts["failOnDataLoss"] == "true"
    lossy = {**FILE, "spark_stream": {**FILE["spark_stream"], "fail_on_data_loss": False}}
    assert parse(lossy, {}).source_options()["failOnDataLoss"] == "false"
    assert cfg.conf == {"spark.sql.shuffle.partitions": "4"}
    shown = json.dumps(cfg.redacted())
    assert "env-secret" not in shown and "AKID" not in shown and "file-secret" not in shown
    StreamOptions.parse(opts)  # what the CLI hands over, the source accepts


def test_check_masks_secrets_in_conf_and_path() -> None:
    """`--check` prints the effective keys: a secret in a Spark conf key or a URL must not
    show, whatever the key is called."""
    spark = {
        **FILE["spark_stream"],
        "path": "s3a://AKIA:s3cr3t@bucket/app",
        "conf": {"spark.hadoop.fs.s3a.secret.key": "k3y", "spark.sql.shuffle.partitions": 4},
    }
    shown = parse({**FILE, "spark_stream": spark}, {}).redacted()
    assert shown["path"] == "s3a://AKIA:***@bucket/app"
    assert shown["conf"] == {
        "spark.hadoop.fs.s3a.secret.key": "***",
        "spark.sql.shuffle.partitions": "4",
    }
    assert shown["sql"] == "SELECT * FROM {logs}"


def test_config_problems_name_their_keys() -> None:
    bad: dict[str, Any] = {
        "source": {"endpoint": "x", "project": "p", "color": "red"},
        "consumer": {"query": "* | where a = 'b'", "start": "soon"},
        "spark_stream": {"path": "/x", "sql": "SELECT 1", "trigger_interval": "often"},
    }
    with pytest.raises(StreamConfigError) as info:
        parse(bad, {})
    problems = "\n".join(info.value.problems)
    for expected in (
        "source.color: unknown key",
        "source.logstore: required",
        "consumer.query: not supported",
        "consumer.start: expected begin, end",
        "spark_stream.sql: must read the batch as {logs}",
        "spark_stream.trigger_interval: expected a number",
        "spark_stream.checkpoint_location: required",
    ):
        assert expected in problems


def test_a_daemon_file_with_the_spark_processor_runs_as_a_stream() -> None:
    daemon: dict[str, Any] = {
        "source": FILE["source"],
        "consumer": {"group": "g"},
        "processor": {"name": "spark", "spark": {"path": "/lake/x", "sink": "jsonl"}},
    }
    cfg = parse(daemon, {"LOGHUBD_SPARK_STREAM__CHECKPOINT_LOCATION": "/lake/_chk"})
    assert (cfg.path, cfg.sink, cfg.checkpoint_location) == ("/lake/x", "jsonl", "/lake/_chk")


def test_cli_check_prints_the_config_masked(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loghubd.cli import main

    path = tmp_path / "stream.toml"
    path.write_text(
        "[source]\nendpoint = 'http://127.0.0.1:1'\nproject = 'p'\nlogstore = 'a'\n"
        "access_key_id = 'AKID'\n[consumer]\ngroup = 'g'\n"
        "[spark_stream]\npath = '/x'\ncheckpoint_location = '/c'\n"
    )
    monkeypatch.setenv("LOGHUBD_SOURCE__ACCESS_KEY_SECRET", "very-secret")
    assert main(["spark-stream", "-c", str(path), "--check"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["access_key_secret"] == "***"
    assert "very-secret" not in out
    # the effective values of what was left out
    assert json.loads(out)["consumer_name"] == "loghubd-spark-stream"
    assert json.loads(out)["order"] == "the consumer group's order flag, else false"
    path.write_text(path.read_text().replace("group = 'g'", "name = 'n'\norder = true"))
    assert main(["spark-stream", "-c", str(path), "--check"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["consumer_name"], shown["order"]) == ("n", True)
    path.write_text(path.read_text().replace("order = true\n", ""))
    assert main(["spark-stream", "-c", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["order"] is False  # no group: not ordered
    path.write_text("[source]\nendpoint = 'x'\n")
    assert main(["spark-stream", "-c", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "source.project: required" in err
    # the daemon's own words for an endpoint without a scheme (`loghubd check-config`)
    assert (
        "source.endpoint: expected an http:// or https:// URL such as "
        "https://cn-hangzhou.log.aliyuncs.com, got 'x'"
    ) in err


def test_spark_refuses_bad_options_at_load_and_redacts_credentials(spark: Any) -> None:
    spark.dataSource.register(LogHubDataSource)
    reader = spark.readStream.format("loghub").options(**BASE)
    with pytest.raises(Exception, match="'maxLogGroupsPerTrigger': must be > 0"):
        reader.option("maxLogGroupsPerTrigger", "0").load()
    df = (
        spark.readStream.format("loghub")
        .options(**BASE)
        .option("accessKeyId", "AKID-visible?")
        .option("accessKeySecret", "s3cr3t-in-plan?")
        .load()
    )
    plan = df._jdf.queryExecution().toString()
    assert "loghub" in plan and "redacted" in plan
    assert "s3cr3t-in-plan?" not in plan and "AKID-visible?" not in plan


def test_pack_zips_both_packages_for_py_files(tmp_path: Any) -> None:
    from loghubd_spark.pack import build

    names = build(tmp_path / "pyfiles.zip")
    for needed in ("loghubd/sls/client.py", "loghubd_spark/stream.py", "loghubd/__init__.py"):
        assert needed in names
    assert not any("__pycache__" in n for n in names)


def test_cli_says_the_plugin_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from loghubd.cli import main

    monkeypatch.setitem(sys.modules, "loghubd_spark.stream_app", None)  # import fails
    assert main(["spark-stream", "-c", "any.toml"]) == 2
    assert "needs the loghubd-spark plugin" in capsys.readouterr().err


def test_a_failed_querys_cause_is_the_innermost_python_exception() -> None:
    from loghubd_spark.jobs import PipelineError
    from loghubd_spark.stream_app import cause

    spark_message = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source "
        "perform latestOffset: Traceback (most recent call last):\n"
        '  File "/x/stream.py", line 1, in _shards\n'
        "    listing = self.sls.call(lambda c: c.list_shards(logstore))\n"
        "loghubd.protocol.errors.LogStoreNotExist: LogStoreNotExist: logstore nosuch does not "
        "exist (request 1)\n SQLSTATE: 38000\n\tat org.apache.spark.Foo(Foo.scala:1)"
    )
    error = RuntimeError(spark_message)
    assert cause(error) == "LogStoreNotExist: logstore nosuch does not exist (request 1)"
    assert cause(
        RuntimeError("[STREAM_FAILED] Query [id = 1] terminated with exception: boom")
    ) == ("boom")
    batch = PipelineError("spark_stream.sql: [UNRESOLVED_COLUMN] no `x`; line 1\n'Project [x]")
    assert cause(error, batch) == "spark_stream.sql: [UNRESOLVED_COLUMN] no `x`; line 1"
    assert cause(error, OSError("disk full\nmore")) == "OSError: disk full"


@pytest.mark.parametrize(
    ("function", "says"),
    [
        ("spark_pipelines:raises", "spark_stream.function: ValueError: boom from user code"),
        ("spark_pipelines:not_a_dataframe", "spark_stream.function must return a DataFrame"),
    ],
)
def test_a_function_pipeline_is_checked_over_an_empty_batch(
    spark: Any, function: str, says: str
) -> None:
    """`spark-stream` runs a `function` over an empty batch before the query starts, as it
    analyses a `sql`: a broken one is a configuration error naming the key (exit 2)."""
    from loghubd_spark.jobs import PipelineError
    from loghubd_spark.stream_app import BatchWriter

    BatchWriter(None, "spark_pipelines:tag_levels", "parquet", "/nowhere").check(spark)
    with pytest.raises(PipelineError) as info:
        BatchWriter(None, function, "parquet", "/nowhere").check(spark)
    assert str(info.value).startswith(says)


def test_a_write_interrupted_by_the_stop_raises_what_spark_takes_for_an_interruption(
    spark: Any,
) -> None:
    """After `query.stop()`, a failing write raises `BatchInterrupted`, whose traceback (what
    py4j hands to the JVM) is short and matches Spark's own test for an interruption: the
    stop stays clean, and Spark's regex does not overflow the stream thread's stack on the
    long py4j text (a thousand lines of `StackOverflowError`). Before the stop, a failure
    is the batch's own."""
    import traceback

    from loghubd_spark.stream_app import BatchInterrupted, BatchWriter

    class Failing(BatchWriter):
        def _write(self, df: Any, batch_id: int) -> None:
            raise RuntimeError("An error occurred while calling o1.parquet.\n" + "\tat x\n" * 5000)

    writer = Failing(None, None, "parquet", "/nowhere")
    with pytest.raises(RuntimeError, match=r"o1\.parquet"):
        writer(None, 0)
    assert writer.error is not None and not writer.interrupted
    writer.stopping.set()
    with pytest.raises(BatchInterrupted) as info:
        writer(None, 1)
    assert writer.interrupted
    text = "".join(traceback.format_exception(info.value))
    assert len(text) < 2000 and "\tat x" not in text
    spark_rule = spark._jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution
    assert spark_rule.PROXY_ERROR().findFirstIn(text).isDefined()


def test_a_batch_that_starts_after_the_stop_was_asked_for_is_held_and_writes_nothing() -> None:
    """Once a signal asked for the stop, the next micro-batch is held at its start (`held`,
    which the command waits for) until `query.stop()` has begun, then ends as an interrupted
    write without writing: the stop comes between two batches' writes, and Spark replays the
    held one on the next start."""
    from loghubd_spark.stream_app import BatchInterrupted, BatchWriter

    writes: list[int] = []
    active = iter([True, True, True, False])

    class Recording(BatchWriter):
        def _write(self, df: Any, batch_id: int) -> None:
            writes.append(batch_id)

    writer = Recording(None, None, "parquet", "/nowhere")
    writer.bind("0f" * 16, lambda: next(active))
    writer(None, 0)
    writer.stop_requested.set()
    with pytest.raises(BatchInterrupted):
        writer(None, 1)
    assert writes == [0] and writer.held.is_set() and writer.interrupted
    assert next(active, "asked until the stop began") == "asked until the stop began"
