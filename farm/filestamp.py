"""What identifies a file's state without reading it, for the caches that key on it (the lint's
remembered answers, the ledger's index): its (size, mtime_ns, ctime_ns, inode, device), as
Python's ``.pyc`` files and git's index do. Any write changes ctime; a replaced file changes the
inode; an added, removed or renamed entry changes its directory's mtime and ctime.

A timestamp is only as fine as the file system's clock: a same-size rewrite within one tick of
a read is invisible. Like git's "racily clean" entries, a file changed less than ``RACY_NS`` ago
is never trusted to a cache. Stdlib ``os`` only: a warm ``farm lint`` imports next to nothing.
"""

from __future__ import annotations

import os

RACY_NS = 2_000_000_000
WIDTH = 5  # values per stamp

Stamp = tuple[int, int, int, int, int]


def stamp(st: os.stat_result) -> Stamp:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev
