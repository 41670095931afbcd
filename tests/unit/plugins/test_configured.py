"""`unknown_processors`, table-driven: the keys of a loaded config that name no installed
processor (a misspelt option table, a `name` choosing nothing), each named as the config
names it, with where it was given."""

from __future__ import annotations

import pytest

from loghubd.config import Config, ProcessorConfig, SourceSpec, loads
from loghubd.plugins.configured import unknown_processors
from loghubd.plugins.manager import Plugins
from tests.unit.test_config import BASE

INSTALLED = ("http", "jsonl", "null", "parquet", "stdout")
LISTED = "installed: http, jsonl, null, parquet, stdout"
JSNOL = f"no processor is named 'jsnol' (did you mean jsonl?); {LISTED}"


def entry(name: str, processor: str = "") -> str:
    return f"""
[[sources]]
name = "{name}"
endpoint = "http://127.0.0.1:7100"
project = "proj"
logstore = "{name}"
[sources.consumer]
group = "grp"
{processor}"""


CASES: list[tuple[str, str, dict[str, str], list[str]]] = [
    # name, TOML, environ, the problems (origin "f.toml" unless an env var)
    ("the default alone", BASE, {}, []),
    ("the chosen table", BASE + "[processor.jsonl]\npath = '/x'\n", {}, []),
    (
        "tables of installed processors not chosen stay",
        BASE + "[processor]\nname = 'jsonl'\n[processor.parquet]\npath = '/p'\n[processor.null]\n",
        {},
        [],
    ),
    (
        "a misspelt table",
        BASE + "[processor]\nname = 'jsonl'\n[processor.jsnol]\npath = '/x'\n",
        {},
        [f"processor.jsnol: {JSNOL} [f.toml]"],
    ),
    (
        "an empty misspelt table",
        BASE + "[processor.parquett]\n",
        {},
        [
            "processor.parquett: no processor is named 'parquett' (did you mean parquet?); "
            f"{LISTED} [f.toml]"
        ],
    ),
    (
        "nothing close",
        BASE + "[processor.kafka]\nbrokers = ['b:9092']\n",
        {},
        [f"processor.kafka: no processor is named 'kafka'; {LISTED} [f.toml]"],
    ),
    (
        "a table only an env var gives",
        BASE,
        {"LOGHUBD_PROCESSOR_JSNOL__PATH": "/x"},
        [
            "processor.jsnol: no processor is named 'jsnol' (did you mean jsonl?); "
            f"{LISTED} [LOGHUBD_PROCESSOR_JSNOL__PATH]"
        ],
    ),
    (
        "a chosen name and its table, both misspelt: one run says both",
        BASE + "[processor]\nname = 'jsnol'\n[processor.jsnol]\npath = '/x'\n",
        {},
        [
            f"processor.name: no processor is named 'jsnol' (did you mean jsonl?); {LISTED} "
            "[f.toml]",
            f"processor.jsnol: no processor is named 'jsnol' (did you mean jsonl?); {LISTED} "
            "[f.toml]",
        ],
    ),
    (
        "an entry's own table",
        entry("app", "[sources.processor.parqet]\npath = '/p'\n") + entry("audit"),
        {},
        [
            "sources.app.processor.parqet: no processor is named 'parqet' (did you mean "
            f"parquet?); {LISTED} [f.toml]"
        ],
    ),
    (
        "a shared table: once, under [processor]",
        "[processor.jsnol]\npath = '/x'\n" + entry("app") + entry("audit"),
        {},
        [f"processor.jsnol: {JSNOL} [f.toml]"],
    ),
    (
        "an entry's own name",
        entry("app", "[sources.processor]\nname = 'nul'\n") + entry("audit"),
        {},
        [
            "sources.app.processor.name: no processor is named 'nul' (did you mean null?); "
            f"{LISTED} [f.toml]"
        ],
    ),
    (
        "a shared name two entries take: once",
        "[processor]\nname = 'stdot'\n" + entry("app") + entry("audit"),
        {},
        [
            "processor.name: no processor is named 'stdot' (did you mean stdout?); "
            f"{LISTED} [f.toml]"
        ],
    ),
    (
        "a shared name every entry overrides is still checked",
        "[processor]\nname = 'stdot'\n" + entry("app", "[sources.processor]\nname = 'null'\n"),
        {},
        [
            "processor.name: no processor is named 'stdot' (did you mean stdout?); "
            f"{LISTED} [f.toml]"
        ],
    ),
    (
        "an entry's table by env var",
        entry("app"),
        {"LOGHUBD_SOURCES_APP__PROCESSOR__JSNOL__PATH": "/x"},
        [
            "sources.app.processor.jsnol: no processor is named 'jsnol' (did you mean jsonl?); "
            f"{LISTED} [LOGHUBD_SOURCES_APP__PROCESSOR__JSNOL__PATH]"
        ],
    ),
]


@pytest.mark.parametrize(
    ("text", "environ", "problems"), [pytest.param(*case[1:], id=case[0]) for case in CASES]
)
def test_unknown_processors(text: str, environ: dict[str, str], problems: list[str]) -> None:
    cfg = loads(text, environ, origin="f.toml")
    assert unknown_processors(cfg, INSTALLED) == problems


def test_against_the_installed_plugins() -> None:
    cfg = loads(BASE + "[processor.jsnol]\n", {}, origin="f.toml")
    installed = Plugins(load_entry_points=False).processors()
    [problem] = unknown_processors(cfg, installed)
    assert problem.startswith("processor.jsnol: no processor is named 'jsnol' (did you mean jsonl")


def test_a_config_built_in_python_is_checked_too() -> None:
    """No loader, no origins: the keys are made from the sources."""
    base = loads(BASE, {})
    spec = SourceSpec(
        "app",
        base.source,
        base.consumer,
        ProcessorConfig("jsonl", {"jsonl": {"path": "/x"}, "jsnol": {}}),
    )
    cfg = Config((spec,), multi=True)
    assert unknown_processors(cfg, INSTALLED) == [f"sources.app.processor.jsnol: {JSNOL}"]
