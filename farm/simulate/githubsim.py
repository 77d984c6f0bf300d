"""GitHub's limits as a drain meets them: the REST windows every job of the repository shares,
the Actions cache's capacity and eviction, artifact retention and git's file sizes (pure).

The numbers are GitHub's documented ones ("Rate limits for the REST API", "Actions limits",
"Dependency caching: usage limits and eviction policy", "About large files on GitHub"), taken from
farm's own definitions where farm has one. Two are not documented and are what users of the
cache service report: cache writes answered 429 past about 200 a minute per repository
(mozilla/sccache#2593), and sccache then dropping the write (mozilla/sccache#2821).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from farm.publish.ratelimit import CONTENT_METHODS, CONTENT_PER_HOUR, CONTENT_PER_MINUTE, PRIMARY_PER_HOUR
from farm.schedule.cacheplan import CACHE_LIMIT_BYTES

POINTS_PER_MINUTE = 900  # secondary limit: a GET costs 1 point, a content-creating request 5
CACHE_IDLE_S = 7 * 86400  # an Actions cache entry not used for 7 days is evicted
CACHE_WRITES_PER_MINUTE = 200  # per repository; past it the cache service answers 429
GIT_WARN_BYTES = 50 * 2**20  # git push warns about a file over 50 MiB
GIT_REFUSE_BYTES = 100 * 2**20  # and GitHub refuses it over 100 MiB (GH001)


def points(method: str) -> int:
    return 5 if method in CONTENT_METHODS else 1


@dataclass
class Rest:
    """The REST budget of one repository's token (``GITHUB_TOKEN``), shared by every job at once:
    the primary limit per hour, the secondary limits on content-creating requests per minute and
    per hour and on points per minute. :meth:`ask` answers a request as GitHub would: served
    (counted) or refused with the seconds it asks the client to wait (403/429, Retry-After)."""

    log: list[tuple[float, bool]] = field(default_factory=list)  # (time, content-creating) per served request
    refused: int = 0
    _hour: deque[float] = field(default_factory=deque)
    _content_hour: deque[float] = field(default_factory=deque)
    _content_minute: deque[float] = field(default_factory=deque)
    _points: deque[tuple[float, int]] = field(default_factory=deque)
    _points_sum: int = 0

    def ask(self, now: float, method: str) -> float:
        """0 when served; else the wait GitHub names (its windows' next opening)."""
        every = ((self._hour, 3600, PRIMARY_PER_HOUR), (self._content_hour, 3600, CONTENT_PER_HOUR),
                 (self._content_minute, 60, CONTENT_PER_MINUTE))  # (times, period, limit)
        content = method in CONTENT_METHODS
        windows = every if content else every[:1]  # those this request counts in
        for window, period, _ in every:
            while window and window[0] <= now - period:
                window.popleft()
        while self._points and self._points[0][0] <= now - 60:
            self._points_sum -= self._points.popleft()[1]
        waits = [window[0] + period - now for window, period, limit in windows if len(window) >= limit]
        if self._points_sum + points(method) > POINTS_PER_MINUTE:
            waits.append(self._points[0][0] + 60 - now)
        if waits:
            self.refused += 1
            return max(1.0, *waits)
        for window, _, _ in windows:
            window.append(now)
        self._points.append((now, points(method)))
        self._points_sum += points(method)
        self.log.append((now, content))
        return 0.0

    def busiest(self, period: float, *, content: bool = False) -> int:
        """The most requests served (content-creating ones only with ``content``) in any window of
        ``period`` seconds."""
        return most_in_window([t for t, c in self.log if c or not content], period)


def most_in_window(times: Iterable[float], period: float) -> int:
    """The most of ``times`` that fall in any window of ``period`` seconds (a window holds the
    times after its start, up to and including its end)."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - period:
            start += 1
        best = max(best, end - start + 1)
    return best


@dataclass
class ActionsCache:
    """One repository's Actions cache: entries immutable once saved, at most ``capacity`` bytes
    (the least recently used evicted), an entry unused for 7 days evicted, and writes past the
    service's rate answered 429 (the writer drops them)."""

    capacity: int = CACHE_LIMIT_BYTES
    # key -> (bytes, share of its writes stored, last use)
    entries: OrderedDict[str, tuple[int, float, float]] = field(default_factory=OrderedDict)
    used: int = 0
    evicted: int = 0
    dropped_writes: int = 0
    _writes: deque[float] = field(default_factory=deque)

    def _expire(self, now: float) -> None:
        for key in [k for k, (_, _, last) in self.entries.items() if last <= now - CACHE_IDLE_S]:
            self.used -= self.entries.pop(key)[0]
            self.evicted += 1

    def restore(self, key: str, now: float) -> float:
        """The share of the entry's writes that were stored (0: a miss); a hit makes it the most
        recently used."""
        self._expire(now)
        found = self.entries.get(key)
        if found is None:
            return 0.0
        self.entries[key] = (found[0], found[1], now)
        self.entries.move_to_end(key)
        return found[1]

    def save(self, key: str, size: int, now: float, *, writes: int = 1) -> float:
        """Save ``key`` of ``size`` bytes in ``writes`` uploads (a compiler cache writes one entry per
        compile step); returns the share stored (0..1): an existing key is never replaced, an entry
        larger than the cache is refused, writes past the service's rate are dropped."""
        while self._writes and self._writes[0] <= now - 60:
            self._writes.popleft()
        admitted = max(0, min(writes, CACHE_WRITES_PER_MINUTE - len(self._writes)))
        self._writes.extend([now] * admitted)
        self.dropped_writes += writes - admitted
        if admitted == 0 or key in self.entries or size > self.capacity:
            return 0.0
        share = admitted / writes
        stored = int(size * share)
        self._expire(now)
        self.entries[key] = (stored, share, now)
        self.used += stored
        while self.used > self.capacity:
            _, (old, _, _) = self.entries.popitem(last=False)
            self.used -= old
            self.evicted += 1
        return share


def expired(uploaded_at: float, retention_days: float, now: float) -> bool:
    """An artifact past its retention (GitHub answers 410 for it)."""
    return now > uploaded_at + retention_days * 86400
