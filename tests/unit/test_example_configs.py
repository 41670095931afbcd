"""Every example config under config/ loads, names only installed processors, and its
processor table passes that processor's own option parser (the step that needs no database,
no directory, no network): the examples the docs point people to cannot rot silently."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from loghubd_postgres.options import parse as postgres_options
from loghubd_spark.options import SparkOptions

from loghubd import config as config_mod
from loghubd.plugins.configured import unknown_processors
from loghubd.plugins.manager import Plugins
from loghubd.processors.http import parse as http_options
from loghubd.processors.jsonl import JsonlOptions
from loghubd.processors.parquet import parse as parquet_options

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "config").glob("*.toml"))

PARSERS: dict[str, Callable[[Mapping[str, Any]], object]] = {
    "jsonl": JsonlOptions.parse,
    "parquet": parquet_options,
    "http": http_options,
    "postgres": postgres_options,
    "spark": SparkOptions.parse,
    "null": lambda options: None,
    "stdout": lambda options: None,
}


def test_the_examples_are_all_here() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"loghubd.example.toml", "quickstart.toml", "loghubd.parquet.toml"} <= names
    assert {"loghubd.postgres.toml", "loghubd.http.toml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_config_loads_and_its_processor_options_parse(path: Path) -> None:
    cfg = config_mod.load(path, {})
    for source in cfg.sources:
        name = source.processor.name
        assert name in PARSERS, f"{path.name}: no option check for processor {name!r}"
        PARSERS[name](source.processor.selected_options)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_config_names_only_installed_processors(path: Path) -> None:
    cfg = config_mod.load(path, {})
    assert unknown_processors(cfg, Plugins().processors()) == []
