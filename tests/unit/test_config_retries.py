"""Retry settings: pulls and processors have their own maxima; `retry_max_backoff` is a
deprecated alias that sets both, with a warning naming the keys to use instead."""

from __future__ import annotations

import pytest

from loghubd.config import ConfigError, loads
from tests.unit.test_config import BASE

MULTI = """
[consumer]
group = "grp"
{shared}

[[sources]]
name = "a"
endpoint = "http://127.0.0.1:7100"
project = "proj"
logstore = "logs-a"

[[sources]]
name = "b"
endpoint = "http://127.0.0.1:7100"
project = "proj"
logstore = "logs-b"
[sources.consumer]
group = "g2"
{own}
"""


@pytest.mark.parametrize(
    ("extra", "pull", "processor", "warned"),
    [
        ("", 30.0, 30.0, False),
        ("pull_retry_max_backoff = 5", 5.0, 30.0, False),
        ("processor_retry_max_backoff = 7", 30.0, 7.0, False),
        ("retry_max_backoff = 4", 4.0, 4.0, True),
        # The new key wins over the alias it replaces.
        ("retry_max_backoff = 4\npull_retry_max_backoff = 9", 9.0, 4.0, True),
    ],
)
def test_single_source(extra: str, pull: float, processor: float, warned: bool) -> None:
    cfg = loads(BASE + extra, {})
    assert (cfg.consumer.pull_retry_max_backoff, cfg.consumer.processor_retry_max_backoff) == (
        pull,
        processor,
    )
    if warned:
        assert cfg.warnings == (
            "consumer.retry_max_backoff is deprecated: it sets consumer.pull_retry_max_backoff "
            "and consumer.processor_retry_max_backoff, give those instead",
        )
    else:
        assert cfg.warnings == ()


def test_env_var_alias_warns_too() -> None:
    cfg = loads(BASE, {"LOGHUBD_CONSUMER__RETRY_MAX_BACKOFF": "2"})
    assert cfg.consumer.processor_retry_max_backoff == 2.0
    assert len(cfg.warnings) == 1


def test_shared_alias_warns_once_and_an_entry_alias_names_the_entry() -> None:
    cfg = loads(MULTI.format(shared="retry_max_backoff = 3", own=""), {})
    assert [s.consumer.pull_retry_max_backoff for s in cfg.sources] == [3.0, 3.0]
    assert cfg.warnings == (
        "consumer.retry_max_backoff is deprecated: it sets consumer.pull_retry_max_backoff "
        "and consumer.processor_retry_max_backoff, give those instead",
    )
    cfg = loads(MULTI.format(shared="", own="retry_max_backoff = 3"), {})
    assert [s.consumer.pull_retry_max_backoff for s in cfg.sources] == [30.0, 3.0]
    assert cfg.warnings == (
        "sources.b.consumer.retry_max_backoff is deprecated: it sets "
        "sources.b.consumer.pull_retry_max_backoff and "
        "sources.b.consumer.processor_retry_max_backoff, give those instead",
    )


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        (
            "retry_initial_backoff = 5\nprocessor_retry_max_backoff = 1",
            "processor_retry_max_backoff",
        ),
        ("pull_retry_max_backoff = 0", "pull_retry_max_backoff"),
    ],
)
def test_bad_values_name_their_key(extra: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"consumer.{key}: must be"):
        loads(BASE + extra, {})


def test_a_long_initial_backoff_is_not_checked_against_the_unset_alias() -> None:
    """The deprecated key, not given, neither fails the check against a long initial wait
    nor shows up in what `check-config` prints."""
    cfg = loads(BASE + "retry_initial_backoff = 40\nprocessor_retry_max_backoff = 60", {})
    assert cfg.consumer.retry_max_backoff is None
    assert "retry_max_backoff" not in cfg.redacted()["consumer"]
    assert cfg.redacted()["consumer"]["processor_retry_max_backoff"] == 60.0
