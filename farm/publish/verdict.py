"""What became of each wheel on each target: the verdicts a publish reports, and what each
target's pass over a batch is given (:class:`PublishRun`) and gives back (:class:`Placed`)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from farm.provenance.ledgerbook import LedgerBook
    from farm.publish.adopt import Regate
    from farm.publish.gate import GatedWheel, Vouchers
    from farm.publish.ghrest import Client
    from farm.publish.githubsettings import GithubSettings
    from farm.publish.ledgerpush import LedgerPusher


class Verdict(str, enum.Enum):
    """What became of one wheel on one target."""

    PUBLISHED = "published"  # sent by this run
    PRESENT = "present"  # already there, the same bytes
    ADOPTED = "adopted"  # an unrecorded earlier build of the cell was there; re-asserted and recorded instead
    REPLACED = "replaced"  # an orphan under its name was deleted and this wheel sent (--delete-orphans)
    WOULD_SEND = "would-send"  # a dry run's plan
    WOULD_VERIFY = "would-verify"  # a dry run: another build is there, to be re-asserted
    ORPHAN = "orphan"  # an unrecorded asset under its name failed re-assertion: to delete
    REFUSED = "refused"  # the gate or the target refused this wheel
    FAILED = "failed"  # the target could not be reached or answered an error (after bounded retries)


OK_VERDICTS = frozenset({Verdict.PUBLISHED, Verdict.PRESENT, Verdict.ADOPTED, Verdict.REPLACED,
                         Verdict.WOULD_SEND, Verdict.WOULD_VERIFY})


@dataclass(frozen=True)
class WheelVerdict:
    wheel: str
    target: str  # a target's name, or "gate"
    verdict: Verdict
    url: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict in OK_VERDICTS

    def line(self) -> str:
        return (f"{self.wheel}: {self.target}: {self.verdict.value}" + (f" {self.url}" if self.url else "")
                + (f" ({self.message})" if self.message else ""))

    def to_json(self) -> dict[str, Any]:
        return {"wheel": self.wheel, "target": self.target, "verdict": self.verdict.value, "url": self.url,
                "message": self.message}


@dataclass(frozen=True)
class TargetOutcome:
    target: str
    kind: str
    placed: tuple[tuple[str, str], ...]  # (filename, url) of every wheel of the batch
    sent: tuple[str, ...]  # filenames actually transferred this run
    commands: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    requests: int = 0  # GitHub API requests sent
    rate_limited: int = 0  # GitHub rate-limit answers obeyed
    throttled_s: float = 0.0  # time the client-side throttle waited


@dataclass(frozen=True)
class PublishRun:
    """What a target's pass over a batch is given: the publish's open ledger book, the vouchers
    its gate read, and the run's options."""

    book: LedgerBook
    vouchers: Vouchers
    env: Mapping[str, str] | None
    dry_run: bool
    delete_orphans: bool
    github_client: Callable[[GithubSettings], Client]
    gate: Regate  # the batch's gate, for a wheel found another way (an unrecorded asset re-asserted)
    pusher: LedgerPusher | None
    placed_on: Mapping[str, set[str]]  # target name -> the wheels placed there earlier in this run
    kept: dict[str, Any] = field(default_factory=dict)  # target name -> what it read in the job's earlier batches


@dataclass(frozen=True)
class Placed:
    """A target's pass over a batch: its outcome, a verdict per wheel, the (wheel, url) pairs
    its caller records in the ledger, and what the target recorded itself (GitHub records each
    wheel before the next): the entries merged and the publications recorded."""

    outcome: TargetOutcome
    verdicts: tuple[WheelVerdict, ...]
    record: tuple[tuple[GatedWheel, str], ...] = ()
    merged: tuple[str, ...] = ()
    recorded: int = 0
