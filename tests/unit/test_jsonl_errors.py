"""What the operator reads when the `jsonl` processor cannot use its files: each failure, made
for real on real files, says what was being done and to which path, in words, in the text the
daemon records (`describe_error`: the logs, `/status`'s `processor_error`, `/readyz`, the dead
letter's note), and stays the OSError it was (type, errno) for the code that looks at it."""

from __future__ import annotations

import errno
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from loghubd.backoff import Backoff
from loghubd.consumer.processing import DeadLettered, RetryPolicy, process_with_retry
from loghubd.errors import describe_error
from loghubd.models import Batch
from loghubd.ops.metrics import Metrics
from loghubd.plugins.loaded import load_factory
from loghubd.processors.jsonl import JsonlFactory, JsonlProcessor
from loghubd.protocol import cursor as cursors
from loghubd.testing import RecordingTracker, make_batch, make_context

Immutable = Callable[[Path], None]  # the `immutable` fixture (tests/conftest.py)


@contextmanager
def started(out: Path, **options: object) -> Iterator[JsonlProcessor]:
    p = JsonlFactory({"path": str(out), **options})(0)
    p.initialize(0)
    try:
        yield p
    finally:
        p.shutdown(RecordingTracker())


def letter() -> Batch:
    raw = make_batch([{"i": "1"}]).raw
    return Batch(0, cursors.from_seq(0, 40), cursors.from_seq(0, 41), raw, 1)


# Each case makes the failure for real and runs the call that hits it.
def start_under_a_file(out: Path, immutable: Immutable) -> None:
    (out.parent / "file").write_text("not a directory")
    JsonlProcessor(out.parent / "file" / "out", 0).initialize(0)


def write_to_an_immutable_file(out: Path, immutable: Immutable) -> None:
    with started(out) as p:
        immutable(out / "shard-0.jsonl")
        p.process(make_batch([{"i": "1"}]), RecordingTracker())


def write_after_the_directory_became_a_file(out: Path, immutable: Immutable) -> None:
    with started(out) as p:
        out.rename(out.with_name("moved"))
        out.write_text("a file where the output directory was")
        p.process(make_batch([{"i": "1"}]), RecordingTracker())


def rotate_in_an_immutable_directory(out: Path, immutable: Immutable) -> None:
    with started(out, rotate_bytes=1) as p:
        p.process(make_batch([{"i": "1"}]), RecordingTracker())
        immutable(out)
        p.process(make_batch([{"i": "2"}]), RecordingTracker())  # rotates first


def replay_into_an_immutable_directory(out: Path, immutable: Immutable) -> None:
    factory = JsonlFactory({"path": str(out)})
    factory.bind(make_context(replay=True))
    p = factory(0)
    p.initialize(0)
    immutable(out)
    p.process(letter(), RecordingTracker())


def start_while_another_holds_the_shard(out: Path, immutable: Immutable) -> None:
    with started(out):
        JsonlFactory({"path": str(out)})(0).initialize(0)


EPERM = r"Operation not permitted \(EPERM\)"
# (the call, the text as a regular expression with {tmp} and {out} for those directories,
# the type and errno the caller still gets)
CASES: list[tuple[Callable[[Path, Immutable], None], str, type[Exception], int | None]] = [
    (
        start_under_a_file,
        r"cannot create directory {tmp}/file/out: Not a directory \(ENOTDIR\)",
        NotADirectoryError,
        errno.ENOTDIR,
    ),
    (
        write_to_an_immutable_file,
        r"cannot write {out}/shard-0\.jsonl: " + EPERM,
        PermissionError,
        errno.EPERM,
    ),
    (
        write_after_the_directory_became_a_file,
        # found when the shard's lock file is checked, before the write (`_keep_shard`)
        r"cannot write {out}/shard-0\.jsonl: {out}/\.shard-0\.lock: Not a directory \(ENOTDIR\)",
        NotADirectoryError,
        errno.ENOTDIR,
    ),
    (
        rotate_in_an_immutable_directory,
        r"cannot rename {out}/shard-0\.jsonl to {out}/shard-0\.\d{8}T[\d.]+Z\.jsonl: " + EPERM,
        PermissionError,
        errno.EPERM,
    ),
    (
        replay_into_an_immutable_directory,
        r"cannot write {out}/shard-0\.replay-\d+-\d+\.jsonl: "
        r"{out}/\.shard-0\.replay-\d+-\d+\.jsonl\.[\w-]+\.tmp: " + EPERM,
        PermissionError,
        errno.EPERM,
    ),
    (
        start_while_another_holds_the_shard,
        r"jsonl: {out}/shard-0\.jsonl is being written by another processor \(.*\); "
        r"give each source its own path",
        RuntimeError,
        None,
    ),
]


@pytest.mark.parametrize(
    ("case", "expected", "kind", "code"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_the_error_says_what_failed_on_which_path(
    tmp_path: Path,
    case: Callable[[Path, Immutable], None],
    expected: str,
    kind: type[Exception],
    code: int | None,
    immutable: Immutable,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(Exception, match=re.escape(str(tmp_path))) as raised:
        case(out, immutable)
    text = describe_error(raised.value)  # what the daemon records and shows
    where = {"{tmp}": re.escape(str(tmp_path)), "{out}": re.escape(str(out))}
    pattern = re.sub(r"\{tmp\}|\{out\}", lambda m: where[m[0]], expected)
    assert re.fullmatch(pattern, text), text
    assert isinstance(raised.value, kind) and getattr(raised.value, "errno", None) == code


def test_a_batch_that_cannot_be_written_is_dead_lettered_naming_the_file(
    tmp_path: Path, immutable: Immutable
) -> None:
    """Through the failure policy, as the daemon runs it: the reason `/status` and `/readyz`
    show while the batch fails, and the error of its dead letter (`dead-letters list`)."""
    out, letters = tmp_path / "out", tmp_path / "dead"
    out.mkdir()
    factory = JsonlFactory({"path": str(out)})
    processor = load_factory("jsonl", factory).processor(0)
    reasons: list[str] = []
    policy = RetryPolicy(
        max_attempts=1,
        on_failure="dead_letter",
        backoff=Backoff(initial=0.001, cap=0.002, jitter=0.0),
        dead_letter_dir=letters,
    )

    said = f"cannot write {out / 'shard-0.jsonl'}: Operation not permitted (EPERM)"

    async def failing_write() -> object:
        await processor.initialize(0)
        immutable(out / "shard-0.jsonl")
        try:
            return await process_with_retry(
                processor,
                make_batch([{"i": "1"}]),
                RecordingTracker(),
                policy,
                Metrics(),
                mark_done=lambda: None,
                bind={},
                failing=reasons.append,
            )
        finally:
            await processor.shutdown(RecordingTracker())

    outcome = anyio.run(failing_write)
    assert isinstance(outcome, DeadLettered)
    assert reasons[0].endswith(f": {said}"), reasons  # `attempt 1 at cursor ...: <said>`
    note = json.loads(outcome.path.read_text())
    assert note["error"] == said
