"""Publishing asserted wheels: the gate, then the targets (static index, GitHub, twine).

- :mod:`farm.publish.gate`: every wheel checked before anything is sent.
- :mod:`farm.publish.index`: the static PEP 503 tree and its regeneration from the ledger.
- :mod:`farm.publish.github`: release tags and the per-wheel decision (pure); :mod:`farm.publish.ghrest`
  the REST calls, throttled under :mod:`farm.publish.ratelimit`; :mod:`farm.publish.releases` one
  wheel at a time; :mod:`farm.publish.adopt` an unrecorded asset re-asserted.
- :mod:`farm.publish.ledgerpush`: the ledger committed and pushed, rebased and retried.
- :mod:`farm.publish.twine`: any PyPI-compatible repository.
- :mod:`farm.publish.targets`: ``_defaults.yml`` ``publish:`` targets, the registry of their kinds,
  each kind's settings in a module of its own (:mod:`farm.publish.indexsettings`, ...).
- :mod:`farm.publish.publish`: the order of it all, and the ledger updates; :mod:`farm.publish.verdict`
  what became of each wheel.
"""
