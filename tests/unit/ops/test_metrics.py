"""`/metrics` of several sources: every series labelled with its source, families merged."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator

from prometheus_client import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from loghubd.ops.metrics import ConfigReloads, Metrics, exposition, labelled_by_source
from loghubd.ops.views import config_status


def test_sources_are_labels_of_one_family() -> None:
    a, b = Metrics(), Metrics()
    a.consumed_logs.labels("0").inc(3)
    b.consumed_logs.labels("0").inc(5)
    b.consumed_logs.labels("1").inc(7)
    a.held_shards.set(1)
    b.held_shards.set(2)
    text = generate_latest(labelled_by_source([("a", a.registry), ("b", b.registry)])).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    consumed = {
        (s.labels["source"], s.labels["shard"]): s.value
        for s in families["loghubd_consumed_logs"].samples
        if s.name == "loghubd_consumed_logs_total"
    }
    assert consumed == {("a", "0"): 3, ("b", "0"): 5, ("b", "1"): 7}
    held = {s.labels["source"]: s.value for s in families["loghubd_held_shards"].samples}
    assert held == {"a": 1, "b": 2}
    assert text.count("# TYPE loghubd_consumed_logs_total counter") == 1


def test_exposition_conventions_no_created_process_metrics_and_build_info() -> None:
    import loghubd

    m = Metrics()
    m.consumed_logs.labels("0").inc()
    m.fetch_seconds.labels("0").observe(0.01)
    text = generate_latest(labelled_by_source([("a", m.registry)])).decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert not [n for n in names if n.endswith("_created")], sorted(names)
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= names
    assert "python_info" in names
    (info,) = [f for f in text_string_to_metric_families(text) if f.name == "loghubd_build_info"]
    assert [(s.labels, s.value) for s in info.samples] == [({"version": loghubd.__version__}, 1)]
    # process metrics describe the process, not a source: no source label on them
    (cpu,) = [f for f in text_string_to_metric_families(text) if f.name == "process_cpu_seconds"]
    assert "source" not in cpu.samples[0].labels


def test_a_taken_shard_has_its_error_counters_at_zero_and_a_live_checkpoint_age() -> None:
    m = Metrics()
    ages = iter([0.0, 42.5])
    m.start_shard(3, lambda: next(ages))

    def scrape() -> dict[tuple[str, str], float]:
        text = generate_latest(labelled_by_source([("a", m.registry)])).decode()
        return {
            (s.name, s.labels.get("result", s.labels.get("shard", ""))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.labels.get("source") == "a"
        }

    first = scrape()
    for counter in (
        "loghubd_processor_errors_total",
        "loghubd_processor_retries_total",
        "loghubd_dead_lettered_batches_total",
        "loghubd_ownership_lost_total",
        "loghubd_filtered_logs_total",
        "loghubd_consumed_logs_total",
    ):
        assert first[(counter, "3")] == 0, counter
    for result in ("ok", "failed", "ownership_lost"):
        assert first[("loghubd_checkpoint_commits_total", result)] == 0
    # the age is read at scrape time, not when something last set it
    assert first[("loghubd_checkpoint_age_seconds", "3")] == 0.0
    assert scrape()[("loghubd_checkpoint_age_seconds", "3")] == 42.5
    m.forget_shard(3)
    assert ("loghubd_checkpoint_age_seconds", "3") not in scrape()


def test_the_reload_state_is_per_process_and_follows_each_check() -> None:
    reloads = ConfigReloads(loaded_at=1_700_000_000.0)
    registry = labelled_by_source([("a", Metrics().registry)], reloads)

    def scrape() -> dict[str, tuple[dict[str, str], float]]:
        text = generate_latest(registry).decode()
        return {
            s.name: (s.labels, s.value)
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name.startswith("loghubd_config_")
        }

    at = ({}, 1_700_000_000.0)
    assert scrape() == {
        "loghubd_config_last_reload_successful": ({}, 1.0),
        "loghubd_config_last_reload_success_timestamp_seconds": at,
    }
    assert config_status(reloads) == {"loaded_at": "2023-11-14T22:13:20Z", "last_reload": None}
    reloads.checked("consumer.timeout: must be > 0", 1_700_000_060.0)  # refused: runs on
    assert scrape()["loghubd_config_last_reload_successful"] == ({}, 0.0)
    assert config_status(reloads)["last_reload"] == {
        "at": "2023-11-14T22:14:20Z",
        "accepted": False,
        "problem": "consumer.timeout: must be > 0",
    }
    reloads.checked(None, 1_700_000_120.0)
    assert scrape()["loghubd_config_last_reload_successful"] == ({}, 1.0)


class _Watched(list[Sample]):
    """Samples that note the thread that reads them out."""

    readers: set[int]

    def __iter__(self) -> Iterator[Sample]:
        self.readers.add(threading.get_ident())
        return super().__iter__()


class _Live:
    """A collector that notes the thread that collects it (one reading live state)."""

    def __init__(self) -> None:
        self.collected_in: set[int] = set()
        self.read_in: set[int] = set()

    def collect(self) -> Iterable[Metric]:
        self.collected_in.add(threading.get_ident())
        family = GaugeMetricFamily("live_state", "state the event loop changes", labels=["k"])
        family.add_metric(["a"], 1.0)
        samples = _Watched(family.samples)
        samples.readers = self.read_in
        family.samples = samples
        return [family]


def test_a_scrape_reads_on_the_loop_and_writes_its_text_in_a_thread() -> None:
    """Collectors read state the loop changes, so they run on the loop; relabelling by source
    and writing the text, most of a scrape (200-360 ms at 256 shards), run in a worker thread,
    so the loop is not stopped for them. The answer is generate_latest's, byte for byte."""
    m = Metrics()
    for shard in range(4):
        m.consumed_logs.labels(str(shard)).inc(shard)
        m.fetch_seconds.labels(str(shard)).observe(0.01 * shard)
    in_source = _Live()
    m.registry.register(in_source)
    registry = labelled_by_source([("a", m.registry)], ConfigReloads(1_700_000_000.0))
    beside = _Live()
    registry.register(beside)

    async def scrape() -> tuple[bytes, bytes, int]:
        return await exposition(registry), await exposition(m.registry), threading.get_ident()

    text, source_text, loop_thread = asyncio.run(scrape())
    for live in (in_source, beside):
        assert live.collected_in == {loop_thread}
        assert live.read_in and loop_thread not in live.read_in
    assert 'live_state{k="a",source="a"} 1.0' in text.decode()  # relabelled
    assert 'live_state{k="a"} 1.0' in text.decode()  # registered beside the sources

    def steady(text: bytes) -> list[str]:  # the process's own series move between scrapes
        return [line for line in text.decode().splitlines() if not line.startswith("process_")]

    assert steady(text) == steady(generate_latest(registry))
    assert source_text == generate_latest(m.registry)
