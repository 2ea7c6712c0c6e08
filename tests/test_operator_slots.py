"""Reconcile slots: a bounded number of passes at once, changed resources ahead of periodic looks."""

from __future__ import annotations

import asyncio

import pytest

from streamjob.operator.slots import ROUTINE, URGENT, ReconcileSlots


def test_at_most_size_passes_run_and_every_one_runs():
    async def main() -> tuple[int, list[int]]:
        slots = ReconcileSlots(3)
        running, peak, done = 0, 0, []

        async def one(i: int) -> None:
            nonlocal running, peak
            async with slots.slot(ROUTINE):
                running += 1
                peak = max(peak, running)
                await asyncio.sleep(0.001)
                running -= 1
                done.append(i)

        await asyncio.gather(*(one(i) for i in range(50)))
        return peak, done

    peak, done = asyncio.run(main())
    assert peak == 3 and sorted(done) == list(range(50))


def test_urgent_waiters_go_first_then_arrival_order():
    async def main() -> list[str]:
        slots = ReconcileSlots(1)
        order: list[str] = []
        hold = asyncio.Event()

        async def one(name: str, priority: int) -> None:
            async with slots.slot(priority):
                if name == "first":
                    await hold.wait()
                order.append(name)

        tasks = [asyncio.create_task(one("first", ROUTINE))]
        await asyncio.sleep(0)
        for name, priority in [("r1", ROUTINE), ("u1", URGENT), ("r2", ROUTINE), ("u2", URGENT)]:
            tasks.append(asyncio.create_task(one(name, priority)))
            await asyncio.sleep(0)
        assert slots.waiting == 4
        hold.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == ["first", "u1", "u2", "r1", "r2"]


def test_a_cancelled_waiter_loses_no_slot():
    """Cancelled while waiting, or just after the slot was handed to it: the slot goes on."""
    async def main() -> list[str]:
        slots = ReconcileSlots(1)
        order: list[str] = []
        hold = asyncio.Event()
        tasks: dict[str, asyncio.Task] = {}

        async def one(name: str) -> None:
            async with slots.slot(URGENT):
                if name == "first":
                    await hold.wait()
                order.append(name)
            if name == "first":
                # The release just handed the slot to the next waiter; it is cancelled before it runs.
                tasks["cancelled-when-handed"].cancel()

        for name in ("first", "cancelled-waiting", "cancelled-when-handed", "last"):
            tasks[name] = asyncio.create_task(one(name))
            await asyncio.sleep(0)
        tasks["cancelled-waiting"].cancel()
        await asyncio.sleep(0)
        hold.set()
        await tasks["last"]
        for name in ("cancelled-waiting", "cancelled-when-handed"):
            with pytest.raises(asyncio.CancelledError):
                await tasks[name]
        async with slots.slot(ROUTINE):  # and the slot is free again, not leaked
            order.append("after")
        return order

    assert asyncio.run(main()) == ["first", "last", "after"]


def test_size_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        ReconcileSlots(0)
