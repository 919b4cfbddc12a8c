"""Independent API requests of one step sent side by side instead of one after another.

A new cluster's apply is some thirty requests (a look at each object no listing holds, then
an apply of each); one after another, at the 50-100 ms an API server answers in while a cluster
starts, the NodeSets' StatefulSets, last in the apply order, went out two to three seconds
after the first object, and their slurmd pods started that much later. The same goes, on a
smaller scale, for the five lists every reconcile reads. The requests go through one pool of
REQUESTS_AT_ONCE threads for the whole operator, so clusters reconciled at the same time ask
the API server for no more than that at once between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

REQUESTS_AT_ONCE = 8
_POOL = ThreadPoolExecutor(max_workers=REQUESTS_AT_ONCE, thread_name_prefix="api-request")

Item = TypeVar("Item")
Answer = TypeVar("Answer")


def each_at_once(call: Callable[[Item], Answer], items: Sequence[Item], answered: Callable[[Item, Answer], None]) -> None:
    """call(item) for every item, side by side; answered(item, answer) for each that succeeded.

    Every call runs to its end even when one fails, and `answered` hears of each success (in
    the items' order, on the caller's thread), so what did go through is known; then the first
    failure, in the items' order, is raised. A single item is called on the caller's thread."""
    if len(items) == 1:
        answered(items[0], call(items[0]))
        return
    futures: list[Future] = [_POOL.submit(call, item) for item in items]
    failure: BaseException | None = None
    for item, future in zip(items, futures):
        error = future.exception()  # waits for it
        if error is None:
            answered(item, future.result())
        elif failure is None:
            failure = error
    if failure is not None:
        raise failure
