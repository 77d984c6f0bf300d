"""The one judge of a wheel (farm.provenance.judge): every rule, under the gate's and the audit's
expectations, on provenance objects read as a wheel's file is (no wheel, no toolkit)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from farm.binary.archrule import Expected, VendoredRule
from farm.model.arch import ArchList
from farm.provenance.audit import AuditVerdict, summarise
from farm.provenance.buildinfo import Assertion, BuildInfo, LedgerEntry
from farm.provenance.judge import AUDIT, GATE, Check, Derived, WheelFinding, judge
from farm.provenance.wheelfacts import WheelFacts

SO = "demo_ext/_C.so"
LIB = "demo_ext.libs/libkern-1a2b.so"
FULL = "sm_80;sm_90;compute_90"
NAME = "demo_ext-0.1.0+cu128torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
SHA = "a" * 64
INFO: dict[str, Any] = {
    "schema_version": 1, "package": "demo_ext",
    "dist": "demo_ext", "version": "0.1.0", "build_epoch": 0, "provenance": "asserted",
    "cell": {"cuda": "12.8", "torch": "2.8", "python": "cp311", "platform": "linux_x86_64"},
    "assertion": {"result": "passed", "native_reader": "farm", "cuobjdump": None},
    "arch_list": {"requested": "8.0;9.0+PTX", "normalised": FULL},
    "expected": {SO: FULL}, "found": {SO: FULL},
    "defaults_sha256": None, "recipe_sha256": None,
    "run": {"provider": "local", "repository": None, "commit": None, "run_id": None, "attempt": None},
    "source": None, "toolchain": {"nvcc": None, "torch": None, "python": None, "builder": None, "cibuildwheel": None},
    "extensions": {SO: "b" * 64},
    "vendored": {LIB: {"found": "sm_90", "expected": "sm_90", "exempt": None}},
}
DERIVED = Derived(ArchList.parse(FULL), "policy x86_64 12.8",
                  Expected(ArchList.parse(FULL), vendored=(VendoredRule("libkern*", ArchList.parse("sm_90")),)))


def _info(**changes: Any) -> BuildInfo:
    return BuildInfo.from_json({**INFO, **changes})


def _archs(texts: dict[str, str]) -> dict[str, ArchList]:
    return {path: ArchList.parse(text) if text else ArchList.of(()) for path, text in texts.items()}


def _facts(info: BuildInfo | None = None, **changes: Any) -> WheelFacts:
    """The facts of a wheel holding what ``info`` records (``found`` and ``vendored`` changed as text)."""
    base = WheelFacts(NAME, NAME, SHA, 1, _archs({SO: FULL}), {SO: "b" * 64}, info, vendored=_archs({LIB: "sm_90"}))
    texts: dict[str, Any] = {k: _archs(v) for k, v in changes.items() if k in ("found", "vendored")}
    return replace(base, **{**changes, **texts})


def _entry(info: BuildInfo, filename: str = NAME) -> LedgerEntry:
    return LedgerEntry(info, filename, SHA, 1)


def _rules(findings: list[WheelFinding]) -> list[Check]:
    return [f.check for f in findings]


GATE_WITH_CONFIG = replace(GATE, derived=DERIVED, config_required=True)


def test_a_good_wheel_breaks_no_rule_under_either_expectation() -> None:
    info = _info()
    assert judge(_facts(info), _entry(info), SHA, GATE_WITH_CONFIG) == []
    assert judge(_facts(info), _entry(info), SHA, replace(AUDIT, derived=DERIVED)) == []
    assert judge(_facts(info), None, None, AUDIT) == []  # the audit needs no ledger entry
    row = summarise(_facts(info), None, [], compared=True)
    assert (row.verdict, row.source, row.reasons) == (AuditVerdict.OK, "embedded", ())


@pytest.mark.parametrize(("facts", "rule", "says"), [
    # the binaries, against what the provenance records
    ({"found": {SO: "sm_80;sm_90;compute_90;sm_100"}}, Check.INSPECTION, f"{SO}: missing -, extra sm_100"),
    ({"found": {SO: "sm_80;sm_90"}}, Check.INSPECTION, f"{SO}: missing compute_90, extra -"),
    ({"found": {SO: FULL, "demo_ext/_D.so": "sm_80"}}, Check.INSPECTION, "demo_ext/_D.so is in the wheel but not"),
    ({"found": {}}, Check.INSPECTION, f"{SO} is recorded but not in the wheel"),
    ({"extensions": {SO: "c" * 64}}, Check.INSPECTION, f"differ from the sha256 recorded at postbuild: {SO}"),
    ({"vendored": {LIB: "sm_80"}}, Check.INSPECTION, f"{LIB}: recorded as holding sm_90, the bundled library holds"),
    ({"vendored": {LIB: "sm_90", "x.libs/liby.so": ""}}, Check.INSPECTION, "does not record: never asserted"),
    ({"vendored": {}}, Check.INSPECTION, f"{LIB}: recorded as a bundled library but not in the wheel"),
    ({"disagreements": (f"{SO}: cuobjdump lists sm_86",)}, Check.INSPECTION, "the native reader and cuobjdump"),
    ({"problem": "entry 'x' is corrupt\n  fix: rebuild"}, Check.READABLE, "cannot read the wheel: entry 'x' is corrupt"),
    ({"filename": NAME.replace("cu128", "cu130")}, Check.NAME, "local label cu130torch2.8 but the cell is cu128torch2.8"),
])
def test_each_binary_rule_fires_for_the_gate_and_the_audit(facts: dict[str, Any], rule: Check, says: str) -> None:
    info = _info()
    for expect in (GATE, AUDIT):
        findings = [f for f in judge(_facts(info, **facts), _entry(info, facts.get("filename", NAME)), None, expect)
                    if f.check is not Check.LEDGER]  # a renamed file is also another ledger name
        assert _rules(findings) == [rule], (expect, findings)
        assert says in findings[0].message
        assert findings[0].reasons
        assert findings[0].fix
        row = summarise(_facts(info, **facts), None, findings, compared=True)
        assert row.verdict is AuditVerdict.WHEEL_WRONG


@pytest.mark.parametrize(("changes", "rule", "says"), [
    ({"expected": {SO: "sm_80"}}, Check.ASSERTED, f"differ: {SO}: missing -, extra compute_90;sm_90"),
    ({"arch_list": {"requested": "8.0", "normalised": FULL}}, Check.CONSISTENT, "requested 8.0 normalises to sm_80"),
    ({"arch_list": {"requested": "8.0;banana", "normalised": FULL}}, Check.CONSISTENT, "does not parse"),
])
def test_each_provenance_rule(changes: dict[str, Any], rule: Check, says: str) -> None:
    info = _info(**changes)
    for expect in (GATE, AUDIT):
        (finding,) = judge(_facts(info, found=info.found or {}), _entry(info), None, expect)
        assert finding.check is rule
        assert says in finding.message


def test_a_failed_assertion_is_never_accepted() -> None:
    """The schema refuses such a file on reading; the judge still judges the object it is given."""
    info = replace(_info(), assertion=Assertion("failed", "farm", None))
    for expect in (GATE, AUDIT):
        (finding,) = judge(_facts(info), _entry(info), None, expect)
        assert finding.check is Check.ASSERTED
        assert "the assertion 'failed'" in finding.message
        assert finding.reasons == ("its provenance says the assertion failed",)


def test_per_extension_consistency_needs_the_recipe() -> None:
    """An extension expected to hold another list than the requested one is a contradiction
    unless the recipe gives it a list of its own."""
    info = _info(expected={SO: "sm_80"}, found={SO: "sm_80"})
    facts = _facts(info, found={SO: "sm_80"})
    assert judge(facts, _entry(info), None, GATE) == []
    (finding, moved) = judge(facts, _entry(info), None, replace(GATE, derived=DERIVED))
    assert finding.check is Check.CONSISTENT
    assert "has no list of its own" in finding.message
    assert moved.check is Check.CONFIG
    own = replace(DERIVED, expected=replace(DERIVED.expected, per_extension=(("*_C.so", ArchList.parse("8.0")),)))
    assert judge(facts, _entry(info), None, replace(GATE, derived=own)) == []


def test_inferred_provenance_is_refused_by_the_gate_and_judged_by_the_audit() -> None:
    info = _info(provenance="inferred", assertion=None, extensions={SO: "b" * 64}, vendored=None)
    facts = _facts(info, vendored={})
    (finding,) = judge(facts, _entry(info), None, GATE)
    assert finding.check is Check.ASSERTED
    assert "'inferred'" in finding.message
    assert judge(facts, None, None, AUDIT) == []
    assert summarise(facts, None, [], compared=True).verdict is AuditVerdict.INFERRED
    findings = judge(_facts(info, found={SO: "sm_80"}, vendored={}), None, None, AUDIT)  # no longer matches
    assert _rules(findings) == [Check.INSPECTION]
    assert findings[0].reasons == (f"{SO}: recorded as holding {FULL}, the binary holds sm_80",)


def test_the_ledger_rules() -> None:
    info = _info()
    facts = _facts(info)
    (finding,) = judge(facts, None, None, GATE)  # nothing vouches for these bytes
    assert finding.check is Check.LEDGER
    assert f"no ledger entry or fragment has sha256 {SHA}" in finding.message
    (finding,) = judge(facts, None, "f" * 64, GATE)  # the name holds other bytes
    assert finding.check is Check.LEDGER
    assert "it changed after postbuild" in finding.message
    (finding,) = judge(facts, _entry(info), "f" * 64, GATE)  # a fragment vouches, but the name is taken
    assert finding.check is Check.LEDGER
    assert "another build under the same name" in finding.message
    (finding,) = judge(facts, _entry(info, "other.whl"), None, GATE)
    assert finding.check is Check.LEDGER
    assert "not this name" in finding.message
    (finding,) = judge(facts, _entry(_info(recipe_sha256="e" * 64)), None, GATE)
    assert finding.check is Check.LEDGER
    assert "differ in recipe_sha256" in finding.message
    # the audit: an embedded provenance needs no entry; a renamed file and other recorded targets do count
    assert judge(facts, None, None, AUDIT) == []
    assert _rules(judge(facts, None, "f" * 64, AUDIT)) == [Check.LEDGER]
    (finding,) = judge(facts, _entry(_info(found={SO: "sm_80"})), None, AUDIT)
    assert finding.check is Check.LEDGER
    assert finding.reasons == (f"{SO}: the ledger records sm_80, the binary holds {FULL}",)


def test_no_provenance() -> None:
    (finding,) = judge(_facts(None), None, None, GATE)
    assert finding.check is Check.STAMPED
    assert "farm postbuild" in finding.fix
    (finding,) = judge(_facts(None), None, None, AUDIT)
    assert summarise(_facts(None), None, [finding], compared=True).verdict is AuditVerdict.UNLEDGERED
    info = _info()  # the audit takes the ledger's provenance for a wheel without its own
    assert judge(_facts(None), _entry(info), None, AUDIT) == []
    assert _rules(judge(_facts(None), _entry(info), None, GATE)) == [Check.STAMPED]
    assert summarise(_facts(None), _entry(info), [], compared=True).source == "ledger"


def test_the_configuration_rules() -> None:
    info = _info()
    facts = _facts(info)
    moved = replace(DERIVED, requested=ArchList.parse("9.0"), expected=replace(DERIVED.expected,
                                                                                default=ArchList.parse("9.0")))
    findings = judge(facts, _entry(info), None, replace(GATE, derived=moved))
    assert _rules(findings) == [Check.CONFIG]
    assert "the configuration resolves sm_90 (policy x86_64 12.8)" in findings[0].message
    assert f"{SO}: built for {FULL}, today's policy resolves sm_90" in findings[0].reasons
    (finding,) = judge(facts, _entry(info), None, replace(GATE, config_required=True))
    assert finding.check is Check.CONFIG
    assert "no arch list for package demo_ext" in finding.message
    undeclared = replace(DERIVED, expected=replace(DERIVED.expected, vendored=()))
    (finding,) = judge(facts, _entry(info), None, replace(GATE, derived=undeclared))
    assert finding.check is Check.CONFIG
    assert f"{LIB}: a bundled library the recipe does not declare" in finding.message
    other = replace(DERIVED, expected=replace(DERIVED.expected, vendored=(VendoredRule("*", ArchList.parse("8.0")),)))
    (finding,) = judge(facts, _entry(info), None, replace(GATE, derived=other))
    assert finding.check is Check.CONFIG
    assert "the recipe expects sm_80 of it, it holds sm_90" in finding.message
    # the audit's per-extension map: config-moved, with the advice
    findings = judge(facts, None, None, replace(AUDIT, today=_archs({SO: "sm_90"})))
    row = summarise(facts, None, findings, compared=True)
    assert row.verdict is AuditVerdict.CONFIG_MOVED
    assert row.reasons == (f"{SO}: built for {FULL}, today's policy resolves sm_90", "bump build_epoch to rebuild")
    # a wheel wrong in itself is wheel-wrong, whatever the config says
    findings = judge(_facts(info, found={SO: "sm_80"}), None, None, replace(AUDIT, today=_archs({SO: "sm_90"})))
    assert summarise(facts, None, findings, compared=True).verdict is AuditVerdict.WHEEL_WRONG



def test_kernel_families_are_understood_by_the_gate_and_the_audit() -> None:
    """An extension with kernel families is expected to hold their targets beside the list of
    its other TUs; the record says which family is in which extension, and is checked."""
    whole = FULL + ";sm_90a"
    families = {"SCALED_MM_ARCHS (CMakeLists.txt:29)": {
        "targets": "sm_90a", "sources": ["csrc/scaled_mm_c3x_sm90.cu"], "extensions": [SO]}}
    info = _info(expected={SO: whole}, found={SO: whole}, families=families)
    assert BuildInfo.from_json(info.to_json()) == info  # the record round-trips through its schema
    facts = _facts(info, found={SO: whole})
    for expect in (GATE, AUDIT, GATE_WITH_CONFIG):
        assert judge(facts, _entry(info), None, expect) == [], expect
    assert judge(facts, None, None, replace(AUDIT, today=_archs({SO: FULL}))) == []
    # every TU in a family: the expected list is the families' targets alone
    only = _info(expected={SO: "sm_90a"}, found={SO: "sm_90a"}, families=families)
    assert judge(_facts(only, found={SO: "sm_90a"}), _entry(only), None, GATE_WITH_CONFIG) == []
    # a family target the record does not explain, or a family in an extension not recorded
    forged = _info(expected={SO: whole + ";sm_100a"}, found={SO: whole + ";sm_100a"}, families=families)
    finding, moved = judge(_facts(forged, found={SO: whole + ";sm_100a"}), _entry(forged), None, GATE_WITH_CONFIG)
    assert finding.check is Check.CONSISTENT
    assert "with its kernel families' targets" in finding.message
    assert moved.check is Check.CONFIG
    assert "besides its kernel families' targets" in moved.message
    elsewhere = _info(expected={SO: whole}, found={SO: whole},
                      families={"F": {"targets": "sm_90a", "sources": ["a.cu"], "extensions": ["other/_C.so"]}})
    findings = judge(_facts(elsewhere, found={SO: whole}), _entry(elsewhere), None, GATE_WITH_CONFIG)
    assert any("other/_C.so is not an extension it records" in f.message for f in findings)
    # today's policy moved the list of the other TUs: config-moved, named as such
    findings = judge(facts, None, None, replace(AUDIT, today=_archs({SO: "sm_90"})))
    assert [f.check for f in findings] == [Check.CONFIG]
    assert "besides its kernel families' targets" in findings[0].message
