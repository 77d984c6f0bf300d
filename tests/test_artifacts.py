"""Where a publish job's artifacts come from: its own run's artifact service (the runtime token),
else the REST API; a token farm cannot read is said, never a traceback."""

from __future__ import annotations

import base64
import json

import pytest

from farm.errors import ToolError
from farm.publish import ghrest
from farm.publish.artifacts import ArtifactService, run_artifacts, runtime_ids
from tests.support import ghsim


def token(claims: object) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"e30.{body}.c2ln"


def test_the_runtime_token_names_the_run_and_the_job() -> None:
    assert runtime_ids(token({"scp": "Actions.GenericRead:1 Actions.Results:run-b:job-b"})) == ("run-b", "job-b")
    assert runtime_ids(ghsim.GitHubSim().runtime_token(7))[0] == ghsim._backend(7)


@pytest.mark.parametrize("bad", ["", "abc", "a.b.c", token([1]), token({"scp": 3}), token({"scp": "Actions.Results:x"}),
                                 token({"scp": "Actions.Results::"}), token({"nothing": 1}), "a." + "A" * 10 + ".c"])
def test_a_token_farm_cannot_read_is_said(bad: str) -> None:
    with pytest.raises(ToolError, match="ACTIONS_RUNTIME_TOKEN"):
        runtime_ids(bad)


def test_the_service_only_for_the_jobs_own_run() -> None:
    rest = ghrest.Client("o/r", "t")
    env = {"ACTIONS_RUNTIME_TOKEN": token({"scp": "Actions.Results:r:j"}), "ACTIONS_RESULTS_URL": "https://results/",
           "GITHUB_RUN_ID": "42"}
    assert isinstance(run_artifacts(env, rest, "42"), ArtifactService)
    assert run_artifacts(env, rest, "41") is rest  # another run's artifacts: the REST API
    assert run_artifacts({**env, "ACTIONS_RUNTIME_TOKEN": ""}, rest, "42") is rest
    assert run_artifacts({k: v for k, v in env.items() if k != "ACTIONS_RESULTS_URL"}, rest, "42") is rest


def test_a_storage_url_is_https_or_the_services_own_host() -> None:
    service = ArtifactService("http://127.0.0.1:9/results/", token({"scp": "Actions.Results:r:j"}))
    assert service._storage("https://blob.example/x?sig=1")
    assert service._storage("http://127.0.0.1:9/_storage/1")
    assert not service._storage("http://127.0.0.1:10/_storage/1")
    assert not service._storage("file:///etc/passwd")
