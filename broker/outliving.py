"""Operations a request starts that must finish whatever becomes of the request.

The broker cancels a request's task when its client's connection closes. An operation that
appends to a log and then applies what it appended (a transaction coordinator's state change,
a marker's completion of transactional offsets) would be cut between the two: what the log
holds, memory would not. Kafka's append callbacks run once the append is done or timed out,
whoever still waits for the answer; here such an operation runs in a nursery that outlives the
request, and the request only awaits its answer.
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

import trio

T = TypeVar("T")


async def outlive_request(nursery: trio.Nursery | None, operation: Callable[[], Awaitable[T]], stopped: T) -> T:
    """``await operation()`` in ``nursery`` (inline where there is none yet: nothing to
    outlive) and return its answer, or raise what it raised; ``stopped`` if the nursery's own
    cancellation (its owner shutting down) cut the operation short."""
    if nursery is None:
        return await operation()
    finished = trio.Event()
    answer: list = []

    async def run() -> None:
        try:
            answer.append(await operation())
        except Exception as exc:   # raised to the request, not into the nursery's owner
            answer.append(exc)
        finally:
            finished.set()

    nursery.start_soon(run)
    await finished.wait()
    if not answer:
        return stopped
    if isinstance(answer[0], Exception):
        raise answer[0]
    return answer[0]
