"""`loghubd.sls.endpoint.service_key`: two spellings of one service compare equal, two
services do not (the config check refuses two sources on one group by it)."""

from __future__ import annotations

import pytest

from loghubd.sls.endpoint import service_key

SAME = [
    ("http://127.0.0.1:7100", "http://localhost:7100/"),
    ("http://127.0.0.1:7100", "HTTP://LOCALHOST:7100"),
    ("http://[::1]:7100", "http://127.0.0.1:7100"),
    ("https://cn-hangzhou.log.aliyuncs.com", "https://cn-hangzhou-intranet.log.aliyuncs.com"),
    ("https://cn-hangzhou.log.aliyuncs.com", "http://cn-hangzhou-vpc.log.aliyuncs.com"),
    ("https://cn-hangzhou.log.aliyuncs.com", "https://proj.cn-hangzhou.log.aliyuncs.com."),
    ("http://sls.example.com", "http://SLS.example.com:80/"),
    ("https://sls.example.com", "https://sls.example.com:443"),
]
DIFFERENT = [
    ("http://127.0.0.1:7100", "http://127.0.0.1:7101"),
    ("https://cn-hangzhou.log.aliyuncs.com", "https://cn-shanghai.log.aliyuncs.com"),
    ("http://sls.example.com", "https://sls.example.com"),
    ("http://sls.example.com", "http://sls2.example.com"),
    ("http://10.0.0.1:7100", "http://127.0.0.1:7100"),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_spellings_of_one_service_are_one(a: str, b: str) -> None:
    assert service_key(a) == service_key(b)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_different_services_are_told_apart(a: str, b: str) -> None:
    assert service_key(a) != service_key(b)


def test_an_endpoint_without_a_host_is_refused() -> None:
    with pytest.raises(ValueError, match="has no host"):
        service_key("http://:7100")
