"""Statements compiled to programs: each instruction becomes a stage (log -> log or None),
and `compile(text)` chains them into a `Program`, cached in a bounded LRU."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from loghubd.server.spl import check
from loghubd.server.spl.ast import (
    Extend,
    Instruction,
    Name,
    Project,
    ProjectAway,
    ProjectRename,
    Where,
)
from loghubd.server.spl.errors import SplError, SplEvalError
from loghubd.server.spl.evaluate import Fn, compile_expr
from loghubd.server.spl.parser import parse
from loghubd.server.spl.patterns import glob_plan, segments_match
from loghubd.server.spl.values import TIME_FIELDS, Record, Value, to_text

Stage: TypeAlias = Callable[[Record], "Record | None"]

CACHE_SIZE = 256


def _time_value(name: str, v: Value) -> str:
    if not isinstance(v, int) or isinstance(v, bool):
        raise SplEvalError(f"{name} must be an integer")
    limit = 2**32 if name == "__time__" else 1_000_000_000
    if not 0 <= v < limit:
        raise SplEvalError(f"{name} {v} is out of range [0, {limit})")
    return str(v)


def _compile_where(ins: Where) -> Stage:
    fn, t = compile_expr(ins.condition)
    check.require_bool(t, ins.condition, "where")

    def where(r: Record) -> Record | None:
        return r if fn(r) is True else None

    return where


def _compile_extend(ins: Extend) -> Stage:
    seen: set[str] = set()
    parts: list[tuple[str, Fn]] = []
    for name, expr in ins.assignments:
        if name.name in seen:
            raise SplError(name.pos, f"field {name.name!r} is assigned twice")
        seen.add(name.name)
        fn, t = compile_expr(expr)
        check.time_assignment(name, expr, t)
        parts.append((name.name, fn))

    def extend(r: Record) -> Record | None:
        values = [(name, fn(r)) for name, fn in parts]  # all from the input log
        out = dict(r)
        for name, v in values:
            if name in TIME_FIELDS:
                out[name] = _time_value(name, v)
            elif v is None:
                out.pop(name, None)
            else:
                out[name] = to_text(v)
        return out

    return extend


def _matcher(names: Sequence[Name], wildcard: bool) -> Callable[[str], bool]:
    exact = {n.name for n in names if not (wildcard and "*" in n.name)}
    plans = [glob_plan(n.name) for n in names if wildcard and "*" in n.name]
    if not plans:
        return exact.__contains__
    return lambda k: k in exact or any(segments_match(k, p) for p in plans)


def _compile_project(ins: Project) -> Stage:
    check.renames(ins.renames)
    keep = _matcher(ins.keep, ins.wildcard)
    renames = [(new.name, old.name) for new, old in ins.renames]

    def project(r: Record) -> Record | None:
        out = {k: v for k, v in r.items() if k in TIME_FIELDS or keep(k)}
        for new, old in renames:
            if old in r:
                out[new] = r[old]
        return out

    return project


def _compile_project_away(ins: ProjectAway) -> Stage:
    drop = _matcher(ins.drop, ins.wildcard)

    def project_away(r: Record) -> Record | None:
        return {k: v for k, v in r.items() if k in TIME_FIELDS or not drop(k)}

    return project_away


def _compile_project_rename(ins: ProjectRename) -> Stage:
    check.renames(ins.renames)
    renames = [(new.name, old.name) for new, old in ins.renames]
    olds = {old for _new, old in renames}

    def project_rename(r: Record) -> Record | None:
        moved = [(new, r[old]) for new, old in renames if old in r]
        out = {k: v for k, v in r.items() if k not in olds}
        out.update(moved)
        return out

    return project_rename


def _compile_instruction(ins: Instruction) -> Stage:
    if isinstance(ins, Where):
        check.depth(ins.condition)
        return _compile_where(ins)
    if isinstance(ins, Extend):
        for _name, expr in ins.assignments:
            check.depth(expr)
        return _compile_extend(ins)
    if isinstance(ins, Project):
        return _compile_project(ins)
    if isinstance(ins, ProjectAway):
        return _compile_project_away(ins)
    return _compile_project_rename(ins)


@dataclass(frozen=True, slots=True)
class Program:
    """A compiled statement. `run` raises SplEvalError for a log it cannot evaluate;
    calling the program never raises (such a log gives None, like a filtered one)."""

    text: str
    stages: tuple[Stage, ...]
    filter_only: bool  # only `where`: surviving logs are unchanged

    def run(self, record: Record) -> Record | None:
        out = record
        for stage in self.stages:
            result = stage(out)
            if result is None:
                return None
            out = result
        return out

    def __call__(self, record: Record) -> Record | None:
        try:
            return self.run(record)
        except SplEvalError:
            return None


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile(text: str) -> Program:
    """Parse, check and compile a statement (cached); raises SplError."""
    instructions = parse(text)
    stages = tuple(_compile_instruction(i) for i in instructions)
    return Program(text, stages, all(isinstance(i, Where) for i in instructions))
