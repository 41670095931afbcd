# The optional C accelerator of loghubd.arrow.convert and loghubd.arrow_view (see _fastarrow.c).

from collections.abc import Callable
from typing import TypeVar

_Block = TypeVar("_Block")

def parse(
    groups: list[memoryview], start: int, budget: int, allocate: Callable[[int], _Block], /
) -> tuple[int, bool, list[int], _Block, tuple[tuple[int, int], ...]]: ...
def fields(
    raw: bytes | memoryview, wanted: list[str] | None, allocate: Callable[[int], _Block], /
) -> tuple[list[int], list[str], list[int], _Block, tuple[tuple[int, int], ...]] | None: ...
