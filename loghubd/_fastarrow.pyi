# The optional C accelerator of loghubd.arrow.convert (see _fastarrow.c).

from collections.abc import Callable
from typing import TypeVar

_Block = TypeVar("_Block")

def parse(
    groups: list[memoryview], start: int, budget: int, allocate: Callable[[int], _Block], /
) -> tuple[int, bool, list[int], _Block, tuple[tuple[int, int], ...]]: ...
