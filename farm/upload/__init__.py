"""Publishing asserted wheels: the gate, then the targets (static index, GitHub, twine).

- :mod:`farm.upload.gate`: every wheel checked before anything is sent.
- :mod:`farm.upload.index`: the static PEP 503 tree and its regeneration from the ledger.
- :mod:`farm.upload.github`: the pure ``gh`` planner and its runner.
- :mod:`farm.upload.twine`: any PyPI-compatible repository.
- :mod:`farm.upload.targets`: ``_defaults.yml`` ``publish:`` settings.
- :mod:`farm.upload.publish`: the order of it all, and the ledger updates.
"""

from __future__ import annotations

from .gate import Check, GatedWheel, GateResult, Refusal, Vouchers, run_gate
from .publish import TargetOutcome, UploadReport, regenerate_index, upload
from .targets import (
    GithubSettings,
    IndexSettings,
    TargetKind,
    TargetSettings,
    TwineSettings,
    parse_targets,
    select,
)

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
    "Vouchers",
    "parse_targets",
    "regenerate_index",
    "run_gate",
    "select",
    "upload",
]
