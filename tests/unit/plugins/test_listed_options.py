"""What `loghubd plugins` lists of each processor's options is what its table takes: every key
it lists is one the processor accepts, and, for the processors whose accepted keys are a
table of their module, every accepted key is listed (an audit found `retry_statuses`,
`lock_timeout_s` and all of spark's options missing from the listing)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from loghubd_postgres import options as postgres_options
from loghubd_spark import options as spark_options

from loghubd.plugins.manager import Plugins
from loghubd.processors import http

PLUGINS = Plugins()
SPECS = PLUGINS.processors()


@pytest.mark.parametrize(
    ("name", "key"),
    sorted((name, key) for name, spec in SPECS.items() for key in spec.options),
)
def test_every_listed_key_is_accepted(name: str, key: str) -> None:
    """Given with a value of no type any option takes, the key is refused for its type (or
    for another key missing), never as unknown."""
    refusal = ""
    try:
        SPECS[name].factory({key: frozenset()})
    except Exception as exc:  # the factory's own refusal, whatever its class
        refusal = str(exc)
    assert f"{key}: unknown key" not in refusal, refusal


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("http", http._ALLOWED),
        ("postgres", postgres_options._ALLOWED),
        ("spark", spark_options.TYPES),
    ],
)
def test_every_accepted_key_is_listed(name: str, accepted: Mapping[str, object]) -> None:
    assert set(SPECS[name].options) == set(accepted)
