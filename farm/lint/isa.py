"""Arch-specific PTX: instructions that only an ``a`` or ``f`` target can assemble, as data.

Since CUDA 12.0 some instructions exist only on an architecture-specific target (``sm_90a``:
``wgmma``, ``setmaxnreg``) and, from PTX ISA 8.8, on a family-specific one (``sm_100f``:
``tcgen05``, usable on sm_100 and sm_103). ptxas rejects them for any other target ("Instruction
'wgmma.fence' not supported on .target 'sm_80'"), and PTX kept for a plain ``compute_XY`` cannot be
JIT-compiled with them either. A translation unit whose device code holds one must therefore be
compiled only for targets that can assemble it, or guard it (``__CUDA_ARCH_FEAT_SM90_ALL``,
``__CUDA_ARCH_SPECIFIC__``, ``__CUDA_ARCH_FAMILY_SPECIFIC__``).

Each row: the instruction (a regular expression over the PTX text of an ``asm`` statement, or a
C++ name for CCCL's ``cuda::ptx`` wrappers), the targets that accept it, the PTX ISA version that
introduced it, and where the target table is written. ``sm_90a`` accepts exactly that target;
``sm_100f`` accepts every ``a``/``f`` target of the 10.x family from 10.0 up (``sm_100a``,
``sm_103f``, ...), which is how the PTX ISA's Target ISA notes phrase it ("sm_100f or higher in
the same family"). The tests assemble one instruction of each row with the toolkit's ptxas for
every target and compare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from farm.model.arch import Target, Variant


@dataclass(frozen=True)
class ArchInstruction:
    name: str  # as a reader knows it: "wgmma", "tcgen05", "mma kind::mxf4nvf4"
    pattern: str  # regular expression over the asm text (or, for an intrinsic, the C++ code)
    accepts: tuple[str, ...]  # "sm_90a" (that target only) or "sm_100f" (that family from 10.0 up)
    ptx: str  # the PTX ISA version that introduced it
    source: str  # the table it comes from
    intrinsic: bool = False  # matched in C++ code (a cuda::ptx wrapper), not in asm text

    def accepted_by(self, target: Target) -> bool:
        return any(_accepts(spec, target) for spec in self.accepts)

    @property
    def needs(self) -> str:
        return " or ".join(self.accepts)

    @property
    def versions(self) -> tuple[str, ...]:
        """The accepted targets as arch lists write them: ``9.0a``, ``10.0f``."""
        return tuple(f"{s[3:-2]}.{s[-2]}{s[-1]}" for s in self.accepts)


def _accepts(spec: str, target: Target) -> bool:
    m = re.fullmatch(r"sm_(\d+)(\d)([af])", spec)
    assert m, spec
    major, minor, variant = int(m[1]), int(m[2]), m[3]
    if variant == "a":
        return target.variant is Variant.ARCH and (target.major, target.minor) == (major, minor)
    return (target.variant in (Variant.ARCH, Variant.FAMILY) and target.major == major
            and target.minor >= minor)


_ISA = "NVIDIA PTX ISA, section {}: Target ISA notes"
_CCCL = "CCCL libcu++ cuda::ptx reference ({}), which lists each wrapper's PTX ISA version and targets"
_FAMILIES_100_110_120 = ("sm_90a", "sm_100f", "sm_110f", "sm_120f")

INSTRUCTIONS: tuple[ArchInstruction, ...] = (
    ArchInstruction("wgmma", r"\bwgmma\.", ("sm_90a",), "8.0",
                    _ISA.format("9.7.15 Asynchronous Warpgroup Level Matrix Multiply-Accumulate (wgmma)")),
    ArchInstruction("setmaxnreg", r"\bsetmaxnreg\.", _FAMILIES_100_110_120, "8.0",
                    _ISA.format("9.7.19.5 setmaxnreg") + "; " + _CCCL.format("setmaxnreg")),
    ArchInstruction("tcgen05", r"\btcgen05\.", ("sm_100f", "sm_110f"), "8.6",
                    _ISA.format("9.7.16 TensorCore 5th Generation Family Instructions (tcgen05)")),
    ArchInstruction("mma with block scaling (kind::mxf8f6f4, kind::mxf4, kind::mxf4nvf4)",
                    r"\bmma\.sync\.aligned\S*\.kind::mx", ("sm_120f",), "8.7",
                    _ISA.format("9.7.14.5.14 mma with .block_scale")),
    ArchInstruction("mma kind::f8f6f4", r"\bmma\.sync\.aligned\S*\.kind::f8f6f4",
                    ("sm_100f", "sm_110f", "sm_120f"), "8.7",
                    _ISA.format("9.7.14.5.14 mma (.kind::f8f6f4)")),
    ArchInstruction("cvt to FP4/FP6/UE8M0 pairs (e2m1x2, e2m3x2, e3m2x2, ue8m0x2)",
                    r"\bcvt\.\S*\.(?:e2m1x2|e2m3x2|e3m2x2|ue8m0x2)\b", ("sm_100f", "sm_110f", "sm_120f"), "8.6",
                    _ISA.format("9.7.9.21 cvt")),
    ArchInstruction("tensormap.replace", r"\btensormap\.replace\b", _FAMILIES_100_110_120, "8.3",
                    _ISA.format("9.7.9.27 tensormap.replace")),
    ArchInstruction("cuda::ptx::tcgen05_*", r"\bptx::tcgen05_\w+\s*[(<]", ("sm_100f", "sm_110f"), "8.6",
                    _CCCL.format("tcgen05"), intrinsic=True),
    ArchInstruction("cuda::ptx::setmaxnreg_*", r"\bptx::setmaxnreg_(?:inc|dec)\s*[(<]", _FAMILIES_100_110_120,
                    "8.0", _CCCL.format("setmaxnreg"), intrinsic=True),
    ArchInstruction("cuda::ptx::tensormap_replace_*", r"\bptx::tensormap_replace_\w+\s*[(<]",
                    _FAMILIES_100_110_120, "8.3", _CCCL.format("tensormap.replace"), intrinsic=True),
)
_PATTERNS = tuple((row, re.compile(row.pattern)) for row in INSTRUCTIONS)
# cheap substrings: a file without any of them is not searched with the expressions
TRIGGERS = ("wgmma.", "setmaxnreg", "tcgen05", "kind::", "e2m1x2", "e2m3x2", "e3m2x2", "ue8m0x2", "tensormap.replace",
            "tensormap_replace")


def may_use(text: str) -> bool:
    return any(t in text for t in TRIGGERS)


def instruction_in_asm(text: str) -> ArchInstruction | None:
    """The first arch-specific instruction in the PTX text of an asm statement."""
    for row, pattern in _PATTERNS:
        if not row.intrinsic and pattern.search(text):
            return row
    return None


def intrinsics_in(code: str) -> list[tuple[int, ArchInstruction]]:
    """(offset, row) of every arch-specific ``cuda::ptx`` wrapper called in ``code``."""
    return [(m.start(), row) for row, pattern in _PATTERNS if row.intrinsic for m in pattern.finditer(code)]

