"""GitHub Releases: release tags and their capacity, the per-wheel decision, the throttle, and
the REST client against the loopback GitHub of :mod:`tests.support.ghsim` (GitHub itself cannot be
reached from here; the simulator follows its documented answers)."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest

from farm.errors import ConfigError, ToolError
from farm.provenance.ledgerline import ExistsKey
from farm.publish.ghrest import Client, GithubApiError
from farm.publish.github import (
    ASSET_CAP,
    DEFAULT_TAG,
    Action,
    Present,
    asset_url,
    assets_per_release,
    capacity_problems,
    check_tag,
    decide,
    tag_for,
)
from farm.publish.ratelimit import (
    CONTENT_PER_HOUR,
    CONTENT_PER_MINUTE,
    PRIMARY_PER_HOUR,
    Throttle,
    github_limits,
    retry_after,
)
from tests.support import ghsim

KEY = ExistsKey("flash_attn", "2.8.3", "12.8", "2.8", "cp311", "manylinux_2_28_x86_64", 2)


def grid(package: str = "flash_attn", version: str = "2.8.3", epochs: range = range(1)) -> list[ExistsKey]:
    """A public-farm-sized grid of one package version: 6 CUDA lines x 5 torch x 5 python x 3
    platforms (450 cells an epoch)."""
    return [ExistsKey(package, version, cuda, torch, py, plat, epoch)
            for cuda, torch, py, plat, epoch in itertools.product(
                ["12.4", "12.6", "12.8", "12.9", "13.0", "13.2"], ["2.6", "2.7", "2.8", "2.9", "2.10"],
                ["cp39", "cp310", "cp311", "cp312", "cp313"],
                ["manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "win_amd64"], epochs)]


def test_default_tag_is_per_package_version_cuda_line_and_epoch() -> None:
    assert tag_for(DEFAULT_TAG, KEY) == "flash_attn-2.8.3-cu128-e2"
    assert tag_for("{package}", KEY) == "flash_attn"
    assert asset_url("o/r", "t-1", "a+b.whl") == "https://github.com/o/r/releases/download/t-1/a%2Bb.whl"


def test_assets_per_release_at_the_public_farms_scale() -> None:
    three_epochs = grid(epochs=range(3))
    per_package = assets_per_release("{package}", three_epochs)
    assert per_package == {"flash_attn": 1350}
    assert capacity_problems("{package}", three_epochs) == [
        (f"release flash_attn would hold 1350 assets, over GitHub's cap of {ASSET_CAP}: put more of the cell in "
        f"the target's tag (default {DEFAULT_TAG!r})")]
    by_default = assets_per_release(DEFAULT_TAG, grid(epochs=range(50)))
    assert max(by_default.values()) == 75
    assert len(by_default) == 6 * 50
    assert capacity_problems(DEFAULT_TAG, grid(epochs=range(50))) == []
    # A cell counted twice (the ledger's and the matrix's view of it) is one asset.
    assert assets_per_release(DEFAULT_TAG, [KEY, KEY]) == {"flash_attn-2.8.3-cu128-e2": 1}


def test_the_repositorys_grid_fits_under_the_default_tag(tmp_path: Path) -> None:
    """The repository's own grid (29 (CUDA, torch) rows, Python 3.10-3.15, 3 platforms) with 44
    recipes, 16,000+ cells an epoch: a release per package fills past 1,000 in the third epoch;
    the default tag keeps every release near a hundred, whatever the epoch."""
    from farm.load.recipes import load_config
    from farm.provenance.ledger import LedgerIndex
    from farm.schedule.matrix import compute_matrix
    from tests.test_waves import scale_root

    matrix = compute_matrix(load_config(scale_root(tmp_path / "farm")), LedgerIndex.empty())
    cells = [ExistsKey(c.package, c.version, c.cuda, c.torch, c.python, c.platform, epoch)
             for c in (p.cell for p in matrix.cells) for epoch in range(3)]
    assert len(cells) > 3 * 14_000
    assert max(assets_per_release("{package}", [k for k in cells if k.build_epoch < 2]).values()) < ASSET_CAP
    assert capacity_problems("{package}", cells)  # the third epoch crosses the cap
    assert max(assets_per_release(DEFAULT_TAG, cells).values()) < 200
    assert capacity_problems(DEFAULT_TAG, cells) == []


def test_tag_formats_are_checked_when_read() -> None:
    check_tag("{package}-{version}-{cu}-torch{torch}-e{epoch}")
    with pytest.raises(ConfigError, match="does not contain"):
        check_tag("{version}")
    with pytest.raises(ConfigError, match="is not a format"):
        check_tag("{package}-{arch}")


SHA, OTHER = "a" * 64, "b" * 64


@pytest.mark.parametrize(("present", "ledger", "assets", "action"), [
    (None, None, 0, Action.UPLOAD),
    (Present(SHA, 10), None, 5, Action.PRESENT),
    (Present(SHA, 10), SHA, 5, Action.PRESENT),
    (Present(OTHER, 10), None, 5, Action.VERIFY),  # an unrecorded earlier build
    (Present(None, 10), None, 5, Action.VERIFY),  # no digest reported: the bytes are read
    (Present(None, 10), SHA, 5, Action.VERIFY),
    (Present(OTHER, 10), SHA, 5, Action.REFUSE),  # replaced outside farm
    (Present(OTHER, 10, "starter"), None, 5, Action.CLEAR),  # an upload that never finished
    (None, None, ASSET_CAP, Action.REFUSE),
])
def test_decide(present: Present | None, ledger: str | None, assets: int, action: Action) -> None:
    assert decide(SHA, 10, present, ledger, assets=assets)[0] is action


def test_oversized_asset_refused() -> None:
    action, why = decide(SHA, 2 * 1024**3, None, None, assets=0)
    assert action is Action.REFUSE
    assert "2 GiB" in why


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_throttle_keeps_every_window_under_githubs_numbers() -> None:
    clock = FakeClock()
    throttle = Throttle(github_limits(), clock=clock)
    sent: list[tuple[float, str]] = []
    for i in range(1200):  # uploads and listings, interleaved
        method = "POST" if i % 2 else "GET"
        throttle.wait(method)
        sent.append((clock.t, method))
        throttle.sent(method)

    def busiest(period: float, content: bool) -> int:
        times = [t for t, m in sent if not content or m == "POST"]
        return max(sum(1 for u in times if t <= u < t + period) for t in times)

    assert busiest(60, True) <= CONTENT_PER_MINUTE
    assert busiest(3600, True) <= CONTENT_PER_HOUR
    assert busiest(3600, False) <= PRIMARY_PER_HOUR
    assert throttle.waited_s > 3600  # 600 uploads need more than an hour at 450 an hour


def test_concurrent_publishers_share_the_budgets() -> None:
    assert [limit.count for limit in github_limits()] == [900, 72, 450]
    assert [limit.count for limit in github_limits(publishers=20)] == [45, 3, 22]
    assert [limit.count for limit in github_limits(publishers=1000)] == [1, 1, 1]


def test_retry_after_reads_githubs_headers() -> None:
    assert retry_after(429, {"Retry-After": "7"}, 0) == 7
    assert retry_after(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "130"}, 100) == 31
    assert retry_after(403, {}, 0, '{"message": "You have exceeded a secondary rate limit"}') == 60
    assert retry_after(403, {}, 0, '{"message": "Resource not accessible by integration"}') is None
    assert retry_after(500, {"Retry-After": "1"}, 0) is None


def client(sim: ghsim.GitHubSim, token: str = ghsim.TOKEN, **kw: object) -> Client:
    return Client(sim.repo, token, api_url=sim.base, uploads_url=sim.base + "uploads",
                  throttle=Throttle(clock=sim.clock), clock=sim.clock, **kw)  # type: ignore[arg-type]


def test_client_round_trip(sim: ghsim.GitHubSim, tmp_path: Path) -> None:
    c = client(sim)
    assert c.release("t1") is None
    release = c.create_release("t1", "notes")
    assert c.create_release("t1", "notes") == release  # 422 already_exists: the existing one
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel bytes")
    asset = c.upload(release, wheel, wheel.name)
    assert asset is not None
    assert asset.sha256 == hashlib.sha256(b"wheel bytes").hexdigest()
    assert c.upload(release, wheel, wheel.name) is None  # 422 already_exists
    sha = c.download(asset, tmp_path / "back.whl", max_bytes=asset.size)  # via signed storage, no token sent
    assert sha == asset.sha256
    assert (tmp_path / "back.whl").read_bytes() == b"wheel bytes"
    c.delete(asset)
    assert c.assets(release) == []


def test_listing_is_paginated(sim: ghsim.GitHubSim) -> None:
    for i in range(250):
        sim.put_asset("big", f"a{i}.whl", b"x")
    c = client(sim)
    release = c.release("big")
    assert release is not None
    assert len(c.assets(release)) == 250
    assert c.requests == 1 + 3


def test_a_bad_token_is_an_environment_error_that_never_shows_the_token(sim: ghsim.GitHubSim) -> None:
    with pytest.raises(GithubApiError) as info:
        client(sim, token="ghp_wrongtoken123").release("t")
    assert info.value.status == 401
    assert "GH_TOKEN" in str(info.value)
    assert "ghp_wrong" not in str(info.value)
    assert isinstance(info.value, ToolError)
    assert info.value.exit_code == 3


def test_retries_are_bounded(tmp_path: Path) -> None:
    """A rate limit that never lifts within max_wait_s: the client stops, with GitHub's time."""
    limits = ghsim.Limits(primary_per_hour=2)
    with ghsim.serve(ghsim.GitHubSim(clock=ghsim.ScaledClock(600.0), limits=limits)) as sim:
        c = client(sim, max_wait_s=60.0)
        c.release("a")
        c.release("b")
        with pytest.raises(GithubApiError, match="asks to wait") as info:
            c.release("c")
        assert info.value.status == 403
        assert c.requests == 3


def test_githubs_own_count_of_the_budget_is_obeyed_before_a_403() -> None:
    """Another job spent the token's primary budget: GitHub's x-ratelimit-remaining says 0, and
    the client waits for x-ratelimit-reset instead of being refused."""
    limits = ghsim.Limits(primary_per_hour=3)
    with ghsim.serve(ghsim.GitHubSim(clock=ghsim.ScaledClock(3600.0), limits=limits)) as sim:
        c = client(sim)
        for tag in "abcd":
            assert c.release(tag) is None
        assert sim.count(status=403) == 0
        assert c.requests == 4
        assert c.throttle.waited_s >= 3000  # most of an hour, in GitHub's time


def test_the_cap_answer_is_not_mistaken_for_already_there(sim: ghsim.GitHubSim, tmp_path: Path) -> None:
    for i in range(ghsim.ASSET_CAP):
        sim.put_asset("full", f"a{i}.whl", b"x")
    c = client(sim)
    release = c.release("full")
    assert release is not None
    wheel = tmp_path / "new.whl"
    wheel.write_bytes(b"y")
    with pytest.raises(GithubApiError, match="at most 1000 assets"):
        c.upload(release, wheel, wheel.name)


def test_redaction_covers_secret_names_and_url_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from farm.errors import FarmError, redact

    monkeypatch.setenv("GITHUB_TOKEN", "gho_abcdefgh")
    monkeypatch.setenv("MY_REGISTRY_TOKEN", "tok-12345")
    monkeypatch.setenv("TWINE_USERNAME", "alice")  # a user name is not a secret
    text = "gho_abcdefgh tok-12345 alice git clone https://x-access-token:abc@github.com/o/r.git"
    assert redact(text) == "*** *** alice git clone https://***@github.com/o/r.git"
    assert redact("pw=s3cr3t!", {"TWINE_PASSWORD": "s3cr3t!"}) == "pw=***"
    # every error farm prints goes through it
    assert "gho_abcdefgh" not in str(FarmError("bad gho_abcdefgh", hint="see https://u:p@h/"))
