"""`http_credentials_in_clear`: which `http` sink settings send credentials where anyone on
the path can read them (the daemon warns at start)."""

from __future__ import annotations

from typing import Any

import pytest

from loghubd.processors.http import parse, sends_credentials_in_clear


@pytest.mark.parametrize(
    ("options", "in_clear"),
    [
        ({"url": "http://ingest.example.com/v1", "bearer_token": "t"}, True),
        ({"url": "http://u:pw@ingest.example.com/v1"}, True),
        ({"url": "http://10.0.0.5/v1", "headers": {"authorization": "Splunk t"}}, True),
        ({"url": "https://ingest.example.com/v1", "bearer_token": "t"}, False),
        ({"url": "http://ingest.example.com/v1"}, False),  # nothing to read
        ({"url": "http://ingest.example.com/v1", "headers": {"X-Team": "a"}}, False),
        ({"url": "http://127.0.0.1:8080/v1", "bearer_token": "t"}, False),  # this host
        ({"url": "http://localhost:8080/v1", "bearer_token": "t"}, False),
        ({"url": "http://[::1]:8080/v1", "bearer_token": "t"}, False),
    ],
)
def test_sends_credentials_in_clear(options: dict[str, Any], in_clear: bool) -> None:
    assert sends_credentials_in_clear(parse(options)) is in_clear
