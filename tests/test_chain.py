"""The next wave's inputs merged with the run already waiting in the concurrency group: GitHub
keeps one pending run per group and a newer one replaces it, so the merge must cover both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from farm.cli import main
from farm.errors import UsageError
from farm.schedule.chain import Inputs, merge, parse_title, title

NIGHTLY = Inputs()
FLASH = Inputs(package="flash_attn", cuda="12.8")


@pytest.mark.parametrize(
    ("mine", "pending", "merged"),
    [
        (FLASH, None, FLASH),  # nothing waits: my inputs
        (FLASH, FLASH, FLASH),
        (FLASH, NIGHTLY, NIGHTLY),  # the nightly covers every cell: the filtered chain's are in it
        (NIGHTLY, FLASH, NIGHTLY),
        # one list field differs: the lists join, the rest stays
        (FLASH, Inputs(package="natten", cuda="12.8"), Inputs(package="flash_attn natten", cuda="12.8")),
        (Inputs(platform="win_amd64"), Inputs(platform="linux_x86_64,win_amd64"),
         Inputs(platform="win_amd64,linux_x86_64")),
        # two fields differ: the product would miss cells, so both widen
        (FLASH, Inputs(package="natten", cuda="13.0"), Inputs()),
        (Inputs(cuda="12.8"), Inputs(cuda="13.0"), Inputs()),
    ],
)
def test_the_merge_covers_both_runs(mine: Inputs, pending: Inputs | None, merged: Inputs) -> None:
    assert merge(mine, pending) == merged


def covers(wide: Inputs, narrow: Inputs) -> bool:
    for k, v in wide.filters().items():
        if not v:
            continue
        w = set(v.replace(",", " ").split())
        n = set(narrow.filters()[k].replace(",", " ").split())
        if not n or not n <= w:
            return False
    return True


@pytest.mark.parametrize("a", [NIGHTLY, FLASH, Inputs(package="a b", platform="win_amd64"), Inputs(torch="2.8")])
@pytest.mark.parametrize("b", [NIGHTLY, FLASH, Inputs(package="b c", python="3.12"), Inputs(platform="linux_x86_64")])
def test_the_merge_is_a_superset_of_each_side(a: Inputs, b: Inputs) -> None:
    m = merge(a, b)
    assert covers(m, a)
    assert covers(m, b)


def test_runs_for_different_targets_do_not_merge() -> None:
    with pytest.raises(UsageError, match="one run cannot do both"):
        merge(Inputs(target="github"), Inputs(target="index"))


def test_the_title_carries_the_inputs_back() -> None:
    for inputs in (NIGHTLY, FLASH, Inputs(package="a b", platform="linux_x86_64,win_amd64", target="index")):
        assert parse_title(title(inputs)) == inputs
    # what build.yml's run-name renders for a scheduled run (no inputs)
    assert parse_title("build [package=*] [cuda=*] [torch=*] [python=*] [platform=*] [target=github]") == NIGHTLY
    assert parse_title("Update README") is None
    assert parse_title("build [package=*]") is None


def render_run_name(inputs: Inputs) -> str:
    """build.yml's run-name as GitHub renders it: ``${{ inputs.X || 'd' }}`` is X, else d."""
    flow = yaml.safe_load((Path(__file__).resolve().parent.parent / ".github/workflows/build.yml").read_text())
    values = {"target": inputs.target, **inputs.filters()}
    return re.sub(r"\$\{\{ inputs\.(\w+) \|\| '([^']*)' \}\}", lambda m: values[m[1]] or m[2], flow["run-name"])


@pytest.mark.parametrize("inputs", [NIGHTLY, FLASH, Inputs(package="a b", platform="linux_x86_64,win_amd64")])
def test_build_workflows_run_name_is_the_title(inputs: Inputs) -> None:
    assert render_run_name(inputs) == title(inputs)
    assert parse_title(render_run_name(inputs)) == inputs


def test_farm_chain_dry_run_prints_the_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chain", "--ref", "main", "--package", "flash_attn", "--cuda", "12.8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dispatch:  build [package=flash_attn] [cuda=12.8] [torch=*]" in out
