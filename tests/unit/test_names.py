"""The service's name rule, shared by `loghubd serve` and the config check."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.config import loads
from loghubd.config.values import ConfigError
from loghubd.protocol.names import name_problem


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("ab", None),
        ("my-project_01", None),
        ("A" * 128, None),
        ("", "must be 2 to 128 characters long, got 0"),
        ("g", "must be 2 to 128 characters long, got 1"),
        ("a" * 129, "must be 2 to 128 characters long, got 129"),
        ("my.group", "may contain only ASCII letters, digits, _ and -"),
        ("grüppe", "may contain only ASCII letters, digits, _ and -"),
        ("two words", "may contain only ASCII letters, digits, _ and -"),
        ("ab\n", "may contain only ASCII letters, digits, _ and -"),
    ],
)
def test_name_rule(name: str, problem: str | None) -> None:
    assert name_problem(name) == problem


@given(st.text(max_size=140))
def test_the_rule_is_the_regular_expression(name: str) -> None:
    """An independent statement of the rule: 2 to 128 of [A-Za-z0-9_-]."""
    expected = re.fullmatch(r"[A-Za-z0-9_-]{2,128}", name) is not None
    assert (name_problem(name) is None) == expected


BASE = """
[source]
endpoint = "http://127.0.0.1:7100"
project = "{project}"
logstore = "{logstore}"
[consumer]
group = "{group}"
"""


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ({"project": "p"}, "source.project: must be 2 to 128 characters long, got 1: 'p'"),
        (
            {"logstore": "a.b"},
            "source.logstore: may contain only ASCII letters, digits, _ and -: 'a.b'",
        ),
        ({"group": "g"}, "consumer.group: must be 2 to 128 characters long, got 1: 'g'"),
        ({"group": ""}, "consumer.group: must not be empty"),
    ],
)
def test_the_config_check_applies_the_rule(names: dict[str, str], message: str) -> None:
    """`loghubd check-config` refuses what the service would refuse, naming the key."""
    values = {"project": "proj", "logstore": "logs", "group": "grp", **names}
    with pytest.raises(ConfigError) as info:
        loads(BASE.format(**values), {})
    assert message in str(info.value)
