"""YAML loading that remembers where every key stood, so errors can say file:line.

Mappings load as :class:`YMap` (a dict with ``line`` and ``key_lines``), sequences as
:class:`YList` (a list with ``line`` and ``item_lines``). Duplicate keys are refused: YAML
silently keeps the last one, which hides a maintainer's mistake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from farm.errors import ConfigError


class YMap(dict):  # type: ignore[type-arg]
    """A mapping with the line of itself and of each key (1-based)."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class YList(list):  # type: ignore[type-arg]
    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


# libyaml's parser when PyYAML has it (several times faster); the constructors are the same.
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader that builds YMap/YList and rejects duplicate keys."""

    filename = "<yaml>"


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> YMap:
    loader.flatten_mapping(node)
    result = YMap()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            key = str(key)
        line = key_node.start_mark.line + 1
        if key in result:
            raise ConfigError(
                f"duplicate key {key!r} (first at line {result.key_lines[key]})",
                where=f"{loader.filename}:{line}",
                hint="keep one of them; YAML would silently use the last",
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> YList:
    result = YList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml(path: Path, *, display: str | None = None) -> tuple[Any, bytes]:
    """Load ``path``; return the data and the raw bytes (for hashing)."""
    name = display or str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", where=name,
                          hint=f"run farm in the farm repository (or pass --root); looked for {path}") from None
    except OSError as exc:  # a directory, no permission: still the input, not the environment
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", where=name) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})", where=f"{name}:{line}",
                          hint="save the file as UTF-8") from None
    loader = _Loader(text)
    loader.filename = name
    try:
        return loader.get_single_data(), raw
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"not valid YAML: {exc.problem or exc}", where=f"{name}{at}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", where=name) from None
    finally:
        loader.dispose()
