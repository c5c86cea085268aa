"""Giving the heap memory a controller freed back to the operating system.

glibc's malloc keeps memory freed inside its heaps for reuse. After a burst (thousands of admission reviews, the
watch events of thousands of pods, pages of 500 pods read by in-use checks) CPython frees the objects, but the
process keeps its resident size at the burst's high mark. `malloc_trim(0)` hands those free pages back: on
mnnvl-lws after 5,000 pods were deleted, 386 → 311 MiB (docs/performance.md). A trim of a few hundred MiB of
fragmented heap takes tens of milliseconds, a trim with nothing to give back about 2 ms; it runs in a worker
thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How often freed memory is given back.
TRIM_EVERY_SECONDS = 10.0

Trim = Callable[[int], int]


def malloc_trim() -> Trim | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, or no glibc at all)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]  # int malloc_trim(size_t pad)
    trim.restype = ctypes.c_int
    found: Trim = trim
    return found


async def give_back_freed_memory(trim: Trim | None, *, every: float = TRIM_EVERY_SECONDS) -> None:
    """Every `every` seconds, for good: hand the heap's free pages back to the operating system."""
    if trim is None:
        log.info("freed heap memory stays with the process: the C library has no malloc_trim")
        return
    while True:
        await asyncio.sleep(every)
        await asyncio.to_thread(trim, 0)
