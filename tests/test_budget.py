"""A publish job's plan: shares of the token, the requests it sends, the time they take, its clock."""

from __future__ import annotations

import dataclasses
import math

import pytest

from farm.errors import OutOfTime
from farm.publish.budget import (
    CELL_MARGIN,
    MAX_RATE_LIMIT_WAIT_S,
    RESERVE_S,
    REST,
    JobClock,
    job_share,
    next_cell_fits,
    publish_shares,
    rate_limit_wait_s,
    waits_out,
)
from farm.publish.ghrest import GithubApiError, GithubRelease
from farm.publish.ratelimit import Limit, Throttle, github_limits
from tests.test_hostile_bounds import hostile_github


def test_shares_follow_the_cells_each_job_publishes() -> None:
    shares = publish_shares({"0": 256, "1": 256, "2": 256, "3": 22, "7": 10, "link": 78, "4": 0})
    assert math.isclose(sum(shares.values()), 1.0)
    assert shares["4"] == 0
    assert math.isclose(shares["0"], 256 / 878)
    assert publish_shares({"0": 0}) == {"0": 0.0}


def test_a_jobs_share_is_its_cells_unless_it_runs_alone_or_publishers_say() -> None:
    jobs = {"0": 256, "1": 22, "2": 0, "link": 78}
    assert math.isclose(job_share("1", jobs), 22 / 356)
    assert job_share("2", jobs) == 1.0  # no cells: no share to take from the others
    assert job_share("link", jobs) == job_share(REST, {}) == 1.0
    assert job_share("0", jobs, publishers=4) == job_share(REST, {}, publishers=4) == 0.25


def test_a_jobs_budget_alone_bounds_its_waits_on_rate_limits() -> None:
    budget = JobClock(started=0.0).budget()
    assert waits_out(budget, True, 60, 7200.0, max_retries=6, max_wait_s=3600.0)
    assert not waits_out(budget, False, 6, 1.0, max_retries=6, max_wait_s=3600.0)  # a 5xx: counted
    assert not waits_out(None, True, 0, 3601.0, max_retries=6, max_wait_s=3600.0)
    assert waits_out(None, True, 5, 3600.0, max_retries=6, max_wait_s=3600.0)


def test_only_the_rest_job_waits_on_rate_limits_for_its_whole_clock() -> None:
    assert rate_limit_wait_s("0", 21600.0) == rate_limit_wait_s("link", 21600.0) == MAX_RATE_LIMIT_WAIT_S
    assert rate_limit_wait_s(REST, 21600.0) == 21600.0  # it hands on to no job


def test_a_share_of_the_limits_is_that_fraction_of_githubs_numbers() -> None:
    ninth = github_limits(publishers=9)
    assert [limit.count for limit in ninth] == [100, 8, 50]
    assert github_limits(share=1 / 9) == ninth
    big = github_limits(share=256 / 878)
    assert [limit.count for limit in big] == [262, 20, 131]
    with pytest.raises(ValueError, match="a share"):
        github_limits(share=0)


def test_the_job_clock_stops_before_the_limit_and_bounds_every_wait() -> None:
    clock = JobClock(started=1000.0)
    assert clock.deadline == 1000 + 6 * 3600 - RESERVE_S
    assert clock.left(1000.0) == 6 * 3600 - RESERVE_S
    budget = clock.budget()
    assert budget.rate_limit_s == MAX_RATE_LIMIT_WAIT_S
    budget.allow(clock.deadline - 100, 100, rate_limit=False, what="pacing")
    with pytest.raises(OutOfTime, match="deadline"):
        budget.allow(clock.deadline - 100, 101, rate_limit=False, what="pacing")


def test_a_retry_after_of_3000_s_is_not_obeyed_past_the_cap() -> None:
    """GitHub's ``Retry-After: 3000`` six times is five hours of a six-hour job: the second wait
    already passes the 30-minute cap, so the job stops and hands on instead."""
    budget = JobClock(started=0.0).budget(rate_limit_s=3600)
    budget.allow(0, 3000, rate_limit=True, what="HTTP 403")
    with pytest.raises(OutOfTime, match="cap is 3600 s"):
        budget.allow(3000, 3000, rate_limit=True, what="HTTP 403")
    assert budget.rate_limit_waited_s == 3000


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_the_throttle_does_not_pace_past_the_deadline() -> None:
    clock = _Clock()
    throttle = Throttle((Limit("m", 2, 60.0),), clock, JobClock(0.0, limit_s=100, reserve_s=0).budget())
    for _ in range(4):
        throttle.wait("GET")
        throttle.sent("GET")
    assert clock.t == 60  # paced once, inside the clock
    with pytest.raises(OutOfTime):
        throttle.wait("GET")  # the next window opens at 120 s, past the 100 s deadline


def test_a_cell_starts_only_with_room_for_it() -> None:
    assert next_cell_fits(1000, 100, 0)
    assert not next_cell_fits(1000, 500, 0)
    assert not next_cell_fits(1000, 100, 1000 - CELL_MARGIN * 100)


def test_a_publish_jobs_budget_not_a_count_of_tries_bounds_its_waiting_on_githubs_limits() -> None:
    """Other jobs of the repository keep the token's minute full: GitHub answers ten requests in
    a row 403 with ``Retry-After: 60``. By hand the client gives up after its tries (exit 3); in
    a publish job, whose throttle holds the job's budget, it waits as long as the budget allows
    (ten minutes here) and the cell is published, and a job whose budget is spent hands the cell
    on (OutOfTime) instead of failing it: a failed cell would be built again."""
    refusals = [10]

    def answer(_path: str) -> tuple[int, dict[str, str], bytes, float]:
        if refusals[0]:
            refusals[0] -= 1
            return 403, {"Retry-After": "60"}, b'{"message": "You have exceeded a secondary rate limit"}', 0.0
        return 200, {}, b'{"id": 7}', 0.0

    clock = _Clock()
    with hostile_github(answer) as client:
        by_hand = dataclasses.replace(client, clock=clock, throttle=Throttle(github_limits(), clock))
        with pytest.raises(GithubApiError, match="after 2 tries"):
            by_hand.release("v1")
    for cap_s, published in ((3600.0, True), (300.0, False)):
        refusals[0] = 10
        clock = _Clock()
        with hostile_github(answer) as client:
            job = dataclasses.replace(client, clock=clock, throttle=Throttle(
                github_limits(), clock, JobClock(0.0).budget(rate_limit_s=cap_s)))
            if published:
                assert job.release("v1") == GithubRelease(7, "v1")
                assert job.rate_limited == 10
                assert clock.t == 600
            else:
                with pytest.raises(OutOfTime, match="cap is 300 s"):
                    job.release("v1")
