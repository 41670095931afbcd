"""`loghubd serve` takes short and mixed-case names (tests and demos use `ls`), but a project
or logstore created with a name Alibaba Cloud's SLS refuses gets one `name_refused_by_sls`
warning in serve's log, naming the rule: a setup built against serve should not meet that
refusal for the first time in production. Driven by the official SDK."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aliyun.log import LogClient

from loghubd.testing.process import ServerProcess
from loghubd.testing.waiting import wait_until


def test_names_the_cloud_refuses_are_taken_with_a_warning(
    loghubd_server_factory: Callable[..., ServerProcess],
    sdk_via_proxy: Callable[[ServerProcess], str],
) -> None:
    server = loghubd_server_factory("names")
    client = LogClient(sdk_via_proxy(server), "id", "secret")
    client.create_project("my_project", "")  # taken by serve, refused by the cloud
    client.create_logstore("my_project", "ls", shard_count=1)
    client.create_project("good-project", "")
    client.create_logstore("good-project", "access_log", shard_count=1)
    assert client.get_logstore("my_project", "ls").get_shard_count() == 1

    def two() -> list[dict[str, Any]] | None:
        found = server.events("name_refused_by_sls")
        return found if len(found) >= 2 else None

    seen = wait_until(two, 10, "2 warnings")
    assert [(e["kind"], e["name"], e["level"]) for e in seen] == [
        ("project", "my_project", "warning"),
        ("logstore", "ls", "warning"),
    ]
    assert "lower-case letters, digits and -" in seen[0]["reason"]
    assert seen[1]["reason"] == "must be 3 to 63 characters long, got 2"
    assert all("Alibaba Cloud's SLS would refuse" in e["hint"] for e in seen)
