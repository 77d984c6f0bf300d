"""A wave's plan sliced per shard job: only indices cross the matrix job's outputs, each shard's
entries are read from the plan and measured in UTF-16 units (what GitHub counts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.errors import UsageError
from farm.schedule.slices import (
    GITHUB_OUTPUT_LIMIT,
    SHARD_SIZE,
    check_outputs,
    shard_count,
    slice_outputs,
    slice_plan,
    utf16_units,
)


def entry(i: int, **extra: str) -> dict[str, Any]:
    return {"id": f"p-1.0-cu128-torch2.8-cp311-{i}", "package": "p", "cuda": "12.8", "torch": "2.8",
            "python": "3.11", "platform": "linux_x86_64", "runner": "ubuntu-24.04", **extra}


def plan_of(n: int, links: int = 0) -> dict[str, Any]:
    build = [entry(i) for i in range(n)]
    link = [entry(i, shard="link", name=f"x{i}.link") for i in range(links)]
    return {"cells": [{"id": e["id"], "package": "p"} for e in build], "totals": {"deferred": 0},
            "matrix": {"build": build, "link": link}}


def test_utf16_units_count_astral_characters_twice() -> None:
    assert utf16_units("abc") == 3
    assert utf16_units("é") == 1  # one unit, two UTF-8 bytes
    assert utf16_units("\U0001f600") == 2  # one character, two units
    # a value under the limit in characters can be over it in the units GitHub counts
    text = "\U0001f600" * (GITHUB_OUTPUT_LIMIT // 2 + 1)
    assert len(text) < GITHUB_OUTPUT_LIMIT < utf16_units(text)
    with pytest.raises(UsageError, match="UTF-16 units"):
        check_outputs({"cells": text}, "a shard")


def test_the_shards_cover_the_build_entries_in_order() -> None:
    plan = plan_of(2 * SHARD_SIZE + 7, links=3)
    assert shard_count(plan) == 3
    slices = [slice_plan(plan, str(i)) for i in range(3)]
    assert [len(s) for s in slices] == [SHARD_SIZE, SHARD_SIZE, 7]
    assert [e for s in slices for e in s] == plan["matrix"]["build"]
    assert slice_plan(plan, "link") == plan["matrix"]["link"]
    out = slice_outputs(slices[0])
    assert json.loads(out["cells"]) == slices[0]
    assert out["count"] == str(SHARD_SIZE)


@pytest.mark.parametrize(("shard", "message"), [("3", "has 3 shard"), ("-1", "has 3 shard"), ("x", "shard index")])
def test_a_shard_the_plan_lacks_is_refused(shard: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        slice_plan(plan_of(2 * SHARD_SIZE + 7), shard)


def test_an_entry_for_a_cell_the_plan_does_not_schedule_is_refused() -> None:
    plan = plan_of(3)
    plan["matrix"]["build"].append(entry(99))
    with pytest.raises(UsageError, match="does not schedule"):
        slice_plan(plan, "0")
    plan = plan_of(3)
    plan["matrix"]["build"][1] = {"id": plan["cells"][1]["id"]}
    with pytest.raises(UsageError, match="not a build entry"):
        slice_plan(plan, "0")


def test_farm_slice_writes_the_shards_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_of(SHARD_SIZE + 1)))
    out = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert main(["slice", "--plan", str(plan), "--shard", "1", "--github-output"]) == 0
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert outputs["count"] == "1"
    assert json.loads(outputs["cells"]) == [entry(SHARD_SIZE)]


def test_farm_slice_refuses_what_is_not_a_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("[1, 2]")
    assert main(["slice", "--plan", str(bad), "--shard", "0"]) == 2
    assert main(["slice", "--plan", str(tmp_path / "none.json"), "--shard", "0"]) == 2
    bad.write_text(json.dumps({"cells": []}))
    assert main(["slice", "--plan", str(bad), "--shard", "0"]) == 2
    assert "not a wave plan" in capsys.readouterr().err
