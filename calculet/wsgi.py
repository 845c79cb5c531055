import ctypes
import os

from django.core.wsgi import get_wsgi_application

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def keep_freed_buffers() -> None:
    """Keep the memory of freed megabyte buffers in the process for the next ones.

    A tus chunk passes through gunicorn's buffers a megabyte at a time, copied several times over. By default
    glibc serves each such buffer with a fresh mmap and hands it back to the kernel when freed, so every copy
    page-faults fresh memory in: that, not the copying, held an upload to about 130 MiB/s on a disk that takes
    200. Served from the heap and not trimmed, the same buffers are reused; what stays is bounded by the
    largest set of buffers alive at once (a few MiB).
    """
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:  # not glibc
        return
    mallopt(M_MMAP_THRESHOLD, 16 * 1024 * 1024)
    mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024)


keep_freed_buffers()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "calculet.settings")

application = get_wsgi_application()
