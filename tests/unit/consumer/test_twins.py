"""`loghubd.consumer.twins`: telling our own checkpoint commits from those of another process
under our consumer name. Table-driven cases, then a model of one shard's checkpoint written by
us and by a twin in any order (hypothesis: the failing sequence is printed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.consumer.twins import (
    CheckpointAudit,
    Finding,
    OurCommits,
    ServerCheckpoint,
    audit_every,
    audit_interval,
)

ME = "host-a-17"


def ours(
    *, task: int = 1, attempts: int = 0, last_sent: str | None = None, started_from: str = ""
) -> OurCommits:
    return OurCommits(
        task=task, attempts=attempts, last_sent=last_sent, started_from=started_from, settled=True
    )


def cp(cursor: str, update_time: int, consumer: str = ME) -> ServerCheckpoint:
    return ServerCheckpoint(cursor=cursor, update_time=update_time, consumer=consumer)


@pytest.mark.parametrize(
    ("case", "mine", "server", "want"),
    [
        ("never committed, no checkpoint", ours(), cp("", 0, ""), Finding.NONE),
        ("the checkpoint we started from", ours(started_from="MTA="), cp("MTA=", 5), Finding.NONE),
        ("our last commit", ours(attempts=3, last_sent="MjA="), cp("MjA=", 9), Finding.NONE),
        ("the server dropped the newline", ours(attempts=1, last_sent="MjA=\n"), cp("MjA=", 9),
         Finding.NONE),
        ("a cursor we never sent, our name", ours(attempts=3, last_sent="MjA="), cp("MzA=", 9),
         Finding.SAME_NAME),
        ("moved before our first commit", ours(started_from="MTA="), cp("MzA=", 9),
         Finding.SAME_NAME),
        ("a forced reset", ours(attempts=3, last_sent="MjA="), cp("MTA=", 9, ""), Finding.RESET),
        ("the new owner", ours(attempts=3, last_sent="MjA="), cp("MzA=", 9, "host-b-3"),
         Finding.OTHER_CONSUMER),
    ],
)  # fmt: skip
def test_one_read(case: str, mine: OurCommits, server: ServerCheckpoint, want: Finding) -> None:
    assert CheckpointAudit(ME).observe(0, mine, server) is want, case


def test_the_same_cursor_committed_again_by_someone_else_shows_in_the_update_time() -> None:
    audit = CheckpointAudit(ME)
    mine = ours(attempts=2, last_sent="MjA=")
    assert audit.observe(0, mine, cp("MjA=", 100)) is Finding.NONE
    # No commit of ours since, yet the checkpoint was written again (a twin caught up to
    # the same end): reported once, not at every read after.
    assert audit.observe(0, mine, cp("MjA=", 200)) is Finding.SAME_NAME
    assert audit.observe(0, mine, cp("MjA=", 200)) is Finding.NONE
    # Our own commit of the same cursor moves the update time too: not foreign.
    mine = ours(attempts=3, last_sent="MjA=")
    assert audit.observe(0, mine, cp("MjA=", 300)) is Finding.NONE


def test_a_foreign_checkpoint_is_reported_once_until_it_changes() -> None:
    audit = CheckpointAudit(ME)
    mine = ours(attempts=2, last_sent="MjA=")
    assert audit.observe(0, mine, cp("MzA=", 100)) is Finding.SAME_NAME
    assert audit.observe(0, mine, cp("MzA=", 100)) is Finding.NONE
    assert audit.observe(0, mine, cp("NDA=", 150)) is Finding.SAME_NAME


def test_a_server_without_update_times_is_judged_by_cursor_only() -> None:
    audit = CheckpointAudit(ME)
    mine = ours(attempts=2, last_sent="MjA=")
    assert audit.observe(0, mine, cp("MjA=", 0)) is Finding.NONE
    assert audit.observe(0, mine, cp("MjA=", 0)) is Finding.NONE
    assert audit.observe(0, mine, cp("MzA=", 0)) is Finding.SAME_NAME


def test_nothing_is_judged_while_a_commit_of_ours_is_unsettled() -> None:
    audit = CheckpointAudit(ME)
    mine = ours(attempts=2, last_sent="MjA=")
    assert audit.observe(0, mine, cp("MjA=", 100)) is Finding.NONE
    unsettled = OurCommits(task=1, attempts=3, last_sent="MzA=", started_from="", settled=False)
    assert audit.observe(0, unsettled, cp("MjA=", 100)) is Finding.NONE
    # What was seen before the unsettled read is forgotten: a later update time is not
    # compared with it.
    mine = ours(attempts=3, last_sent="MzA=")
    assert audit.observe(0, mine, cp("MzA=", 150)) is Finding.NONE


def test_a_new_holding_of_the_shard_starts_a_new_history() -> None:
    audit = CheckpointAudit(ME)
    assert audit.observe(0, ours(task=1, attempts=1, last_sent="MjA="), cp("MjA=", 100)) is (
        Finding.NONE
    )
    # Taken again (task 2) from that checkpoint, nothing committed yet: the older update
    # time belongs to the former holding.
    again = ours(task=2, started_from="MjA=")
    assert audit.observe(0, again, cp("MjA=", 120)) is Finding.NONE


def test_shards_are_independent_and_forgotten_when_let_go() -> None:
    audit = CheckpointAudit(ME)
    mine = ours(attempts=1, last_sent="MjA=")
    assert audit.observe(0, mine, cp("MjA=", 100)) is Finding.NONE
    assert audit.observe(1, mine, cp("MjA=", 100)) is Finding.NONE
    audit.keep_only({1})
    assert audit.observe(0, mine, cp("MjA=", 200)) is Finding.NONE  # no history: not compared
    assert audit.observe(1, mine, cp("MjA=", 200)) is Finding.SAME_NAME


@pytest.mark.parametrize(
    ("interval", "ticks", "want"),
    [
        (0.5, 10, 5.0),
        (1.0, 5, 5.0),
        (5.0, 3, 15.0),
        (1.5, 4, 6.0),  # whole ticks: the fewest lasting 5 s
        (0.3, 17, 5.1),
        (10.0, 3, 30.0),
    ],
)
def test_audits_come_every_few_commit_ticks(interval: float, ticks: int, want: float) -> None:
    assert audit_every(interval) == ticks
    assert audit_interval(interval) == pytest.approx(want)


# -- the model ------------------------------------------------------------------------------


@dataclass
class Shard:
    """One shard's checkpoint on the server, and what we did to it."""

    cursor: str = ""
    update_time: int = 0
    clock: int = 0
    attempts: int = 0
    last_sent: str | None = None
    last_writer: str = ""  # "us" | "twin" | ""
    read_since_write: bool = False
    ours_since_read: bool = False
    history: list[str] = field(default_factory=list)

    def write(self, cursor: str, writer: str) -> None:
        self.clock += 1
        self.cursor, self.update_time, self.last_writer = cursor, self.clock, writer
        self.read_since_write = False
        if writer == "us":
            self.attempts += 1
            self.last_sent = cursor
            self.ours_since_read = True
        self.history.append(f"{writer} commits {cursor}")


CURSORS = st.sampled_from(["MA==", "MQ==", "Mg=="])
STEP = st.one_of(
    st.tuples(st.just("us"), CURSORS),
    st.tuples(st.just("twin"), CURSORS),
    st.tuples(st.just("read"), st.just("")),
)


@given(st.lists(STEP, max_size=40))
def test_a_twin_is_reported_at_the_first_read_that_can_tell_and_we_never_are(
    steps: list[tuple[str, str]],
) -> None:
    audit = CheckpointAudit(ME)
    shard = Shard()
    previous_read = False
    for kind, cursor in steps:
        if kind != "read":
            shard.write(cursor, kind)
            continue
        mine = OurCommits(
            task=1,
            attempts=shard.attempts,
            last_sent=shard.last_sent,
            started_from="",
            settled=True,
        )
        got = audit.observe(0, mine, cp(shard.cursor, shard.update_time))
        if shard.last_writer == "twin" and not shard.read_since_write:
            on_server = "" if shard.last_sent is None else shard.last_sent
            # Telling needs a cursor we did not send, or a write while we sent nothing.
            can_tell = shard.cursor != on_server or (previous_read and not shard.ours_since_read)
            want = Finding.SAME_NAME if can_tell else Finding.NONE
        else:
            want = Finding.NONE  # our own write last, or that write already judged
        shard.history.append(f"read -> {got.value}")
        assert got is want, shard.history
        shard.read_since_write = True
        shard.ours_since_read = False
        previous_read = True
