"""What the drain simulation takes as given (``inputs.json``), each value with its basis.

A value is ``measured`` (on the reference host, or from farm's own runs) or an ``estimate`` with
its reason; ``farm simulate`` prints the table, so every number it reports says what it rests on.
What a build itself costs (each recipe's time, the runner factor, the fixed part of a build,
what a cached compile step costs) is :mod:`farm.schedule.recipetimes`'s, which the planner reads too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from farm.errors import UsageError
from farm.jsonread import JsonInputError, load_file

DATA = Path(__file__).with_name("inputs.json")
BASES = ("measured", "estimate")
MB = 10**6


@dataclass(frozen=True)
class Input:
    value: float
    basis: str
    note: str


@dataclass(frozen=True)
class Values:
    """The numbers (``inputs.json`` says what each is and what it rests on)."""

    windows_factor: float
    queue_s: float
    publish_setup_s: float
    matrix_s: float
    slice_s: float
    chain_s: float
    download_mb_s: float
    upload_mb_s: float
    cache_mb_s: float
    request_s: float
    gate_mb_s: float
    push_s: float
    failure_rate: float
    ledger_record_bytes: float
    compile_steps: float
    compile_objects_mb: float


NAMES = tuple(f.name for f in fields(Values))


@dataclass(frozen=True)
class Inputs:
    v: Values
    table: Mapping[str, Input]  # each value's basis and note
    wheel_mb: Mapping[str, float]
    wheel_mb_basis: str

    def wheel_bytes(self, package: str) -> int:
        return int(self.wheel_mb.get(package, self.wheel_mb["default"]) * MB)

    def with_values(self, **values: float) -> Inputs:
        """A copy with some values replaced (``farm simulate --set NAME=VALUE``), said to be given."""
        unknown = sorted(set(values) - set(NAMES))
        if unknown:
            raise UsageError(f"unknown simulation input(s): {', '.join(unknown)}", hint=f"one of {', '.join(NAMES)}")
        changed = {k: Input(v, "estimate", "given on the command line") for k, v in values.items()}
        return Inputs(replace(self.v, **values), {**self.table, **changed}, self.wheel_mb, self.wheel_mb_basis)

    @classmethod
    def from_json(cls, data: Any, where: str) -> Inputs:
        try:
            values = {}
            for name in NAMES:
                row = data["values"][name]
                value, basis = row["value"], row["basis"]
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                    raise ValueError(f"{name}: value must be a number >= 0")
                if basis not in BASES:
                    raise ValueError(f"{name}: basis must be one of {', '.join(BASES)}")
                values[name] = Input(float(value), basis, str(row.get("note", "")))
            extra = sorted(set(data["values"]) - set(NAMES))
            if extra:
                raise ValueError(f"unknown value(s) {', '.join(extra)}")
            wheels = {str(k): float(v) for k, v in data["wheel_mb"].items()}
            if "default" not in wheels or any(v <= 0 for v in wheels.values()):
                raise ValueError("wheel_mb needs a positive 'default' and positive sizes")
            return cls(Values(**{k: i.value for k, i in values.items()}), values, wheels,
                       str(data.get("wheel_mb_basis", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: not a simulation input table ({type(exc).__name__}: {exc})",
                             hint=f"see {DATA.name} beside farm/simulate/inputs.py for its shape") from None

    @classmethod
    def load(cls, path: Path = DATA) -> Inputs:
        try:
            data = load_file(path)
        except (OSError, JsonInputError) as exc:
            raise UsageError(f"{path}: cannot read the simulation inputs ({exc})") from None
        return cls.from_json(data, str(path))
