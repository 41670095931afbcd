"""The processors a configuration names, against the installed ones.

An option table `[processor.<name>]` (or an entry's `[sources.processor.<name>]`) named after
no installed processor is refused, naming its key: a misspelt table (`[processor.jsnol]`)
would otherwise be kept and its options silently do nothing. So is a `processor.name` that
chooses no installed processor, in the same run. Tables of installed processors that are not
chosen stay accepted: switching processors by editing `name` is a way of working.

Only the plugin manager knows what is installed (entry points), so this runs after the config
is loaded, where `Plugins` is built (`loghubd check-config`, `loghubd run`); the config says
where each name was given (`Config.processor_refs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from loghubd.config import Config, SourceSpec
from loghubd.config.values import ConfigError, _suggest
from loghubd.plugins.api import SinkUnreachable


def unknown_processors(cfg: Config, installed: Iterable[str]) -> list[str]:
    """One problem per key of `cfg` naming a processor not in `installed` (the `name` keys
    first, then the tables): `processor.jsnol: no processor is named 'jsnol' (did you mean
    jsonl?); installed: http, jsonl, ... [loghubd.toml]`."""
    names = sorted(installed)
    listed = ", ".join(names) or "none"
    problems = []
    for ref in cfg.processor_refs:
        if ref.name in names:
            continue
        origin = f" [{ref.origin}]" if ref.origin else ""
        problems.append(
            f"{ref.key}: no processor is named {ref.name!r}{_suggest(ref.name, names)}; "
            f"installed: {listed}{origin}"
        )
    return problems


def refuse_unknown_processors(cfg: Config, installed: Iterable[str]) -> None:
    """`ConfigError` with the `unknown_processors` problems, if any: what `run` and
    `check-config` do before any processor is built (a typo makes no directory)."""
    problems = unknown_processors(cfg, installed)
    if problems:
        raise ConfigError(problems)


@contextlib.contextmanager
def naming_source(cfg: Config, spec: SourceSpec) -> Iterator[None]:
    """Around building `spec`'s processor: with several `[[sources]]`, what it refuses
    (`ConfigError`, `ValueError`, `SinkUnreachable`) is raised again, of the same kind, with
    each line prefixed `sources.<name>: `, so that `run` and `check-config` say which entry.
    With one source its messages already name their keys."""
    try:
        yield
    except (ValueError, SinkUnreachable) as exc:
        if not cfg.multi:
            raise
        where = f"sources.{spec.name}: "
        if isinstance(exc, ConfigError):
            raise ConfigError([where + p for p in exc.problems]) from exc
        if isinstance(exc, SinkUnreachable):
            raise SinkUnreachable(where + str(exc)) from exc
        raise ValueError(where + str(exc)) from exc
