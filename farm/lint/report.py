"""Findings and the lint report: rendering for people, JSON for the matrix and the cache."""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from farm.model.config import LintIgnore


class LintSeverity(str, enum.Enum):
    ERROR = "error"  # the package fails the lint
    INFO = "info"  # worth knowing, not a defect (a gate with a real fallback)


class LintRule(str, enum.Enum):
    ARCH_GATE = "arch-gate"
    FP8 = "fp8"
    EXPLICIT_TARGET = "explicit-target"
    ARCH_OVERRIDE = "arch-override"
    ARCH_SPECIFIC = "arch-specific"
    GENERATED = "generated-sources"  # a kernel family's glob that matches no file: written by the build


@dataclass(frozen=True)
class LintFinding:
    rule: str
    severity: LintSeverity
    path: str  # relative to the source root, posix
    line: int
    snippet: str
    message: str
    needs: tuple[str, ...]  # arches to declare, e.g. ("8.9",) or ("9.0a",)
    declared: str  # the arch list, canonical
    fix: str
    devices: tuple[str, ...] = ()  # "8.9 (RTX 40xx, L4, L40S)"

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        data["needs"] = list(self.needs)
        data["devices"] = list(self.devices)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LintFinding:
        return cls(data["rule"], LintSeverity(data["severity"]), data["path"], int(data["line"]), data["snippet"],
                   data["message"], tuple(data["needs"]), data["declared"], data["fix"], tuple(data["devices"]))


def _ignore_from(data: dict[str, str]) -> LintIgnore:
    return LintIgnore(data["rule"], data["path"], data["reason"], data["where"])


@dataclass(frozen=True)
class LibrarySummary:
    """Arch gates inside a vendored library's headers that the package's compiled code includes."""

    path: str
    headers: int
    gates: int
    thresholds: tuple[str, ...]


@dataclass(frozen=True)
class LintReport:
    root: str
    declared: str
    findings: tuple[LintFinding, ...]
    ignored: tuple[tuple[LintFinding, LintIgnore], ...] = ()
    stale_ignores: tuple[LintIgnore, ...] = ()
    scope: dict[str, Any] = field(default_factory=dict)
    libraries: tuple[LibrarySummary, ...] = ()
    lint_version: str = ""

    @property
    def errors(self) -> tuple[LintFinding, ...]:
        return tuple(f for f in self.findings if f.severity is LintSeverity.ERROR)

    @property
    def infos(self) -> tuple[LintFinding, ...]:
        return tuple(f for f in self.findings if f.severity is LintSeverity.INFO)

    @property
    def passed(self) -> bool:
        return not self.errors

    # -- JSON ---------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "lint_version": self.lint_version,
            "root": self.root,
            "declared": self.declared,
            "passed": self.passed,
            "errors": [f.to_json() for f in self.errors],
            "infos": [f.to_json() for f in self.infos],
            "ignored": [{"finding": f.to_json(), "ignore": asdict(i)} for f, i in self.ignored],
            "stale_ignores": [asdict(i) for i in self.stale_ignores],
            "scope": self.scope,
            "libraries": [asdict(lib) | {"thresholds": list(lib.thresholds)} for lib in self.libraries],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LintReport:
        findings = tuple(LintFinding.from_json(f) for f in [*data["errors"], *data["infos"]])
        ignored = tuple((LintFinding.from_json(x["finding"]), _ignore_from(x["ignore"])) for x in data["ignored"])
        libraries = tuple(LibrarySummary(x["path"], x["headers"], x["gates"], tuple(x["thresholds"]))
                          for x in data["libraries"])
        return cls(data["root"], data["declared"], findings, ignored,
                   tuple(_ignore_from(x) for x in data["stale_ignores"]), data["scope"], libraries,
                   data["lint_version"])

    # -- text ---------------------------------------------------------------------------------
    def render(self) -> str:
        lines = [f"lint of {self.root} against {self.declared}"]
        scope = self.scope
        if scope:
            lines.append(f"  compiled: {scope.get('compiled', 0)} of {scope.get('files_total', 0)} files "
                         f"({scope.get('how', '')})")
        if scope.get("families"):
            lines.append(f"  kernel families (CUDA {scope.get('cuda', '')}), each judged against its own targets:")
            width = max(len(f"{name} ({where})") for name, where, *_ in scope["families"])
            patterns = scope.get("family_patterns") or [[] for _ in scope["families"]]
            for (name, where, supported, targets, count), globs in zip(scope["families"], patterns, strict=True):
                lines.append(f"    {f'{name} ({where})':{width}}  {supported or '-':38} -> {targets}  "
                             f"[{count} source{'s' if count != 1 else ''}"
                             + "".join(f", glob {glob}" for glob in globs) + "]")
        if scope.get("no_image"):
            lines.append(f"  note: claimed devices with no image at all: {', '.join(scope['no_image'])} "
                         "(cudaErrorNoKernelImageForDevice; see `farm explain`)")
        for title, items in (("errors", self.errors), ("infos", self.infos)):
            if not items:
                continue
            lines.append(f"\n{title} ({len(items)}):")
            for f in items:
                lines += [f"  {f.location}  [{f.rule}] {f.snippet}", f"      {f.message}"]
                if f.needs:
                    lines.append(f"      needs {', '.join(f.needs)}; declared {f.declared}")
                lines.append(f"      fix: {f.fix}")
        if self.ignored:
            lines.append(f"\nignored ({len(self.ignored)}):")
            for f, ignore in self.ignored:
                lines.append(f"  {f.location}  [{f.rule}] {f.snippet}")
                lines.append(f"      ignored by {ignore.where}: {ignore.reason}")
        if self.stale_ignores:
            lines.append(f"\nstale lint_ignore entries ({len(self.stale_ignores)}): they match no finding, remove them")
            lines.extend(f"  {ignore.where}: rule {ignore.rule}, path {ignore.path}" for ignore in self.stale_ignores)
        if self.libraries:
            lines.append("\nvendored libraries (gated code there becomes device code only where the package uses it):")
            lines.extend(f"  {lib.path}: {lib.gates} arch gates in {lib.headers} included headers "
                         f"(thresholds {', '.join(lib.thresholds) or '-'})" for lib in self.libraries)
        verdict = "PASSED" if self.passed else "FAILED"
        lines.append(f"\n{verdict}: {len(self.errors)} errors, {len(self.infos)} infos, "
                     f"{len(self.ignored)} ignored, {len(self.stale_ignores)} stale ignores")
        return "\n".join(lines)


def apply_ignores(findings: Sequence[LintFinding], ignores: Sequence[LintIgnore]
                  ) -> tuple[list[LintFinding], list[tuple[LintFinding, LintIgnore]], list[LintIgnore]]:
    """(kept findings, ignored findings with the entry that silenced each, stale entries)."""
    kept: list[LintFinding] = []
    ignored: list[tuple[LintFinding, LintIgnore]] = []
    used: set[int] = set()
    for finding in findings:
        for i, ignore in enumerate(ignores):
            if ignore.rule in (finding.rule, "*") and fnmatch.fnmatchcase(finding.path, ignore.path):
                ignored.append((finding, ignore))
                used.add(i)
                break
        else:
            kept.append(finding)
    stale = [ignore for i, ignore in enumerate(ignores) if i not in used]
    return kept, ignored, stale
