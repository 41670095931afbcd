"""docs/jsonl.md names the files a dead-letter replay writes as the processor writes them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from loghubd.processors.jsonl import JsonlFactory
from loghubd.testing import RecordingTracker, make_batch, make_context

DOC = Path(__file__).resolve().parents[2] / "docs" / "jsonl.md"


def test_the_docs_name_a_replays_file_and_its_temporary_file_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = DOC.read_text()
    replay_section = text[text.index("## Dead letters replayed") :]
    found = re.search(r"e\.g\. (shard-3\.replay-\S+\.jsonl)", replay_section)
    assert found, "no example name in the replay section"
    assert "`.<name>.<pid>-<8 hex digits>.tmp`" in replay_section
    assert ".part" not in replay_section
    opened: list[str] = []
    real_open = os.open

    def noting(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.path.basename(str(path)))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", noting)
    factory = JsonlFactory({"path": str(tmp_path)})
    factory.bind(make_context(replay=True))
    p = factory(3)
    p.initialize(3)
    # The example's letter: positions 1500 to 1502 of shard 3 on `loghubd serve`.
    p.process(
        make_batch([{"i": "1"}, {"i": "2"}], shard=3, start=1500, group_size=1), RecordingTracker()
    )
    p.shutdown(RecordingTracker())
    assert [f.name for f in tmp_path.glob("shard-3.replay-*")] == [found.group(1)]
    [temporary] = [name for name in opened if name.startswith(".shard-3.replay-")]
    pattern = rf"\.{re.escape(found.group(1))}\.{os.getpid()}-[0-9a-f]{{8}}\.tmp"
    assert re.fullmatch(pattern, temporary), temporary
