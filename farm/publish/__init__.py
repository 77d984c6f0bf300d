"""Publishing asserted wheels: the gate, then the targets (static index, GitHub, twine).

- :mod:`farm.publish.gate`: every wheel checked before anything is sent.
- :mod:`farm.publish.index`: the static PEP 503 tree and its regeneration from the ledger.
- :mod:`farm.publish.github`: release tags and the per-wheel decision (pure); :mod:`farm.publish.ghrest`
  the REST calls, throttled under :mod:`farm.publish.ratelimit`; :mod:`farm.publish.releases` one
  wheel at a time; :mod:`farm.publish.adopt` an unrecorded asset re-asserted.
- :mod:`farm.publish.ledgerpush`: the ledger committed and pushed, rebased and retried.
- :mod:`farm.publish.twine`: any PyPI-compatible repository.
- :mod:`farm.publish.targets`: ``_defaults.yml`` ``publish:`` targets, the registry of their kinds.
- :mod:`farm.publish.publish`: the order of it all, and the ledger updates; :mod:`farm.publish.verdict`
  what became of each wheel.
"""

from __future__ import annotations

from farm.provenance.judge import Check
from farm.publish.gate import GatedWheel, GateResult, Refusal, Vouchers, run_gate
from farm.publish.index import IndexSettings
from farm.publish.publish import UploadReport, regenerate_index, upload
from farm.publish.releases import GithubSettings
from farm.publish.targets import PublishTarget, parse_targets, select
from farm.publish.twine import TwineSettings
from farm.publish.verdict import TargetOutcome, Verdict, WheelVerdict

__all__ = [
    "Check",
    "GateResult",
    "GatedWheel",
    "GithubSettings",
    "IndexSettings",
    "PublishTarget",
    "Refusal",
    "TargetOutcome",
    "TwineSettings",
    "UploadReport",
    "Verdict",
    "Vouchers",
    "WheelVerdict",
    "parse_targets",
    "regenerate_index",
    "run_gate",
    "select",
    "upload",
]
