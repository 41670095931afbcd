"""The service's name rule, shared by `loghubd serve` and the config check."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.config import loads
from loghubd.config.values import ConfigError
from loghubd.protocol.names import name_problem, sls_name_problem


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


@pytest.mark.parametrize(
    ("kind", "name", "problem"),
    [
        ("project", "my-project-01", None),
        ("project", "abc", None),
        ("project", "a" * 63, None),
        ("logstore", "access_log", None),
        ("logstore", "nginx-access-2", None),
        ("consumer group", "G", None),  # not known to be stricter than serve's rule
        ("project", "ls", "must be 3 to 63 characters long, got 2"),
        ("logstore", "a" * 64, "must be 3 to 63 characters long, got 64"),
        ("project", "my_project", "may contain only lower-case letters, digits and -, and"),
        ("project", "MyProject", "may contain only lower-case letters, digits and -, and"),
        ("logstore", "Access", "may contain only lower-case letters, digits, _ and -, and"),
        ("logstore", "_access", "must start and end with a letter or digit"),
        ("logstore", "access-", "must start and end with a letter or digit"),
        ("project", "-abc", "must start and end with a letter or digit"),
    ],
)
def test_the_clouds_stricter_rule(kind: str, name: str, problem: str | None) -> None:
    got = sls_name_problem(kind, name)
    assert got == problem if problem is None else (got is not None and problem in got), got


@given(
    st.sampled_from(["project", "logstore"]), st.from_regex(r"[A-Za-z0-9_-]{2,128}", fullmatch=True)
)
def test_the_clouds_rule_is_the_regular_expression(kind: str, name: str) -> None:
    """An independent statement: 3 to 63 lower-case letters, digits and - (and _ for a
    logstore), starting and ending with a letter or digit."""
    inner = "a-z0-9-" if kind == "project" else "a-z0-9_-"
    expected = re.fullmatch(rf"[a-z0-9][{inner}]{{1,61}}[a-z0-9]", name) is not None
    assert (sls_name_problem(kind, name) is None) == expected
