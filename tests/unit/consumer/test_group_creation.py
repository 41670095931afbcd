"""`creation_level`: a group created next to other groups is most likely a misspelt
`consumer.group` (a migration onto an existing group), about to read the logstore again."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from loghubd.config import ConsumerConfig
from loghubd.consumer.startup import StartupError, creation_level, ensure_group
from loghubd.consumer.terms import GroupTerms
from loghubd.protocol import errors as E


@pytest.mark.parametrize(
    ("existing", "level"),
    [([], "info"), (["m1"], "warning"), (("a", "b"), "warning"), ([""], "info")],
)
def test_a_group_created_beside_others_is_a_warning(existing: list[str], level: str) -> None:
    assert creation_level(existing) == level


def test_it_takes_any_iterable_once() -> None:
    assert creation_level(name for name in ["sdk-group"]) == "warning"


class GroupsClient:
    """ListConsumerGroup answers `groups`; CreateConsumerGroup raises `create_error`."""

    def __init__(self, groups: list[dict[str, Any]], create_error: Exception | None) -> None:
        self.groups, self.create_error = groups, create_error

    async def list_groups(self, logstore: str) -> list[dict[str, Any]]:
        return self.groups

    async def create_group(self, logstore: str, group: str, timeout: int, order: bool) -> None:
        if self.create_error is not None:
            raise self.create_error


def ensure(client: GroupsClient, terms: GroupTerms) -> None:
    config = ConsumerConfig(group="nightly-31", timeout=15.0)
    anyio.run(lambda: ensure_group(client, "store", config, terms))  # type: ignore[arg-type]


def test_the_group_quota_says_to_delete_unused_groups() -> None:
    full = GroupsClient([{"name": f"nightly-{n}", "timeout": 15} for n in range(30)], None)
    full.create_error = E.ConsumerGroupQuotaExceed("at most 30 consumer groups per logstore")
    with pytest.raises(StartupError) as refused:
        ensure(full, GroupTerms(configured_interval=5.0, timeout=15.0))
    assert refused.value.exit_code == 2
    assert "loghubd group delete GROUP --yes" in str(refused.value), refused.value
    assert "at most 30 consumer groups" in str(refused.value), refused.value


def test_an_existing_group_sets_the_terms_and_a_new_one_its_own() -> None:
    terms = GroupTerms(configured_interval=5.0, timeout=15.0)
    ensure(GroupsClient([{"name": "nightly-31", "timeout": 4}], None), terms)
    assert terms.timeout == 4.0 and terms.interval == pytest.approx(4 / 3)
    terms = GroupTerms(configured_interval=5.0, timeout=9.5)
    ensure(GroupsClient([], None), terms)
    assert terms.timeout == 15.0  # created with the configured timeout, whole seconds
