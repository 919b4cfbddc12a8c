"""Keeping the operator's resident memory near what it really uses (glibc malloc).

A reconcile of a big cluster parses megabytes of JSON (1000 slurmd pods are about 3 MB) and
frees it again; the filtered watches (reconcile/filtered_watch.py) decode our pods' events meanwhile in
threads of their own. Python's own allocator takes small objects; what is bigger (a listing's
bytes, a big dict's table) comes from glibc, which keeps one heap per allocating thread at its
high-water mark. So the operator asks for few heaps at start and gives back their free memory
after each reconcile (`malloc_trim`, a few milliseconds). Elsewhere than glibc (musl, macOS)
these are no-ops.

Small objects stay with Python's allocator (the image does not set PYTHONMALLOC=malloc, as it
once did so that malloc_trim could return them too): the pod watch's thread, which decodes every
event of every slurmd pod (3000 of ~10 KB in a scale-down of 1000 pods), took 0.66-0.73 CPU-s
in a scale-down with it against 1.08 s with glibc's (make bench-scale; 2.5x in a replay of those
events on one core, glibc's allocator consolidating its small free chunks at each event's large
line), and the operator's memory peak at 1000 pods was the same, 99 MiB, since the pods are read
from the watch's cache instead of listed.
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
