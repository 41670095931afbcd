"""Which rows of a long table one page of the console shows (shard tables with hundreds of
rows are cut into pages, as Kafka UI and Redpanda Console do with partitions). Pure."""

from __future__ import annotations

from dataclasses import dataclass

ROWS_PER_PAGE = 50


@dataclass(frozen=True, slots=True)
class Pages:
    """Page `number` (1-based) of `count`, showing rows `first` to `stop` of `total`."""

    number: int
    count: int
    total: int
    size: int = ROWS_PER_PAGE

    @classmethod
    def of(cls, wanted: str | None, total: int, size: int = ROWS_PER_PAGE) -> Pages:
        """The page a `page=` query value asks for, clamped to the pages that exist (a bad
        or missing value: the first)."""
        count = max(1, -(-total // size))
        number = int(wanted) if wanted and wanted.isdigit() and len(wanted) < 9 else 1
        return cls(min(max(number, 1), count), count, total, size)

    @property
    def first(self) -> int:
        return (self.number - 1) * self.size

    @property
    def stop(self) -> int:
        return min(self.first + self.size, self.total)

    @property
    def query(self) -> int | None:
        """This page's `page=` value (None for the first, whose URL names none)."""
        return self.number if self.number > 1 else None
