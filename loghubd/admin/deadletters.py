"""`loghubd dead-letters`: list the batches in `consumer.dead_letter_dir`, print their logs, or
replay them through the configured processor, removing each only after it succeeded.

A dead letter is a pair written by the daemon (`consumer/processing.py`): `<stem>.pb`, the raw
LogGroupList, and then `<stem>.json`, where it came from (shard, cursors) and why it failed;
each is written whole or not at all. A `.pb` that no note names is what a daemon left when it
stopped between the two: that batch was never counted as set aside (its checkpoint stayed
before it, and it was read again), so `list` shows it as incomplete, safe to delete. Replay
makes one processor per shard from the config's `[processor]`, as `loghubd run` would, feeds it
each batch in the order they were written, and treats the batch as done when `process`
returned without raising and the processor marked it done (`save_checkpoint` or a deferred
ack) by the time the shard's processor was flushed and shut down. A factory with `bind` gets
the source's `ProcessorContext` first, as in the daemon (with the config's credentials
provider running), so processors that need it (parquet, postgres, spark) can replay.

A note that cannot be read is not skipped: `list` names it as unreadable, `print` and
`replay` count it as not done (exit 1), and it stays. A relative `consumer.dead_letter_dir`
is read from the current directory, as the daemon reads it from its own working directory;
a configured directory that does not exist yet holds no dead letters (exit 0).

One replay at a time per directory: `replay` holds an exclusive `flock` on `.replay.lock` in
it, and a second one started meanwhile stops (exit 1) before reading a letter. Two replays of
the same letters would each feed them to the processor (an `http` sink would send twice).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from loghubd.admin.errors import FAILED, NOT_FOUND, OK, USAGE, UserError
from loghubd.admin.helpfmt import DefaultsFormatter
from loghubd.config import Config, SourceSpec
from loghubd.consumer.tracking import StopFlag
from loghubd.files import lock_exclusive
from loghubd.models import Batch
from loghubd.plugins.api import ProcessorContext, Tracker
from loghubd.plugins.loaded import LoadedFactory
from loghubd.sls import provider_for

# A .pb without its note is only called incomplete once it is this old (seconds): the daemon
# writes the note right after it, and `list` may run in between.
INCOMPLETE_AFTER_S = 60.0
REPLAY_LOCK = ".replay.lock"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    note: Path  # the .json
    data: Path  # the .pb
    shard: int
    cursor: str
    next_cursor: str
    log_groups: int
    error: str
    # Where the batch came from (project, logstore, group), as the daemon wrote it; empty
    # for letters written before notes had it.
    origin: tuple[tuple[str, str], ...] = ()

    def belongs_to(self, spec: SourceSpec) -> bool:
        """Whether this letter is `spec`'s (a letter without an origin is anybody's)."""
        return not self.origin or dict(self.origin) == dict(spec.letter_origin)

    def origin_text(self) -> str:
        o = dict(self.origin)
        return f"{o.get('project')}/{o.get('logstore')} group {o.get('group')}"

    def batch(self) -> Batch:
        raw = self.data.read_bytes()
        return Batch(self.shard, self.cursor, self.next_cursor, raw, self.log_groups, len(raw))

    def remove(self) -> None:
        self.data.unlink(missing_ok=True)
        self.note.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A note (`.json`) that does not say what its dead letter is: the letter cannot be
    replayed, and is counted and named rather than skipped (it stays until someone looks)."""

    note: Path
    reason: str

    def line(self) -> str:
        return (
            f"{self.note}: the note cannot be read ({self.reason}): repair it, or remove it "
            "and its .pb"
        )


@dataclass(frozen=True, slots=True)
class Found:
    letters: list[DeadLetter]
    unreadable: list[Unreadable]
    incomplete: list[Path] = field(default_factory=list)  # a .pb no note names

    @property
    def total(self) -> int:
        return len(self.letters) + len(self.unreadable)


def scan(directory: Path) -> Found:
    """The dead letters under `directory`, oldest first (their names start with the time),
    and the notes that cannot be read."""
    found, unreadable = [], []
    for note in sorted(directory.glob("shard-*/*.json"), key=lambda p: p.name):
        try:
            meta = json.loads(note.read_text())
            if not isinstance(meta, dict):
                raise TypeError(f"a JSON {type(meta).__name__}, not an object")
            found.append(
                DeadLetter(
                    note=note,
                    data=note.with_name(str(meta.get("data") or note.stem + ".pb")),
                    shard=int(meta["shard"]),
                    cursor=str(meta.get("cursor", "")),
                    next_cursor=str(meta.get("next_cursor", "")),
                    log_groups=int(meta.get("log_groups", 0)),
                    error=str(meta.get("error", "")),
                    origin=_origin(meta.get("origin")),
                )
            )
        except KeyError as exc:
            unreadable.append(Unreadable(note, f"no {exc} key"))
        except (OSError, ValueError, TypeError) as exc:
            unreadable.append(Unreadable(note, str(exc) or type(exc).__name__))
    named = {d.data for d in found} | {u.note.with_suffix(".pb") for u in unreadable}
    # A daemon writes the note right after the data: a young .pb is one being set aside.
    settled = time.time() - INCOMPLETE_AFTER_S
    incomplete = sorted(
        (p for p in directory.glob("shard-*/*.pb") if p not in named and _older(p, settled)),
        key=lambda p: p.name,
    )
    return Found(found, unreadable, incomplete)


def _origin(value: object) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise TypeError(f"origin is a JSON {type(value).__name__}, not an object")
    return tuple(sorted((str(k), str(v)) for k, v in value.items()))


def _older(path: Path, than: float) -> bool:
    try:
        return path.stat().st_mtime < than
    except FileNotFoundError:  # its letter was just replayed and removed
        return False


def find(directory: Path) -> list[DeadLetter]:
    """The readable dead letters under `directory`, oldest first (`scan` also names the
    unreadable ones)."""
    return scan(directory).letters


@dataclass(slots=True)
class _Tracker:
    """The checkpoint handle replayed batches get: records whether the batch was finished."""

    cursor: str
    done: bool = False
    acks: list[_Ack] = field(default_factory=list)
    stopping: StopFlag = field(default_factory=StopFlag)  # a replay is not stopped midway
    problem: str = ""  # why the processor is still retrying the batch itself ("" once not)

    def save_checkpoint(self, persist: bool = True) -> None:
        self.done = True

    def note_problem(self, reason: str) -> None:
        # The processor logs its own retries (http_retry, postgres_retry): kept, not shown.
        self.problem = reason

    def get_checkpoint(self) -> str:
        return self.cursor

    def defer(self) -> _Ack:
        ack = _Ack()
        self.acks.append(ack)
        return ack

    @property
    def finished(self) -> bool:
        return self.done or (bool(self.acks) and all(a.finished for a in self.acks))


if TYPE_CHECKING:  # the replay hands processors what the daemon does: all of Tracker
    _conforms: type[Tracker] = _Tracker


@dataclass(slots=True)
class _Ack:
    finished: bool = False

    def done(self, persist: bool = False) -> None:
        self.finished = True


async def replay_source(
    factory: LoadedFactory, letters: list[DeadLetter], spec: SourceSpec, consumer: str
) -> tuple[int, list[str]]:
    """`replay` with the factory bound to `spec`'s source, as `loghubd run` binds it: the
    credentials provider refreshes (file, command) while the replay runs."""
    provider = provider_for(spec.source)
    context = ProcessorContext.of_source(spec, consumer, provider.get, replay=True)
    async with anyio.create_task_group() as tg:
        await tg.start(provider.run_refresh)
        if factory.bind is not None:
            factory.bind(context)
        try:
            result = await replay(factory, letters)
        finally:
            tg.cancel_scope.cancel()
    return result


async def replay(factory: LoadedFactory, letters: list[DeadLetter]) -> tuple[int, list[str]]:
    """Feed `letters` to processors made by `factory`; remove each one that succeeded.
    Returns (replayed, failures as lines)."""
    ok, failures = 0, []
    by_shard: dict[int, list[DeadLetter]] = {}
    for letter in letters:
        by_shard.setdefault(letter.shard, []).append(letter)
    if factory.start is not None:
        await factory.start()
    try:
        for shard, batch_letters in sorted(by_shard.items()):
            done, failed = await _replay_shard(factory, shard, batch_letters)
            ok += done
            failures += failed
    finally:
        if factory.close is not None:
            await factory.close()
    return ok, failures


async def _replay_shard(
    factory: LoadedFactory, shard: int, letters: list[DeadLetter]
) -> tuple[int, list[str]]:
    """One shard's letters through one processor. A failure of the processor itself (its
    start, flush or shutdown) fails this shard's letters (they stay), not the other shards'."""
    ok, failures = 0, []
    tried: list[tuple[DeadLetter, _Tracker]] = []
    processor = factory.processor(shard)
    try:
        await processor.initialize(shard)
    except Exception as exc:
        return 0, [f"{letter.note}: the processor could not start: {exc!r}" for letter in letters]
    try:
        for letter in letters:
            tracker = _Tracker(letter.cursor)
            try:
                reread = await processor.process(letter.batch(), tracker)
            except Exception as exc:
                failures.append(f"{letter.note}: {exc!r}")
                continue
            if isinstance(reread, str):
                failures.append(f"{letter.note}: {declined(letter, reread)}")
                continue
            tried.append((letter, tracker))
        if processor.flush is not None:
            await processor.flush()
    except Exception as exc:  # the flush: nothing tried is known to be durable
        failures += [f"{letter.note}: the processor's flush failed: {exc!r}" for letter, _ in tried]
        tried = []
    try:
        await processor.shutdown(_Tracker(""))
    except Exception as exc:
        failures += [
            f"{letter.note}: the processor's shutdown failed: {exc!r}" for letter, _ in tried
        ]
        tried = []
    for letter, tracker in tried:
        if tracker.finished:
            letter.remove()
            ok += 1
        else:
            failures.append(f"{letter.note}: the processor did not mark it done")
    return ok, failures


def declined(letter: DeadLetter, reread: str) -> str:
    """Why a processor that answered a replayed batch with a cursor to read from kept it."""
    return (
        f"the processor did not take it: it asked to read the shard from {reread} instead of "
        f"{letter.cursor}: a sink that stores its own position is past this range and cannot "
        "take it back in order; replay it through another processor (jsonl), or "
        "`loghubd dead-letters print` it and load the lines yourself"
    )


def print_logs(letters: list[DeadLetter]) -> list[str]:
    """Print each letter's logs as JSON lines; the letters that could not be read, as lines."""
    failures = []
    for letter in letters:
        try:
            batch = letter.batch()
        except OSError as exc:
            failures.append(f"{letter.note}: its data {letter.data} cannot be read ({exc})")
            continue
        for record in batch.logs():
            print(json.dumps(dict(record), default=str))
    return failures


def add_parser(sub: Any, load: Callable[[str | None], Config | None]) -> None:
    p = sub.add_parser(
        "dead-letters",
        formatter_class=DefaultsFormatter,
        help="list, print or replay the batches in consumer.dead_letter_dir",
        description="list: one line per dead letter. print: their logs as JSON lines. replay: "
        "through the config's processor; each dead letter is removed only after it succeeded.",
    )
    p.add_argument("action", choices=["list", "print", "replay"])
    p.add_argument("-c", "--config", required=True, help="the daemon's TOML config file")
    p.add_argument(
        "--dir",
        help="the dead-letter directory, which must exist (default: consumer.dead_letter_dir; "
        "relative to the current directory, as the daemon reads it from its working directory)",
    )
    p.add_argument("--source", help="with several [sources.*]: which one")
    p.add_argument(
        "--letter",
        action="append",
        metavar="NOTE",
        help="only this dead letter (its note, as `list` names it: a path or the file name); "
        "repeatable",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list: each letter's whole error")
    p.set_defaults(func=lambda a: _run(a, load(a.config)))


def _run(args: argparse.Namespace, cfg: Config | None) -> int:
    assert cfg is not None  # -c is required
    specs = list(cfg.sources)
    if args.source:
        specs = [s for s in specs if s.name == args.source]
        if not specs:
            names = ", ".join(s.name for s in cfg.sources)
            raise UserError(USAGE, f"--source {args.source}: the config has {names}")
    if len(specs) > 1:
        names = ", ".join(s.name for s in specs)
        raise UserError(USAGE, f"the config has several sources ({names}): pick one with --source")
    spec = specs[0]
    directory = _directory(args.dir, spec.consumer.dead_letter_dir)
    lock = _replay_lock(directory) if args.action == "replay" else None
    try:
        return _act(args.action, spec, directory, cfg, args.letter, args.verbose)
    finally:
        if lock is not None:
            os.close(lock)


def _replay_lock(directory: Path) -> int | None:
    """The replay lock of `directory` (None when it does not exist: nothing to replay)."""
    if not directory.is_dir():
        return None
    try:
        lock = lock_exclusive(directory / REPLAY_LOCK)
    except OSError as exc:  # a read-only directory, say: a replay removes what it replays
        raise UserError(
            FAILED,
            f"cannot take the replay lock {directory / REPLAY_LOCK}: "
            f"{exc.strerror or exc}; a replay removes each letter it replays, so it must be "
            f"able to write in {directory}",
        ) from exc
    if lock is None:
        raise UserError(
            FAILED,
            f"another `loghubd dead-letters replay` is running on {directory} (it holds "
            f"{REPLAY_LOCK}): wait for it to end, then run this again for what it left",
        )
    return lock


def _act(
    action: str,
    spec: SourceSpec,
    directory: Path,
    cfg: Config,
    only: list[str] | None = None,
    verbose: bool = False,
) -> int:
    found = scan(directory) if directory.is_dir() else Found([], [])
    # Several sources may share the directory: only this source's letters are its own.
    others = [d for d in found.letters if not d.belongs_to(spec)]
    found = Found(
        [d for d in found.letters if d.belongs_to(spec)], found.unreadable, found.incomplete
    )
    if only:
        found, others = _only(found, only, directory), []
    if action == "list":
        for d in found.letters:
            error = d.error if verbose else _short_error(d.error)
            print(f"{d.note}  shard {d.shard}  {d.log_groups} log groups  {error}")
        for u in found.unreadable:
            print(f"{u.note}  unreadable: {u.reason}")
        for d in others:
            print(f"{d.note}  another source's: {d.origin_text()} (not {spec.name}'s)")
        for pb in found.incomplete:
            print(
                f"{pb}  incomplete: no note names it (the daemon stopped while setting the "
                "batch aside, and read it again): safe to delete"
            )
        bad = f" ({len(found.unreadable)} unreadable)" if found.unreadable else ""
        if not directory.exists():
            bad = " (it does not exist yet: the daemon makes it for the first dead letter)"
        mine = f" for {spec.source.project}/{spec.source.logstore} group {spec.consumer.group}"
        more = f", {len(others)} of other sources" if others else ""
        print(f"{found.total} dead letter(s){mine if others else ''} in {directory}{bad}{more}")
        return OK
    if action == "print":
        failures = [u.line() for u in found.unreadable] + print_logs(found.letters)
        for line in failures:
            print(f"not printed: {line}", file=sys.stderr)
        return FAILED if failures else OK
    replayed, failures = 0, [u.line() for u in found.unreadable]
    if found.letters:  # no processor is made (a database connected to) for nothing
        from loghubd.plugins.manager import Plugins

        factory = Plugins().create(spec.processor.name, spec.processor.selected_options)
        consumer = f"{cfg.consumer.name or socket.gethostname()}-replay"
        replayed, failed = anyio.run(replay_source, factory, found.letters, spec, consumer)
        failures += failed
    for line in failures:
        print(f"not replayed: {line}", file=sys.stderr)
    print(
        f"replayed {replayed} of {found.total} dead letter(s) in {directory} "
        f"through {spec.processor.name}"
    )
    return FAILED if failures else OK


def _short_error(error: str, width: int = 200) -> str:
    """One line's worth of an error: its start and its end (where a database puts the
    constraint's name), the middle elided; `--verbose` gives it whole."""
    error = " ".join(error.split())
    if len(error) <= width:
        return error
    half = (width - 5) // 2
    return f"{error[:half]} ... {error[-half:]}"


def _only(found: Found, wanted: list[str], directory: Path) -> Found:
    """The letters `--letter` names (a note's path or file name); UserError for a name that
    is no letter of this source."""
    by_name = {d.note.name: d for d in found.letters}
    by_path = {str(d.note.resolve()): d for d in found.letters}
    picked = []
    for name in wanted:
        letter = by_name.get(name) or by_path.get(str(Path(name).resolve()))
        if letter is None:
            raise UserError(
                NOT_FOUND,
                f"--letter {name}: no dead letter of this source has that note in {directory} "
                "(`loghubd dead-letters list` names them)",
            )
        if letter not in picked:
            picked.append(letter)
    return Found(picked, [], [])


def _directory(given: str | None, configured: str) -> Path:
    """The dead-letter directory as an absolute path. A relative `consumer.dead_letter_dir`
    is resolved as the daemon resolves it: against the working directory (the daemon's is
    its unit's WorkingDirectory=, /var/lib/loghubd in config/loghubd.service and the image).
    The configured one may not exist yet: the daemon makes it when it first sets a batch
    aside, so none means none set aside. One given with --dir must exist."""
    if given:
        directory = Path(given).absolute()
        if not directory.is_dir():
            why = "is not a directory" if directory.exists() else "does not exist"
            raise UserError(USAGE, f"--dir {directory} {why}")
        return directory
    directory = Path(configured).absolute()
    if directory.exists() and not directory.is_dir():
        raise UserError(
            USAGE, f"consumer.dead_letter_dir {directory} is not a directory: fix the key"
        )
    if not directory.exists() and not Path(configured).is_absolute():
        print(
            f"note: consumer.dead_letter_dir {configured!r} is relative: read as {directory} "
            "(from the current directory, as the daemon reads it from its own working "
            "directory): run this where the daemon runs, or give --dir",
            file=sys.stderr,
        )
    return directory
