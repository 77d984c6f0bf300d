"""_build_info.json: CI detection, toolchain versions from real tools, schema validation."""

from __future__ import annotations

import copy
import json
import platform
import subprocess
from pathlib import Path

import jsonschema
import pytest

from farm.errors import ToolError, WheelError
from farm.provenance import buildinfo
from farm.toolkit.assemble import parse_nvcc_release

SHA = "ab" * 32


def asserted_example() -> dict:
    return buildinfo.make_build_info(
        package="demo_ext",
        dist="demo_ext",
        version="0.1.0",
        cell={"cuda": "13.0", "torch": "none", "python": "cp311", "platform": "linux_x86_64"},
        build_epoch=2,
        requested="8.0;9.0+PTX",
        normalised="sm_80;sm_90;compute_90",
        expected={"demo_ext/_C.so": "sm_80;sm_90;compute_90"},
        found={"demo_ext/_C.so": "sm_80;sm_90;compute_90"},
        tools={"native_reader": "farm 0.1.0", "cuobjdump": "13.2.51"},
        defaults_sha256=SHA,
        recipe_sha256=SHA,
        run=buildinfo.run_from_env({}),
        source=buildinfo.git_source("o/r", "v1", "c" * 40),
        toolchain={"nvcc": "13.0.88", "torch": None, "python": "3.11.7", "builder": "native",
                   "cibuildwheel": None},
        extensions={"demo_ext/_C.so": SHA},
    )


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(buildinfo.schema())


def test_the_architecture_doc_example_keys_are_exactly_the_schema_keys(repo_root: Path) -> None:
    text = (repo_root / "docs" / "architecture.md").read_text()
    block = text.split("```json", 1)[1].split("```", 1)[0]
    doc_keys = set(json.loads(block.replace('"...",', '"x",').replace('"<sha256>"', '"x"')
                              .replace('"sm_75;..."', '"x"')))
    assert doc_keys == set(buildinfo.schema()["required"])
    assert doc_keys == set(asserted_example())


def test_asserted_example_validates_and_round_trips() -> None:
    info = asserted_example()
    buildinfo.validate(info)
    assert buildinfo.loads(buildinfo.dumps(info)) == info


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("extensions"), "'extensions' is a required property"),
        (lambda d: d.update(provenance="guessed"), "provenance"),
        (lambda d: d["extensions"].update({"x.so": "not-a-hash"}), "extensions/x.so"),
        (lambda d: d.update(build_epoch=None), "build_epoch"),
        (lambda d: d.update(assertion={"result": "failed", "native_reader": None, "cuobjdump": None}), "assertion"),
        (lambda d: d.update(source={"kind": "git", "repo": "o/r"}), "source"),
        (lambda d: d["cell"].update(cuda="13"), "cell/cuda"),
    ],
)
def test_schema_rejects(mutate, message: str) -> None:
    info = copy.deepcopy(asserted_example())
    mutate(info)
    with pytest.raises(WheelError) as err:
        buildinfo.validate(info, where="w.whl")
    assert message in str(err.value)
    assert str(err.value).startswith("w.whl: invalid build info")


def test_inferred_entry_has_every_key_and_nulls_for_the_unknown() -> None:
    info = buildinfo.inferred_build_info(
        dist="demo_ext", version="0.1.0",
        cell={"cuda": "12.8", "torch": None, "python": "cp311", "platform": "linux_x86_64"},
        found={"demo_ext/_C.so": "sm_80"}, extensions={"demo_ext/_C.so": SHA},
    )
    buildinfo.validate(info)
    assert set(info) == set(asserted_example())
    assert info["provenance"] == "inferred"
    assert info["run"] is None and info["toolchain"] is None and info["build_epoch"] is None


def test_loads_refuses_non_json() -> None:
    with pytest.raises(WheelError, match="not JSON"):
        buildinfo.loads(b"{", where="x")


def test_run_from_github_actions_variables() -> None:
    env = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "o/farm", "GITHUB_SHA": "f" * 40,
           "GITHUB_RUN_ID": "123", "GITHUB_RUN_ATTEMPT": "2", "GITHUB_SERVER_URL": "https://github.com"}
    run = buildinfo.run_from_env(env)
    assert run == {"provider": "github", "repository": "o/farm", "commit": "f" * 40, "run_id": "123",
                   "attempt": "2", "url": "https://github.com/o/farm/actions/runs/123/attempts/2"}


def test_run_outside_ci_is_local_and_unknown_ci_is_not_called_local() -> None:
    assert buildinfo.run_from_env({}) == {"provider": "local", "repository": None, "commit": None,
                                          "run_id": None, "attempt": None}
    assert buildinfo.run_from_env({"CI": "true"})["provider"] == "ci"
    assert buildinfo.run_from_env({"GITLAB_CI": "true", "CI_PIPELINE_ID": "9"})["run_id"] == "9"


def test_toolchain_asks_the_real_nvcc(cuda_home: Path, nvcc: Path) -> None:
    reported = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    info = buildinfo.toolchain(cuda_home=cuda_home, builder="native")
    assert info["nvcc"] and f"V{info['nvcc']}" in reported
    assert info["python"] == platform.python_version()
    assert info["builder"] == "native" and info["cibuildwheel"] is None


def test_toolchain_reports_cibuildwheel_only_for_that_builder() -> None:
    from importlib.metadata import version

    assert buildinfo.toolchain(cuda_home=None, builder="cibuildwheel")["cibuildwheel"] == version("cibuildwheel")


def test_missing_nvcc_is_an_environment_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="no nvcc"):
        buildinfo.nvcc_version(tmp_path)


def test_parse_nvcc_version() -> None:
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"
    assert parse_nvcc_release(text) == "12.8.93"
    with pytest.raises(ToolError):
        parse_nvcc_release("garbage")


def test_sha256_file(tmp_path: Path) -> None:
    import hashlib

    f = tmp_path / "x"
    f.write_bytes(b"a" * (3 << 20))
    assert buildinfo.sha256_file(f) == hashlib.sha256(b"a" * (3 << 20)).hexdigest()
