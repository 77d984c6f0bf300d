"""The next wave's inputs, merged with the run already waiting so neither loses its cells.

GitHub keeps one running and one pending run per concurrency group, and a newer pending run
replaces the older. The nightly (no filters) and a chained wave (the filters its first run was
dispatched with) share the group, so whichever is queued second would silently drop the other's
inputs. Every dispatch therefore goes through :func:`merge`: the run to start covers both sets
of cells, field by field (equal fields stay; a field where one side is unfiltered becomes
unfiltered; two package or platform lists join when every other field is equal; anything else
widens to unfiltered). A wider run costs nothing extra: the matrix only schedules what the
ledger lacks. The pending run's inputs are read back from its title (``run-name`` in build.yml
writes them with :func:`title`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from farm.errors import UsageError

LIST_FIELDS = ("package", "platform")
TITLE_PREFIX = "build"


@dataclass(frozen=True)
class ChainInputs:
    """build.yml's workflow_dispatch inputs; "" is unfiltered."""

    package: str = ""
    cuda: str = ""
    torch: str = ""
    python: str = ""
    platform: str = ""
    target: str = "github"

    def filters(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "target"}


def _items(field: str, value: str) -> list[str]:
    sep = r"[\s,]+" if field == "platform" else r"\s+"
    return [v for v in re.split(sep, value.strip()) if v]


def merge(mine: ChainInputs, pending: ChainInputs | None) -> ChainInputs:
    """ChainInputs whose cells include both runs' (pure). Runs publishing to different targets cannot
    merge: a :class:`UsageError` says which to redispatch."""
    if pending is None or pending == mine:
        return mine
    if pending.target != mine.target:
        raise UsageError(f"a waiting run publishes to {pending.target!r}, this wave to {mine.target!r}: "
                         "one run cannot do both",
                         hint="let the waiting run start, then dispatch this wave again")
    a, b = mine.filters(), pending.filters()
    differ = [k for k in a if a[k] != b[k]]
    out: dict[str, str] = {}
    for k in a:
        if a[k] == b[k]:
            out[k] = a[k]
        elif a[k] and b[k] and k in LIST_FIELDS and differ == [k]:
            sep = "," if k == "platform" else " "
            out[k] = sep.join(dict.fromkeys([*_items(k, a[k]), *_items(k, b[k])]))
        else:  # one side unfiltered, or fields that cannot join: unfiltered
            out[k] = ""
    return replace(mine, **out)


def title(inputs: ChainInputs) -> str:
    """What build.yml's ``run-name`` renders for these inputs (``*`` is unfiltered)."""
    parts = [f"{k}={v or '*'}" for k, v in inputs.filters().items()]
    return f"{TITLE_PREFIX} " + " ".join(f"[{p}]" for p in parts) + f" [target={inputs.target}]"


_TITLE = re.compile(r"\[(\w+)=([^\]]*)\]")


def parse_title(text: str) -> ChainInputs | None:
    """The inputs of a run from its title, or None when it is not one :func:`title` wrote (a run
    started by the schedule has the default title: unfiltered, the default target)."""
    if not text.startswith(TITLE_PREFIX + " ["):
        return None
    found = dict(_TITLE.findall(text))
    names = {f.name for f in fields(ChainInputs)}
    if set(found) != names:
        return None
    return ChainInputs(**{k: ("" if v == "*" else v) for k, v in found.items()})
