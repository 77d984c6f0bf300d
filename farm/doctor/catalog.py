"""An index's compatibility catalogue (``compat/wheels.json``, written with the compatibility
pages): which wheel of a project runs on a GPU, for the fixes ``farm doctor`` names.

Read from another machine, so believed only as far as it parses: each record is checked field by
field and a malformed one is left out (its filename named); the whole file is capped in size.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from farm import jsonread
from farm.errors import FarmError, UsageError, clip
from farm.model.install import CATALOG, CATALOG_VERSION
from farm.netutil import download
from farm.provenance.buildinfo import Attestation

MAX_BYTES = 64 << 20
_KINDS = ("sass", "ptx-jit", "none")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# a stored wheel under the index root, as compat writes it: the fix pastes it into a shell command
_URL = re.compile(r"files/[A-Za-z0-9._~%+-]{1,300}\.whl")


def _file(rec: Any) -> tuple[str, str, str] | None:
    """(project, URL relative to the index root, sha256) of a record or a pin, if well formed."""
    if not isinstance(rec, dict):
        return None
    project, url, sha = rec.get("project"), rec.get("url"), rec.get("sha256")
    if not (isinstance(project, str) and isinstance(url, str) and isinstance(sha, str) and _SHA256.fullmatch(sha)
            and _URL.fullmatch(url) and re.fullmatch(r"[A-Za-z0-9._-]{1,200}", project)):
        return None
    return project, url, sha


def _attestation(rec: Any) -> Attestation | None:
    """A record's attestation, if well formed (an https URL, OWNER/REPO, the signing workflow)."""
    if not isinstance(rec, dict):
        return None
    url, repository, workflow = (rec.get(k) for k in ("url", "repository", "workflow"))
    if not all(isinstance(v, str) and 0 < len(v) < 300 for v in (url, repository, workflow)):
        return None
    if not str(url).startswith("https://") or not re.fullmatch(r"[\w.-]+/[\w.-]+", str(repository)):
        return None
    return Attestation(str(url), str(repository), str(workflow))


@dataclass(frozen=True)
class CatalogWheel:
    filename: str
    project: str  # PEP 503 normalised
    version: str
    channel: str
    cuda: str
    torch: str
    python: str
    platform: str
    devices: dict[str, tuple[str, str | None]]  # "9.0" -> (kind, minimum driver shown); absent: none
    files: tuple[tuple[str, str, str], ...]  # (project, URL under the index, sha256): it, then the farm wheels it pins
    installable: bool  # False: it pins a farm project its channel does not hold
    attestation: Attestation | None = None  # its signed build provenance, as the index's ledger records it

    @classmethod
    def parse(cls, rec: Any) -> CatalogWheel | None:
        if not isinstance(rec, dict) or not isinstance(rec.get("devices"), dict):
            return None
        fields = [rec.get(k) for k in ("filename", "project", "version", "channel", "cuda", "torch", "python",
                                       "platform")]
        if not all(isinstance(f, str) and 0 < len(f) < 300 for f in fields):
            return None
        pins = rec.get("pins")
        files = [_file(rec), *(_file(p) for p in pins)] if isinstance(pins, list) else [None]
        if not all(files) or not isinstance(rec.get("unresolved"), list):
            return None
        devices = {}
        for dev, v in rec["devices"].items():
            if not isinstance(v, dict) or v.get("kind") not in _KINDS or not isinstance(v.get("driver"), str | None):
                return None
            devices[str(dev)] = (str(v["kind"]), v.get("driver"))
        filename, project, version, channel, cuda, torch, python, platform = (str(f) for f in fields)
        return cls(filename, canonicalize_name(project), version, channel, cuda, torch, python, platform, devices,
                   tuple(f for f in files if f), not rec["unresolved"], _attestation(rec.get("attestation")))

    def as_record(self) -> dict[str, Any]:
        """The keys :func:`farm.model.install.commands` reads."""
        (project, url, sha), *pins = self.files
        return {"project": project, "url": url, "sha256": sha,
                "pins": [{"project": p, "url": u, "sha256": s} for p, u, s in pins]}


@dataclass(frozen=True)
class Catalog:
    url: str
    wheels: tuple[CatalogWheel, ...]
    skipped: int  # malformed records left out


def parse(doc: Any, url: str) -> Catalog:
    if not isinstance(doc, dict) or doc.get("schema_version") != CATALOG_VERSION or not isinstance(doc.get("wheels"),
                                                                                                  list):
        raise UsageError(f"not a farm compatibility catalogue (schema_version {CATALOG_VERSION})", where=url,
                         hint="pass the root of a farm index as --index-url (its compat/wheels.json); an index "
                              "an older farm wrote is regenerated by `farm index DIR`")
    parsed = [CatalogWheel.parse(r) for r in doc["wheels"]]
    wheels = tuple(w for w in parsed if w is not None)
    return Catalog(url, wheels, len(parsed) - len(wheels))


def fetch(index_url: str) -> Catalog:
    """The catalogue of the index at ``index_url`` (http(s), or a local folder)."""
    url = f"{index_url.rstrip('/')}/{CATALOG}"
    local = Path(index_url)
    if "://" not in index_url and local.is_dir():
        path = local / CATALOG
        try:
            text = jsonread.read_bounded(path, MAX_BYTES)
        except (OSError, ValueError) as exc:
            raise UsageError(f"no readable {CATALOG} under it ({clip(exc, 120)})", where=index_url,
                             hint="regenerate the index with this farm (farm index DIR)") from None
    else:
        with tempfile.TemporaryDirectory() as tmp:
            dest = Path(tmp) / "wheels.json"
            download(url, dest, max_bytes=MAX_BYTES, timeout=60)
            text = dest.read_bytes()
    try:
        doc = jsonread.loads(text)
    except ValueError as exc:  # not UTF-8, not JSON, nested too deep, a number of 100,000 digits
        raise UsageError(f"not a JSON file farm wrote: {clip(exc, 200)}", where=url) from None
    return parse(doc, url)


def try_fetch(index_url: str | None) -> tuple[Catalog | None, str | None]:
    """The catalogue, or why there is none (a fix without it still names the channel)."""
    if not index_url:
        return None, None
    try:
        return fetch(index_url), None
    except FarmError as exc:
        return None, f"{exc.message} ({exc.where})" if exc.where else exc.message
