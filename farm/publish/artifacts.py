"""A workflow run's artifacts, as the job that publishes them reads them: listed once, then each
downloaded by name into a file under a cap.

Inside the run that made them, farm asks the run's artifact service, the one
``actions/download-artifact`` uses for its own run: ``ACTIONS_RESULTS_URL`` with the job's
runtime token (``ACTIONS_RUNTIME_TOKEN``, whose ``Actions.Results`` claim names the run and the
job), two Twirp calls (``ListArtifacts`` once, ``GetSignedArtifactURL`` per artifact) and then the
signed storage URL, fetched without any token. That service is not GitHub's REST API: nothing
asked of it counts against the token's REST limits, so a publish job spends its share of those on
uploads. (Its own limits are not documented; it is asked at most twice per artifact, retried on
5xx and 429 a bounded number of times within the job's clock.)

Anywhere else (another run's artifacts, a job without a runtime token) the REST API serves them
(:meth:`farm.publish.ghrest.Client.artifacts`, one listing in pages of 100, one request per
download). :func:`run_artifacts` picks the way; both hand back :class:`~farm.publish.ghrest.Artifact`.
"""

from __future__ import annotations

import base64
import binascii
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from farm import jsonread
from farm.errors import NetworkError, ToolError, clip
from farm.netutil import download
from farm.publish.ghrest import Artifact, Client, GithubApiError, NoRedirect
from farm.publish.ratelimit import Clock, RealClock, WaitBudget

SERVICE = "github.actions.results.api.v1.ArtifactService"
MAX_TOKEN = 16 * 1024
MAX_ANSWER = 16 * 1024 * 1024  # a listing of thousands of artifacts is a few MB
RETRIES = 4
TIMEOUT_S = 120.0


_OPENER = urllib.request.build_opener(NoRedirect)  # the service answers; it never sends a client elsewhere


class Source(Protocol):
    """Where a run's artifacts are listed and downloaded from."""

    requests: int

    def artifacts(self, run_id: str) -> list[Artifact]: ...

    def download_artifact(self, artifact: Artifact, dest: Path, *, max_bytes: int) -> str: ...


def runtime_ids(token: str) -> tuple[str, str]:
    """The run's and the job's backend ids from a runtime token's ``Actions.Results`` claim (the
    token is a JWT; its signature is the service's to check, not farm's)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        scopes = str(claims["scp"]).split(" ")
    except (IndexError, ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ToolError("ACTIONS_RUNTIME_TOKEN is not a runtime token farm can read",
                        hint="expose the job's own token to the publish step (docs/ci.md), or unset it to "
                             "download through the REST API") from None
    for scope in scopes:
        parts = scope.split(":")
        if parts[0] == "Actions.Results" and len(parts) == 3 and all(parts[1:]):
            return parts[1], parts[2]
    raise ToolError("ACTIONS_RUNTIME_TOKEN names no run (no Actions.Results claim)",
                    hint="expose the job's own token to the publish step (docs/ci.md)")


def _text(obj: Mapping[str, Any], *names: str) -> str:
    """The first of ``names`` present (the service answers in proto or camelCase field names)."""
    for name in names:
        if obj.get(name) is not None:
            return str(obj[name])
    raise KeyError(names[0])


def _artifact(obj: Any) -> Artifact:
    try:
        digest = obj.get("digest")
        if isinstance(digest, dict):  # a StringValue may come wrapped
            digest = digest.get("value")
        return Artifact(int(_text(obj, "database_id", "databaseId")), _text(obj, "name"),
                        int(_text(obj, "size")), False,
                        digest.split(":", 1)[1] if isinstance(digest, str) and digest.startswith("sha256:") else None)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GithubApiError(f"the artifact service listed an artifact farm cannot read ({type(exc).__name__}): "
                             f"{clip(obj)}") from None


@dataclass
class ArtifactService:
    """This run's artifacts through its artifact service (Twirp, JSON)."""

    results_url: str
    token: str = field(repr=False)
    clock: Clock = field(default_factory=RealClock)
    budget: WaitBudget = field(default_factory=WaitBudget)
    timeout_s: float = TIMEOUT_S
    requests: int = 0

    def __post_init__(self) -> None:
        self.run_backend, self.job_backend = runtime_ids(self.token)

    def _call(self, method: str, body: Mapping[str, Any]) -> Any:
        url = f"{self.results_url.rstrip('/')}/twirp/{SERVICE}/{method}"
        data = json.dumps({"workflow_run_backend_id": self.run_backend,
                           "workflow_job_run_backend_id": self.job_backend, **body}).encode()
        for attempt in range(RETRIES + 1):
            self.requests += 1
            request = urllib.request.Request(url, data=data, method="POST", headers={
                "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                "User-Agent": "farm-publish"})
            try:
                with _OPENER.open(request, timeout=self.timeout_s) as response:
                    payload = response.read(MAX_ANSWER + 1)
                if len(payload) > MAX_ANSWER:
                    raise GithubApiError(f"{method}: the artifact service answered more than {MAX_ANSWER >> 20} MiB")
                return jsonread.loads(payload)
            except urllib.error.HTTPError as exc:
                status, said = exc.code, exc.read(4096).decode("utf-8", "replace")
                exc.close()
                if status not in (429, 500, 502, 503, 504) or attempt == RETRIES:
                    raise GithubApiError(f"{method}: the artifact service answered HTTP {status}: {clip(said, 300)}",
                                         status=status, hint="the publish job needs this run's runtime token "
                                                             "(docs/ci.md)") from None
            except (urllib.error.URLError, OSError) as exc:
                if attempt == RETRIES:
                    raise GithubApiError(f"{method}: cannot reach the artifact service "
                                         f"({getattr(exc, 'reason', None) or exc})") from None
            except ValueError:
                raise GithubApiError(f"{method}: the artifact service's answer is not JSON") from None
            wait = min(2.0 ** attempt * 3, 60.0)
            self.budget.allow(self.clock.now(), wait, rate_limit=False, what=f"{method}: a retry")
            self.clock.sleep(wait)
        raise AssertionError("unreachable")

    def _storage(self, url: str) -> bool:
        """A storage URL farm downloads from: https, or the service's own scheme and host (a
        service on loopback in the tests)."""
        got, own = urllib.parse.urlsplit(url), urllib.parse.urlsplit(self.results_url)
        return got.scheme == "https" or (got.scheme, got.netloc) == (own.scheme, own.netloc)

    def artifacts(self, run_id: str) -> list[Artifact]:  # noqa: ARG002 (the token names the run)
        """Every live artifact of this run (the service lists no expired one)."""
        answer = self._call("ListArtifacts", {})
        items = answer.get("artifacts", []) if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise GithubApiError("ListArtifacts: the answer holds no list of artifacts")
        return [_artifact(a) for a in items]

    def download_artifact(self, artifact: Artifact, dest: Path, *, max_bytes: int) -> str:
        """The artifact's bytes into ``dest`` (at most ``max_bytes``); their sha256, checked
        against the digest the service listed."""
        if artifact.size > max_bytes:
            raise GithubApiError(f"artifact {artifact.name}: {artifact.size:,} bytes, more than the {max_bytes:,} "
                                 "allowed", hint="a wheel artifact is one wheel; a fragment artifact a few KB")
        answer = self._call("GetSignedArtifactURL", {"name": artifact.name})
        url = answer.get("signed_url") or answer.get("signedUrl") if isinstance(answer, dict) else None
        if not isinstance(url, str) or not self._storage(url):
            raise GithubApiError(f"artifact {artifact.name}: the artifact service gave no https storage URL",
                                 hint="farm follows a storage URL over https only (or to the service's own host)")
        try:
            got = download(url, dest, max_bytes=max_bytes, timeout=self.timeout_s).sha256
        except NetworkError as exc:
            raise GithubApiError(f"downloading artifact {artifact.name}: {exc.message}") from None
        if artifact.sha256 is not None and got != artifact.sha256:
            dest.unlink(missing_ok=True)
            raise GithubApiError(f"artifact {artifact.name}: its bytes have sha256 {got}, the service listed "
                                 f"{artifact.sha256}", hint="the download was altered or cut; the next publish "
                                                            "job tries again")
        return got


def run_artifacts(env: Mapping[str, str], rest: Client, run_id: str, *, budget: WaitBudget | None = None) -> Source:
    """Where ``run_id``'s artifacts come from: this run's artifact service when ``run_id`` is the
    run this job belongs to (``GITHUB_RUN_ID``) and the job has its runtime token, else the REST
    API through ``rest``."""
    token, url = env.get("ACTIONS_RUNTIME_TOKEN", ""), env.get("ACTIONS_RESULTS_URL", "")
    if token and url and env.get("GITHUB_RUN_ID") == run_id and len(token) <= MAX_TOKEN:
        return ArtifactService(url, token, clock=rest.clock, budget=budget or rest.throttle.budget)
    return rest
