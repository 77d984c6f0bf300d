"""GitHub Releases: which release each wheel goes to (pure), and what to do about the asset of
its name that the release already holds (pure); the calls themselves are :mod:`farm.publish.ghrest`.

A release per ``tag`` (a format over the wheel's cell, :data:`DEFAULT_TAG` by default: one per
package, version, CUDA line and build epoch). GitHub refuses a release's 1,001st asset, and a
release that fills up blocks every later wave of its package, so the tag is chosen so that no
release can reach the cap at the farm's scale: with the epoch and CUDA line in the tag, a release
holds at most one epoch's (torch x python x platform) cells of one package version.
:func:`assets_per_release` counts it for a set of cells, so the matrix can check a tag before a
wave is built; :func:`capacity_problems` words what is over.

Per wheel (:func:`decide`): no asset of its name -> upload; the same sha256 -> already there;
another sha256 -> an earlier build's asset that the ledger never recorded (a run killed between
upload and record), to be downloaded and re-asserted (adopted, or an orphan to delete) by the
caller; never a block on the batch.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote

from farm.errors import ConfigError
from farm.provenance.ledgerline import ExistsKey

ASSET_CAP = 1000  # GitHub's per-release limit
ASSET_MAX_BYTES = 2 * 1024**3  # "< 2 GiB" per asset
DEFAULT_TAG = "{package}-{version}-{cu}-e{epoch}"
API_URL = "https://api.github.com"  # GitHub Enterprise Server has its own
UPLOADS_URL = "https://uploads.github.com"
TAG_FIELDS = ("package", "version", "cuda", "cu", "torch", "python", "platform", "epoch")


def tag_values(key: ExistsKey) -> dict[str, str]:
    """The fields a ``tag`` format may use, for one cell (``cu``: ``cu128`` for CUDA 12.8)."""
    return {"package": key.package, "version": key.version, "cuda": key.cuda,
            "cu": "cu" + key.cuda.replace(".", ""), "torch": key.torch, "python": key.python,
            "platform": key.platform, "epoch": str(key.build_epoch)}


def check_tag(tag: str) -> None:
    """Raise :class:`ConfigError` unless ``tag`` is a format of :data:`TAG_FIELDS` naming ``{package}``."""
    hint = f"e.g. {DEFAULT_TAG!r}; fields: {', '.join(TAG_FIELDS)}"
    if "{package}" not in tag:
        raise ConfigError(f"tag {tag!r} does not contain {{package}}", hint=hint)
    try:
        tag.format(**tag_values(ExistsKey("p", "1", "12.8", "2.8", "cp311", "linux_x86_64", 0)))
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise ConfigError(f"tag {tag!r} is not a format of {', '.join(TAG_FIELDS)} ({exc!r})", hint=hint) from None


def tag_for(tag: str, key: ExistsKey) -> str:
    return tag.format(**tag_values(key))


def assets_per_release(tag: str, cells: Iterable[ExistsKey]) -> dict[str, int]:
    """How many assets each release holds once every cell of ``cells`` is published under the
    tag format ``tag`` (pure; one asset per cell). Pass the cells the ledger already records as
    published together with the ones a matrix is about to build: a tag without ``{epoch}`` keeps
    collecting assets epoch after epoch."""
    return dict(Counter(tag_for(tag, key) for key in set(cells)))


def capacity_problems(tag: str, cells: Iterable[ExistsKey], *, cap: int = ASSET_CAP) -> list[str]:
    """One line per release that ``cells`` would take past ``cap`` assets (empty: all fit)."""
    return [f"release {name} would hold {count} assets, over GitHub's cap of {cap}: put more of the cell in "
            f"the target's tag (default {DEFAULT_TAG!r})"
            for name, count in sorted(assets_per_release(tag, cells).items()) if count > cap]


def asset_url(repository: str, tag: str, filename: str) -> str:
    return f"https://github.com/{repository}/releases/download/{quote(tag)}/{quote(filename)}"


class Action(str, enum.Enum):
    UPLOAD = "upload"
    PRESENT = "present"  # the same bytes are there already
    CLEAR = "clear"  # an upload that never finished (state "starter"): delete it, then upload
    VERIFY = "verify"  # other bytes under the name: download and re-assert them
    REFUSE = "refuse"


@dataclass(frozen=True)
class Present:
    """What the release holds under a wheel's name (``sha256`` None: GitHub reported no digest)."""

    sha256: str | None
    size: int
    state: str = "uploaded"


def decide(sha256: str, size: int, present: Present | None, ledger_sha256: str | None, *,
           assets: int, cap: int = ASSET_CAP) -> tuple[Action, str]:
    """What to do with one gated wheel on its release (pure).

    ``present``: the asset of its name, if any; ``ledger_sha256``: the sha256 the ledger records
    for its name, if any; ``assets``: how many assets the release holds now."""
    if size >= ASSET_MAX_BYTES:
        return Action.REFUSE, f"{size} bytes; a release asset must be under 2 GiB"
    if present is None:
        if assets >= cap:
            return Action.REFUSE, (f"the release holds {assets} assets, GitHub's cap: put more of the cell in the "
                                   f"target's tag (default {DEFAULT_TAG!r}) and publish again")
        return Action.UPLOAD, ""
    if present.state != "uploaded":
        return Action.CLEAR, f"an upload that never finished (state {present.state!r})"
    if present.sha256 is None:  # assets uploaded before GitHub computed digests
        return Action.VERIFY, "GitHub reports no digest for the asset under this name: its bytes are read"
    return other_bytes(sha256, present.sha256, ledger_sha256)


def other_bytes(sha256: str, other: str, ledger_sha256: str | None, *,
                holder: str = "the release") -> tuple[Action, str]:
    """What to do when ``holder`` (a release, the static index) holds bytes with sha256 ``other``
    under the name of a wheel with ``sha256`` (pure; ``ledger_sha256`` as for :func:`decide`)."""
    if other == sha256:
        return Action.PRESENT, ""
    if ledger_sha256 is not None and ledger_sha256 == other:
        return Action.REFUSE, (f"{holder} holds the published build (sha256 {other}) and this is "
                               f"another one ({sha256}); a published name is never reused: bump build_epoch")
    if ledger_sha256 is not None:
        return Action.REFUSE, (f"{holder} holds sha256 {other} under a name the ledger records with "
                               f"{ledger_sha256}: the file was replaced outside farm; delete it and publish again")
    return Action.VERIFY, (f"{holder} already holds another build under this name (sha256 {other}) that "
                           "the ledger does not record")
