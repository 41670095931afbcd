"""An SDK-era "project endpoint" (`http://<project>.<host>`) is doubled by `base_url`; the
hint says so, and only where the host really begins with `<project>.`: a project named like
the region of a right endpoint (`cn-hangzhou` at `cn-hangzhou.log.aliyuncs.com`) gets none.
The client adds it to the "does not resolve" cause of a real failed lookup."""

from __future__ import annotations

import aiohttp
import anyio
import pytest

from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient, Unreachable
from loghubd.sls.endpoint import project_in_host


@pytest.mark.parametrize(
    ("endpoint", "project", "region"),
    [
        ("http://mig.127.0.0.1:7100", "mig", "http://127.0.0.1:7100"),
        ("https://mig.cn-hangzhou.log.aliyuncs.com", "mig", "https://cn-hangzhou.log.aliyuncs.com"),
        ("http://MIG.localhost:7100/", "mig", "http://localhost:7100"),
        ("https://cn-hangzhou.log.aliyuncs.com", "cn-hangzhou", ""),  # the project's own region
        ("https://cn-hangzhou.log.aliyuncs.com", "mig", ""),
        ("http://127.0.0.1:7100", "mig", ""),  # loghubd serve: the project goes in Host only
        ("https://migx.cn-hangzhou.log.aliyuncs.com", "mig", ""),
        ("https://mig-cn-hangzhou.log.aliyuncs.com", "mig", ""),
    ],
)
def test_the_hint_names_the_region_endpoint(endpoint: str, project: str, region: str) -> None:
    hint = project_in_host(endpoint, project)
    if not region:
        assert hint == ""
    else:
        assert hint == (
            f"the endpoint seems to name project {project!r} already (loghubd adds it to the "
            f"host): give the region endpoint {region}"
        )


def test_a_doubled_host_that_does_not_resolve_gets_the_hint() -> None:
    async def call(endpoint: str) -> Unreachable:
        async with aiohttp.ClientSession() as session:
            client = SlsClient(
                session, endpoint, "mig", lambda: Credentials("", ""), request_timeout=0.5
            )
            with pytest.raises(Unreachable) as raised:
                await client.list_groups("app")
            return raised.value

    # `.invalid` never resolves (RFC 6761): requests go to mig.mig.nowhere.invalid
    named = anyio.run(call, "http://mig.nowhere.invalid:7100")
    assert "the host name mig.mig.nowhere.invalid does not resolve" in named.cause, named.cause
    assert named.cause.endswith("give the region endpoint http://nowhere.invalid:7100")
    plain = anyio.run(call, "http://other.nowhere.invalid:7100")
    assert "does not resolve" in plain.cause and "seems to name" not in plain.cause
