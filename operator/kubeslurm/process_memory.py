"""Keeping the operator's resident memory near what it really uses (glibc malloc).

A reconcile of a big cluster parses megabytes of JSON (1000 slurmd pods are about 3 MB) and
frees it again; the filtered watches (reconcile/filtered_watch.py) decode our pods' events meanwhile in
threads of their own. Measured with 1000 kwok-faked pods: about 10 MiB of
live Python objects in a process of 170 MiB. Python's small-object allocator keeps an arena
while one object in it lives, and glibc keeps one heap per allocating thread at its
high-water mark. So the operator image sets PYTHONMALLOC=malloc (small objects from glibc,
whose free pages malloc_trim can return; it must be set before Python starts), and the
operator asks for few heaps at start and gives back the free memory after each reconcile
(`malloc_trim`, a few milliseconds). Elsewhere than glibc (musl, macOS) these are no-ops.
"""

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)
M_ARENA_MAX = -8  # mallopt parameter number in glibc's malloc.h
ARENAS = 2


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


_LIBC = _glibc()


def limit_arenas() -> None:
    """Call before threads start: later threads share ARENAS heaps instead of one each."""
    if _LIBC is not None and not _LIBC.mallopt(M_ARENA_MAX, ARENAS):
        log.debug("mallopt(M_ARENA_MAX) refused")


def return_free_memory() -> None:
    """Give the free parts of malloc's heaps back to the system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
