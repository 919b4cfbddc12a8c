"""wait_for: the one way the test bed and the tests poll until something holds."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A wait ran out of time. An AssertionError, so a test that waits fails, not errors."""


def wait_for(check: Callable[[], T], timeout: float = 60, what: str = "a condition", *, interval: float = 0.5,
             max_interval: float | None = None, ignore: tuple[type[BaseException], ...] = (),
             failed: Callable[[], str | None] | None = None, details: Callable[[], str] | None = None,
             error: type[Exception] = WaitTimeout) -> T:
    """Calls check() until it returns something truthy, and returns that.

    interval: seconds between calls, growing by half each time up to max_interval when
    that is given. ignore: exceptions of check() that mean "not yet" (an object not
    created yet). failed(): a message when waiting is pointless (the daemon that should
    answer has exited): raised at once. details(): text for the error (log tails).
    error: the exception class raised, with what was waited for and the last value seen.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if failed is not None:
            message = failed()
            if message:
                raise error(f"{message} while waiting for {what}" + (f"\n{details()}" if details else ""))
        try:
            last = check()
        except ignore as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            seen = f"; last: {last!r}" if last not in (None, False) else ""
            raise error(f"timed out after {timeout:.0f}s waiting for {what}{seen}"
                        + (f"\n{details()}" if details else ""))
        time.sleep(interval)
        if max_interval is not None:
            interval = min(interval * 1.5, max_interval)
