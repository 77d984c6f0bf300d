"""Publishing asserted wheels: the gate, then the targets (static index, GitHub, twine).

- :mod:`farm.publish.gate`: every wheel checked before anything is sent.
- :mod:`farm.publish.index`: the static PEP 503 tree and its regeneration from the ledger.
- :mod:`farm.publish.github`: release tags and the per-wheel decision (pure); :mod:`farm.publish.ghrest`
  the REST calls, throttled under :mod:`farm.publish.ratelimit`; :mod:`farm.publish.releases` one
  wheel at a time; :mod:`farm.publish.adopt` an unrecorded asset re-asserted.
- :mod:`farm.publish.ledgerpush`: the ledger committed and pushed, rebased and retried.
- :mod:`farm.publish.twine`: any PyPI-compatible repository.
- :mod:`farm.publish.targets`: ``_defaults.yml`` ``publish:`` settings.
- :mod:`farm.publish.publish`: the order of it all, and the ledger updates; :mod:`farm.publish.verdict`
  what became of each wheel.
"""

from __future__ import annotations

from farm.provenance.verdict import Check
from farm.publish.gate import GatedWheel, GateResult, Refusal, Vouchers, run_gate
from farm.publish.publish import UploadReport, regenerate_index, regenerate_variants, upload
from farm.publish.targets import (
    GithubSettings,
    IndexSettings,
    TargetKind,
    TargetSettings,
    TwineSettings,
    parse_targets,
    select,
)
from farm.publish.verdict import TargetOutcome, Verdict, WheelVerdict

__all__ = [
    "Check",
    "GateResult",
    "GatedWheel",
    "GithubSettings",
    "IndexSettings",
    "Refusal",
    "TargetKind",
    "TargetOutcome",
    "TargetSettings",
    "TwineSettings",
    "UploadReport",
    "Verdict",
    "Vouchers",
    "WheelVerdict",
    "parse_targets",
    "regenerate_index",
    "regenerate_variants",
    "run_gate",
    "select",
    "upload",
]
