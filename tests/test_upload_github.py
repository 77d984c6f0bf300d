"""The GitHub Releases planner: the exact ``gh`` command lines, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.errors import ToolError
from farm.publish.github import (
    ASSET_CAP,
    UPLOAD_CHUNK,
    Asset,
    Wheel,
    asset_url,
    parse_assets,
    plan,
    view,
)
from farm.publish.targets import GithubSettings

GH = GithubSettings("github", "farm-wheels/farm-wheels")


def wheel(name: str, package: str = "flash_attn", version: str = "2.8.3", sha: str = "a" * 64,
          size: int = 1000, recorded: bool = False) -> Wheel:
    return Wheel(Path("/out") / name, package, version, sha, size, recorded)


W1 = "flash_attn-2.8.3+cu128torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
W2 = "flash_attn-2.8.3+cu128torch2.8-cp312-cp312-manylinux_2_28_x86_64.whl"


def test_new_release_is_created_then_uploaded() -> None:
    p = plan(GH, [wheel(W2), wheel(W1)], {"flash_attn": None})
    assert p.ok
    assert p.lines() == [
        ("gh release create flash_attn --repo farm-wheels/farm-wheels --title flash_attn "
        "--notes 'Prebuilt CUDA wheels of flash_attn.'"),
        f"gh release upload flash_attn --repo farm-wheels/farm-wheels /out/{W1} /out/{W2}",
    ]
    assert p.uploads == (
        (W1, ("https://github.com/farm-wheels/farm-wheels/releases/download/flash_attn/"
             "flash_attn-2.8.3%2Bcu128torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl")),
        (W2, asset_url("farm-wheels/farm-wheels", "flash_attn", W2)),
    )
    assert not any("--clobber" in line for line in p.lines())


def test_one_release_per_package_and_tag_format() -> None:
    per_version = GithubSettings("github", "o/r", tag="{package}-{version}")
    p = plan(per_version, [wheel(W1), wheel("gsplat-1.5.3+cu128torch2.8-cp311-cp311-linux_x86_64.whl",
                                            package="gsplat", version="1.5.3")],
             {"flash_attn-2.8.3": [], "gsplat-1.5.3": None})
    assert p.lines() == [
        f"gh release upload flash_attn-2.8.3 --repo o/r /out/{W1}",
        "gh release create gsplat-1.5.3 --repo o/r --title gsplat-1.5.3 --notes 'Prebuilt CUDA wheels of gsplat.'",
        "gh release upload gsplat-1.5.3 --repo o/r /out/gsplat-1.5.3+cu128torch2.8-cp311-cp311-linux_x86_64.whl",
    ]


def test_reupload_of_the_same_file_is_a_noop() -> None:
    p = plan(GH, [wheel(W1)], {"flash_attn": [Asset(W1, 1000, "a" * 64)]})
    assert p.ok
    assert p.commands == ()
    assert p.skipped == (W1,)
    assert p.uploads[0][0] == W1  # still reported where it lives, for the ledger


def test_same_name_other_digest_refused() -> None:
    p = plan(GH, [wheel(W1), wheel(W2)], {"flash_attn": [Asset(W1, 1000, "b" * 64)]})
    assert not p.ok
    (refusal,) = p.refusals
    assert refusal.startswith(f"{W1}: release flash_attn already has it with sha256 {'b' * 64}")


def test_existing_asset_without_digest() -> None:
    # Recorded in the ledger as published here, same size: it is this file.
    p = plan(GH, [wheel(W1, recorded=True)], {"flash_attn": [Asset(W1, 1000, None)]})
    assert p.ok
    assert p.skipped == (W1,)
    # Not recorded: it cannot be verified, so it is not assumed.
    p = plan(GH, [wheel(W1)], {"flash_attn": [Asset(W1, 1000, None)]})
    assert not p.ok
    assert "no digest" in p.refusals[0]


def test_asset_cap_refused_and_warned_before() -> None:
    full = [Asset(f"old-{i}.whl", 1, None) for i in range(ASSET_CAP - 1)]
    p = plan(GH, [wheel(W1), wheel(W2)], {"flash_attn": full})
    assert not p.ok
    assert p.commands == ()
    assert "would hold 1001 assets, over GitHub's cap of 1000" in p.refusals[0]
    assert "'{package}-{version}'" in p.refusals[0]

    near = [Asset(f"old-{i}.whl", 1, None) for i in range(GH.warn_assets - 1)]
    p = plan(GH, [wheel(W1)], {"flash_attn": near})
    assert p.ok
    (warning,) = p.warnings
    assert f"will hold {GH.warn_assets} of 1000 assets" in warning


def test_oversized_asset_refused() -> None:
    p = plan(GH, [wheel(W1, size=2 * 1024**3)], {"flash_attn": None})
    assert not p.ok
    assert "under 2 GiB" in p.refusals[0]


def test_uploads_are_chunked() -> None:
    names = [f"flash_attn-2.8.3+cu128torch2.8-{i}-cp311-cp311-linux_x86_64.whl" for i in range(1, UPLOAD_CHUNK + 3)]
    p = plan(GH, [wheel(n) for n in names], {"flash_attn": []})
    assert [len(c) - 6 for c in p.commands] == [UPLOAD_CHUNK, 2]


def test_missing_release_state_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="release state of .* not given"):
        plan(GH, [wheel(W1)], {})


def test_parse_paginated_asset_listing() -> None:
    # `gh api --paginate ... --jq '.[] | {name, size, digest}'`: one object per line, all pages.
    text = "\n".join(json.dumps(a) for a in [
        {"name": W1, "size": 12, "digest": "sha256:" + "c" * 64},
        {"name": W2, "size": 13, "digest": None},
    ]) + "\n"
    assert parse_assets(text) == [Asset(W1, 12, "c" * 64), Asset(W2, 13, None)]
    with pytest.raises(ToolError, match="cannot read an asset from `gh api` output"):
        parse_assets('{"size": 12}\n')  # no name: an output format farm does not know


def test_runner_without_gh_is_an_environment_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError, match="`gh` is not on PATH") as exc:
        view("o/r", "flash_attn")
    assert exc.value.exit_code == 3


def test_a_gh_that_prints_the_token_has_it_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real executable on PATH standing in for gh: it echoes what a misbehaving tool could.
    fake = tmp_path / "gh"
    fake.write_text('#!/bin/sh\necho "token $GH_TOKEN rejected by https://bot:$CI_DEPLOY_PASSWORD@github.com/o/r" >&2\n'
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("CI_DEPLOY_PASSWORD", "hunter2-deploy")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "GH_TOKEN": "ghp_SECRETSECRET123",
           "CI_DEPLOY_PASSWORD": "hunter2-deploy"}
    with pytest.raises(ToolError) as exc:
        view("o/r", "flash_attn", env=env)
    shown = str(exc.value)
    assert "rejected by" in shown  # the line is relayed ...
    assert "ghp_SECRETSECRET123" not in shown
    assert "hunter2-deploy" not in shown
    assert "https://***@github.com/o/r" in shown


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
