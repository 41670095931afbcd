"""`creation_level`: a group created next to other groups is most likely a misspelt
`consumer.group` (a migration onto an existing group), about to read the logstore again."""

from __future__ import annotations

import pytest

from loghubd.consumer.startup import creation_level


@pytest.mark.parametrize(
    ("existing", "level"),
    [([], "info"), (["m1"], "warning"), (("a", "b"), "warning"), ([""], "info")],
)
def test_a_group_created_beside_others_is_a_warning(existing: list[str], level: str) -> None:
    assert creation_level(existing) == level


def test_it_takes_any_iterable_once() -> None:
    assert creation_level(name for name in ["sdk-group"]) == "warning"
