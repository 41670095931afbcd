"""`loghubd.until_stopping`: a call bounded by the shard's stop (and a patience after it)."""

from __future__ import annotations

import anyio
import pytest

from loghubd import until_stopping
from loghubd.consumer.tracking import StopFlag


async def _stop_soon(stopping: StopFlag) -> None:
    await anyio.sleep(0.01)
    stopping.set()


def test_a_call_that_returns_gives_its_value() -> None:
    async def main() -> tuple[bool, int | None]:
        async def call() -> int:
            return 7

        return await until_stopping(StopFlag(), call)

    assert anyio.run(main) == (True, 7)


@pytest.mark.parametrize("patience", [0.0, 0.05])
def test_a_call_that_hangs_is_given_up_after_the_stop_and_the_patience(patience: float) -> None:
    cancelled: list[bool] = []

    async def main() -> tuple[bool, None]:
        stopping = StopFlag()

        async def call() -> None:
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled.append(True)
                raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_soon, stopping)
            with anyio.fail_after(10):
                outcome = await until_stopping(stopping, call, patience=patience)
        return outcome

    assert anyio.run(main) == (False, None) and cancelled == [True]


def test_with_patience_a_call_going_well_at_the_stop_is_let_finish() -> None:
    async def main() -> tuple[bool, str | None]:
        stopping = StopFlag()

        async def call() -> str:
            await stopping.wait()
            await anyio.sleep(0.02)  # still running after the stop, within the patience
            return "done"

        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_soon, stopping)
            outcome = await until_stopping(stopping, call, patience=5)
        return outcome

    assert anyio.run(main) == (True, "done")


def test_the_calls_exception_propagates() -> None:
    async def main() -> None:
        async def call() -> None:
            raise LookupError("sink said no")

        await until_stopping(StopFlag(), call)

    with pytest.raises(LookupError, match="sink said no"):
        anyio.run(main)
