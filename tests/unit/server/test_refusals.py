"""The refusal log of `loghubd serve`: which lines the throttle lets
through (one per window for each (status, code, key), a bounded number of keys, what was
left out counted in the next line) and the access key id read from `Authorization`
(never the signature)."""

from __future__ import annotations

from loghubd.server.auth import claimed_key_id
from loghubd.server.refusals import RefusalThrottle

SIG = "c2lnbmF0dXJlLXNlY3JldA=="


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def throttle(clock: Clock, max_keys: int = 100) -> RefusalThrottle:
    return RefusalThrottle(window=10.0, max_keys=max_keys, clock=clock)


def test_one_line_per_window_for_each_key_then_the_count_left_out() -> None:
    clock = Clock()
    t = throttle(clock)
    key = (401, "SignatureNotMatch", "LTAIkey")
    assert t.admit(key) == (0, 0)
    for _ in range(41):
        clock.now += 0.2
        assert t.admit(key) is None
    assert t.admit((400, "InvalidCursor", "LTAIkey")) == (0, 0)  # another key: its own line
    clock.now += 10.0
    assert t.admit(key) == (41, 0)
    assert t.admit(key) is None


def test_the_window_counts_from_the_last_line_written() -> None:
    clock = Clock()
    t = throttle(clock)
    key = (404, "LogStoreNotExist", "")
    assert t.admit(key) == (0, 0)
    clock.now += 9.9
    assert t.admit(key) is None
    clock.now += 0.1
    assert t.admit(key) == (1, 0)
    clock.now += 9.9
    assert t.admit(key) is None


def test_made_up_key_ids_stay_bounded_in_memory_and_in_lines() -> None:
    clock = Clock()
    t = throttle(clock, max_keys=5)
    written = [t.admit((401, "InvalidAccessKeyId", f"made-up-{i}")) for i in range(1000)]
    assert sum(w is not None for w in written) == 5
    assert len(t._logged) == 5
    clock.now += 10.0
    # The window is over: the next line reports what the full table left out.
    assert t.admit((401, "InvalidAccessKeyId", "another")) == (0, 995)
    assert t.admit((401, "InvalidAccessKeyId", "yet-another")) == (0, 0)
    assert len(t._logged) == 5


def test_a_forgotten_key_hands_its_count_to_the_next_line() -> None:
    clock = Clock()
    t = throttle(clock, max_keys=1)
    first = (403, "Unauthorized", "a")
    assert t.admit(first) == (0, 0)
    assert t.admit(first) is None
    assert t.admit(first) is None
    clock.now += 10.0
    assert t.admit((403, "Unauthorized", "b")) == (0, 2)


def test_the_key_id_of_a_v1_signature_without_the_signature() -> None:
    assert claimed_key_id({"authorization": f"LOG LTAIkey0001:{SIG}"}) == "LTAIkey0001"
    assert claimed_key_id({"authorization": f"LOG {SIG}"}) == ""  # no ':': no key, no sig


def test_the_key_id_of_a_v4_signature_without_the_signature() -> None:
    value = (
        "SLS4-HMAC-SHA256 Credential=LTAIkey0002/20260101/cn-hangzhou/sls/aliyun_v4_request,"
        f"Signature={SIG}"
    )
    assert claimed_key_id({"authorization": value}) == "LTAIkey0002"
    assert claimed_key_id({"authorization": f"SLS4-HMAC-SHA256 Signature={SIG}"}) == ""


def test_no_or_another_authorization_names_no_key() -> None:
    assert claimed_key_id({}) == ""
    assert claimed_key_id({"authorization": f"Bearer {SIG}"}) == ""
    assert len(claimed_key_id({"authorization": "LOG " + "k" * 500 + ":x"})) == 64
