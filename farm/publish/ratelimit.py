"""GitHub's documented REST limits as a client-side throttle (pure, clock injected).

GitHub documents, for a repository's ``GITHUB_TOKEN``, a primary limit of 1,000 requests per
hour, and for every token secondary limits on content-creating requests (``POST``, ``PATCH``,
``PUT``, ``DELETE``): 80 per minute and 500 per hour. A publisher that sends faster is answered
403 or 429 and, if it keeps going, blocked for longer. :class:`Throttle` keeps a sliding window
per limit and says how long to wait before the next request, so a well-behaved run never meets
those answers; :func:`retry_after` reads GitHub's own word when one comes anyway.

The budgets sit a little under GitHub's numbers: other steps of the same workflow (checkout,
artifact and cache actions) spend the same token's budget.

Every wait is also held to a :class:`WaitBudget`: never past the job's deadline, and never more
than a cap in all on GitHub's own rate-limit answers (a ``Retry-After: 3000`` obeyed six times
would spend five hours of a six-hour job). A wait the budget does not allow raises
:class:`~farm.errors.OutOfTime` at once instead of sleeping, and the job hands on what is left.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from farm.errors import OutOfTime

# GitHub's documented numbers.
PRIMARY_PER_HOUR = 1000  # GITHUB_TOKEN, per repository
CONTENT_PER_MINUTE = 80
CONTENT_PER_HOUR = 500
CONTENT_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
# Wait this long when GitHub says a secondary limit was hit but names no time ("at least a minute").
SECONDARY_DEFAULT_WAIT_S = 60.0


class Clock(Protocol):
    """Seconds since the epoch, and a way to wait; tests pass a scaled one."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


@dataclass(frozen=True)
class Limit:
    """At most ``count`` requests (content-creating ones only when ``content``) per ``period_s``."""

    name: str
    count: int
    period_s: float
    content: bool = False


def github_limits(*, margin: float = 0.9, publishers: int = 1, share: float | None = None) -> tuple[Limit, ...]:
    """GitHub's documented limits, each budgeted at ``margin`` of its number and shared by
    ``publishers`` jobs publishing at once with one token (GitHub counts per token and
    repository, not per job; each job throttles only its own requests). ``share``: this job's
    fraction of the token instead (the jobs of a wave take shares in proportion to their cells:
    :func:`farm.publish.budget.publish_shares`)."""
    fraction = share if share is not None else 1.0 / max(1, publishers)
    if not 0 < fraction <= 1:
        raise ValueError(f"a share of the token's limits is in (0, 1], not {fraction}")

    def share_of(number: int) -> int:
        return max(1, int(number * margin * fraction + 1e-9))

    return (
        Limit("primary: requests per hour", share_of(PRIMARY_PER_HOUR), 3600.0),
        Limit("secondary: content-creating requests per minute", share_of(CONTENT_PER_MINUTE), 60.0, True),
        Limit("secondary: content-creating requests per hour", share_of(CONTENT_PER_HOUR), 3600.0, True),
    )


@dataclass
class WaitBudget:
    """What a job may still spend waiting: never past ``deadline`` (epoch seconds), and at most
    ``rate_limit_s`` in all on waits GitHub asked for (``Retry-After``, a spent primary limit).
    The throttle's own pacing is held to the deadline only: it is the job's planned speed."""

    deadline: float = math.inf
    rate_limit_s: float = math.inf
    rate_limit_waited_s: float = 0.0

    @property
    def bounded(self) -> bool:
        """A job's budget (a deadline or a cap): what the job cannot wait out, the next job takes."""
        return math.isfinite(self.deadline) or math.isfinite(self.rate_limit_s)

    def allow(self, now: float, seconds: float, *, rate_limit: bool, what: str) -> None:
        """Raise :class:`OutOfTime` unless waiting ``seconds`` from ``now`` fits; else count it."""
        if now + seconds > self.deadline:
            raise OutOfTime(f"{what}: a wait of {seconds:.0f} s would pass this job's deadline "
                            f"({max(0.0, self.deadline - now):.0f} s left)",
                            hint="the job stops here and hands what it has not done to the next job")
        if rate_limit:
            if self.rate_limit_waited_s + seconds > self.rate_limit_s:
                raise OutOfTime(f"{what}: GitHub asks for {seconds:.0f} s more of waiting; this job has waited "
                                f"{self.rate_limit_waited_s:.0f} s on rate limits, its cap is "
                                f"{self.rate_limit_s:.0f} s",
                                hint="another client may be spending the token's budget; the job stops and hands "
                                     "the rest to the next job")
            self.rate_limit_waited_s += seconds


@dataclass
class Throttle:
    """Sliding windows over the requests sent: :meth:`wait` blocks until one more fits them all,
    :meth:`sent` counts it."""

    limits: tuple[Limit, ...] = field(default_factory=github_limits)
    clock: Clock = field(default_factory=RealClock)
    budget: WaitBudget = field(default_factory=WaitBudget)
    _sent: dict[str, deque[float]] = field(default_factory=dict)
    waited_s: float = 0.0  # total time spent waiting, for the run's summary

    def delay(self, method: str) -> float:
        """Seconds until a ``method`` request fits every window (0: now)."""
        now = self.clock.now()
        content = method.upper() in CONTENT_METHODS
        delay = 0.0
        for limit in self.limits:
            if limit.content and not content:
                continue
            sent = self._sent.setdefault(limit.name, deque())
            while sent and sent[0] <= now - limit.period_s:
                sent.popleft()
            if len(sent) >= limit.count:
                delay = max(delay, sent[len(sent) - limit.count] + limit.period_s - now)
        return delay

    def wait(self, method: str) -> None:
        """Wait until a ``method`` request fits every window (within the :class:`WaitBudget`)."""
        while (delay := self.delay(method)) > 0:
            self.pause(delay, rate_limit=False, what=f"{method}: this job's share of GitHub's limits")

    def pause(self, seconds: float, *, rate_limit: bool, what: str) -> None:
        """Sleep ``seconds`` when the budget allows it (:class:`OutOfTime` when not)."""
        self.spend(seconds, rate_limit=rate_limit, what=what)
        self.clock.sleep(seconds)

    def spend(self, seconds: float, *, rate_limit: bool, what: str) -> None:
        """Count a wait of ``seconds`` from now when the budget allows it (:class:`OutOfTime` when
        not), the waiting left to the caller (a simulation's loop)."""
        self.budget.allow(self.clock.now(), seconds, rate_limit=rate_limit, what=what)
        self.waited_s += seconds

    def sent(self, method: str) -> None:
        """Count a ``method`` request, when its answer came: GitHub counts it on arrival, which is
        between the two, so counting at the answer keeps this side's windows the later ones."""
        now = self.clock.now()
        content = method.upper() in CONTENT_METHODS
        for limit in self.limits:
            if content or not limit.content:
                self._sent.setdefault(limit.name, deque()).append(now)


def retry_after(status: int, headers: Mapping[str, str], now: float, body: str = "") -> float | None:
    """Seconds GitHub asks a client to wait after ``status``, or None when the answer is not
    about a rate limit (a 403 for missing permissions is not retried).

    ``Retry-After`` wins; else ``x-ratelimit-remaining: 0`` with ``x-ratelimit-reset`` (epoch
    seconds); else a 429, or a 403 that names no other cause, is a secondary limit: a minute."""
    lower = {k.lower(): v for k, v in headers.items()}
    if status not in (403, 429):
        return None
    value = lower.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    if lower.get("x-ratelimit-remaining", "").strip() == "0":
        reset = lower.get("x-ratelimit-reset", "").strip()
        if reset.isdigit():
            return max(0.0, float(reset) - now) + 1.0
    if status == 429 or "rate limit" in body.lower():
        return SECONDARY_DEFAULT_WAIT_S
    return None
