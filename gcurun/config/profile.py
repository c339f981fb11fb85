"""YAML cluster profiles: ``gcurun --profile FILE`` (or ``GCURUN_PROFILE``).

:func:`parse_profile` checks a profile against the keys of
:class:`gcurun.config.api.Settings` and keeps, beside each value, the line it came from, so
every error and every ``--dry-run`` source names ``file:line``. The YAML is read by PyYAML's
safe loader: the text is composed into nodes (which carry line marks) and only plain YAML
scalars, lists and mappings are accepted; no tag can construct an object.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gcurun.config._yaml import (
    SCALAR_TAGS,
    TAG,
    TEXT_TAGS,
    compose,
    describe,
    float_or_none,
    is_null,
    join,
    line_of,
)
from gcurun.config.schema import HOST_KEYS, KEYS, SECTIONS, Key
from gcurun.errors import HostSpecError, ProfileError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostfile import TooLarge, read_limited
from gcurun.hosts.hostlist import Problem
from gcurun.hosts.item import canonical_host, check_host_name, check_user_name
from gcurun.hosts.specs import parse_host_specs

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A profile of a thousand hosts given as mappings is about 100 KiB.
MAX_PROFILE_BYTES = 4 << 20

# Profile keys, by the section they sit in ("" is the top level).
_LEVELS: dict[str, dict[str, Key]] = {}
for _key in KEYS:
    if _key.in_profile:
        _LEVELS.setdefault(_key.section, {})[_key.name] = _key


@dataclass(frozen=True)
class Profile:
    """The values a profile gives, by dotted key, and the line each one came from.

    ``values`` holds only the keys the file sets, already checked and converted (tuples for
    lists, ``HostSpec`` records for ``hosts``, a dict for ``env``). ``lines`` has an entry
    for each of them and for each ``env.NAME``.
    """

    source: str
    values: Mapping[str, Any] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        """``profile:<file>:<line>`` for a key this profile sets."""
        return f"profile:{self.source}:{self.lines[key]}"


def read_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and parse the profile at ``path``; raises ProfileError if it cannot."""
    source = os.fspath(path)
    try:
        data = read_limited(source, MAX_PROFILE_BYTES)
    except TooLarge:
        raise ProfileError(f"profile '{source}' is larger than {MAX_PROFILE_BYTES >> 20} MiB, "
                           "more than any profile; check the path given to --profile or "
                           "GCURUN_PROFILE") from None
    except OSError as exc:
        raise ProfileError(f"profile '{source}': cannot read it ({exc.strerror}); check the "
                           "path given to --profile or GCURUN_PROFILE") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ProfileError(f"{source}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8; "
                           "save the file as UTF-8 text") from None
    return parse_profile(text, source)


def parse_profile(text: str, source: str) -> Profile:
    """Check and convert a profile's text; ``source`` names it in messages and sources.

    Raises ProfileError naming ``source:line``, the dotted key and the rule broken: bad
    YAML, an unknown key (with the nearest valid key), a wrong type or an out-of-range value.
    Relative paths of ``hostfile`` and ``ssh`` files are taken from the profile's folder.
    """
    root = compose(text, source)
    reader = _Reader(source)
    if root is not None and not is_null(root):
        reader.read_top(root)
    lines = reader.lines
    if "hosts" in lines and "hostfile" in lines:
        first, second = sorted(("hosts", "hostfile"), key=lines.__getitem__)
        raise ProfileError(f"{source}:{lines[second]}: {second}: '{first}' is given too (line "
                           f"{lines[first]}); keep one of them")
    return Profile(source, reader.values, lines)


class _Reader:
    """Walks the composed nodes of one profile, filling ``values`` and ``lines``."""

    def __init__(self, source: str):
        self.source = source
        self.values: dict[str, Any] = {}
        self.lines: dict[str, int] = {}
        self._constructor = SafeConstructor()

    # -- structure --------------------------------------------------------------------

    def read_top(self, node: Node) -> None:
        if not isinstance(node, MappingNode):
            self.fail(node, "", "a profile is a mapping of keys such as 'np: 8', got "
                      + describe(node))
        for name, key_node, value_node in self.items(node, ""):
            if name in SECTIONS:
                self.read_section(name, value_node)
            else:
                key = self.known(name, "", key_node, _LEVELS[""])
                self.read_leaf(key, key.path, key_node, value_node)

    def read_section(self, section: str, node: Node) -> None:
        if is_null(node):
            return
        if not isinstance(node, MappingNode):
            self.fail(node, section, f"expected a mapping of {section} settings, got "
                      + describe(node))
        for name, key_node, value_node in self.items(node, section):
            key = self.known(name, section, key_node, _LEVELS[section])
            self.read_leaf(key, key.path, key_node, value_node)

    def read_leaf(self, key: Key, path: str, key_node: Node, node: Node) -> None:
        self.values[path] = self.convert(key, path, node)
        self.lines[path] = line_of(key_node)

    def items(self, node: MappingNode, prefix: str) -> Iterator[tuple[str, Node, Node]]:
        """The (name, key node, value node) of a mapping; duplicate keys are an error."""
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == TAG + "merge":
                self.fail(key_node, join(prefix, "<<"),
                          "merge keys are not supported; write the keys out")
            if not isinstance(key_node, ScalarNode) or is_null(key_node):
                self.fail(key_node, prefix, f"a key must be a name, got {describe(key_node)}")
            name = key_node.value
            path = join(prefix, name)
            if name in seen:
                self.fail(key_node, path, f"given twice (first on line {seen[name]}); "
                          "keep one")
            seen[name] = line_of(key_node)
            yield name, key_node, value_node

    def known(self, name: str, prefix: str, node: Node, level: Mapping[str, Key]) -> Key:
        if name in level:
            return level[name]
        here = list(level) + (list(SECTIONS) if prefix == "" else [])
        self.fail(node, join(prefix, name), "unknown key" + _suggest(name, prefix, here))

    def fail(self, node: Node, path: str, message: str) -> NoReturn:
        where = f"{self.source}:{line_of(node)}"
        raise ProfileError(f"{where}: {path}: {message}" if path else f"{where}: {message}")

    # -- values -----------------------------------------------------------------------

    def convert(self, key: Key, path: str, node: Node) -> Any:
        if node.tag not in SCALAR_TAGS and node.tag not in (TAG + "seq", TAG + "map"):
            self.fail(node, path, f"the tag '{node.tag}' is not allowed in a profile; "
                      "remove it")
        if is_null(node):
            if key.kind in _EMPTY:
                return _EMPTY[key.kind]
            if key.nullable:
                return None
            self.wrong(key, path, node)
        return _CONVERTERS[key.kind](self, key, path, node)

    def wrong(self, key: Key, path: str, node: Node, hint: str = "") -> NoReturn:
        """A value of the wrong type: ``expected an integer, got 'eight'``."""
        self.fail(node, path, f"expected {key.noun}, got {describe(node)}{hint}")

    def out_of_range(self, key: Key, path: str, node: Node) -> NoReturn:
        self.fail(node, path, f"expected {key.expected()}, got {describe(node)}")

    def construct(self, node: Node) -> Any:
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.fail(node, "", f"cannot read this value: {exc}")

    def to_int(self, key: Key, path: str, node: Node) -> int:
        if not (isinstance(node, ScalarNode) and node.tag == TAG + "int"):
            self.wrong(key, path, node)
        value = self.construct(node)
        if not key.in_range(value):
            self.out_of_range(key, path, node)
        return int(value)

    def to_float(self, key: Key, path: str, node: Node) -> float:
        value: float | None = None
        if isinstance(node, ScalarNode) and node.tag in (TAG + "int", TAG + "float"):
            value = float(self.construct(node))
        elif isinstance(node, ScalarNode) and node.tag == TAG + "str" and node.style is None:
            value = float_or_none(node.value)     # 1e3 is a string to YAML 1.1
        if value is None or not math.isfinite(value):
            self.wrong(key, path, node)
        if not key.in_range(value):
            self.out_of_range(key, path, node)
        return value

    def to_bool(self, key: Key, path: str, node: Node) -> bool:
        if not (isinstance(node, ScalarNode) and node.tag == TAG + "bool"):
            self.wrong(key, path, node)
        return bool(self.construct(node))

    def to_text(self, key: Key, path: str, node: Node) -> str:
        # The text as written: numbers keep their spelling (device 07, variable 1e3).
        if not (isinstance(node, ScalarNode) and node.tag in TEXT_TAGS and node.value):
            self.wrong(key, path, node)
        return str(node.value)

    def to_user(self, key: Key, path: str, node: Node) -> str:
        text = self.to_text(key, path, node)
        try:
            return check_user_name(text)
        except Problem as exc:
            self.fail(node, path, str(exc))

    def to_path(self, key: Key, path: str, node: Node) -> str:
        text = self.to_text(key, path, node)
        if os.path.isabs(text) or text.startswith("~"):
            return text
        return os.path.join(os.path.dirname(self.source), text)

    def to_choice(self, key: Key, path: str, node: Node) -> str:
        # Raw text, so that YAML 1.1's `off` and `no` stay words rather than false.
        text = node.value if isinstance(node, ScalarNode) else None
        if text not in key.choices:
            close = difflib.get_close_matches(str(text), key.choices, n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if text is not None and close else ""
            self.wrong(key, path, node, hint)
        return str(text)

    def to_words(self, key: Key, path: str, node: Node) -> tuple[str, ...]:
        """A list of short texts, or one comma-separated string: devices, variable names."""
        if isinstance(node, SequenceNode):
            pairs = [(self.to_text(key, f"{path}[{i}]", item), item)
                     for i, item in enumerate(node.value)]
        elif isinstance(node, ScalarNode) and node.tag in TEXT_TAGS:
            pairs = [(part.strip(), node) for part in node.value.split(",")]
        else:
            self.wrong(key, path, node)
        if not pairs:
            self.fail(node, path, f"expected {key.expected()}, got an empty list; give at "
                      "least one or remove the key")
        for text, item in pairs:
            bad = not text or any(c.isspace() for c in text) or (
                key.kind == "names" and not _VARIABLE.match(text))
            if bad:
                self.fail(item, path, f"'{text}' is not a valid entry of {key.expected()}")
        return tuple(text for text, _ in pairs)

    def to_env(self, key: Key, path: str, node: Node) -> dict[str, str]:
        if not isinstance(node, MappingNode):
            self.wrong(key, path, node)
        env: dict[str, str] = {}
        for name, key_node, value_node in self.items(node, path):
            item = join(path, name)
            if not _VARIABLE.match(name):
                self.fail(key_node, item, f"'{name}' is not a variable name; use letters, "
                          "digits and underscores, not starting with a digit")
            if is_null(value_node):
                self.fail(value_node, item, "expected a value, got nothing; write '' for "
                          "an empty value")
            if not (isinstance(value_node, ScalarNode) and value_node.tag in SCALAR_TAGS):
                self.fail(value_node, item, f"expected a string, got {describe(value_node)}")
            env[name] = str(value_node.value)
            self.lines[item] = line_of(key_node)
        return env

    def to_args(self, key: Key, path: str, node: Node) -> tuple[str, ...]:
        if isinstance(node, SequenceNode):
            return tuple(self.to_text(key, f"{path}[{i}]", item)
                         for i, item in enumerate(node.value))
        text = self.to_text(key, path, node)
        try:
            return tuple(shlex.split(text))
        except ValueError as exc:
            self.fail(node, path, f"cannot split '{text}' into arguments ({exc}); balance "
                      "the quotes or write a list")

    def to_pair(self, key: Key, path: str, node: Node) -> tuple[int, int]:
        """``[MIN, MAX]`` or ``"MIN MAX"``: two integers within the key's limits, MIN first."""
        if isinstance(node, SequenceNode):
            items = [(item.value if isinstance(item, ScalarNode) and item.tag == TAG + "int"
                      else None) for item in node.value]
        elif isinstance(node, ScalarNode) and node.tag in TEXT_TAGS:
            items = node.value.replace(",", " ").split()
        else:
            self.wrong(key, path, node, "; write [MIN, MAX]")
        try:
            low, high = (int(str(item), 0) for item in items)
        except (TypeError, ValueError):
            self.wrong(key, path, node, "; write [MIN, MAX]")
        if not (key.in_range(low) and key.in_range(high)):
            self.out_of_range(key, path, node)
        if low > high:
            self.fail(node, path, f"MIN {low} is above MAX {high}; give MIN first")
        return low, high

    def to_hosts(self, key: Key, path: str, node: Node) -> tuple[HostSpec, ...]:
        if isinstance(node, ScalarNode) and node.tag == TAG + "str":
            items: list[tuple[str, Node]] = [(path, node)]
        elif isinstance(node, SequenceNode):
            items = [(f"{path}[{i}]", item) for i, item in enumerate(node.value)]
        else:
            self.wrong(key, path, node)
        if not items:
            self.fail(node, path, "expected at least one host, got an empty list; list the "
                      "hosts or remove the key to run on this host")
        hosts: list[HostSpec] = []
        first_line: dict[str, int] = {}
        for item_path, item in items:
            for spec in self.host_item(item_path, item):
                same = canonical_host(spec.name)
                if same in first_line:
                    self.fail(item, item_path, f"host '{spec.name}' is listed twice (first "
                              f"on line {first_line[same]}); list each host once with "
                              "all its slots")
                first_line[same] = line_of(item)
                hosts.append(spec)
        return tuple(hosts)

    def host_item(self, path: str, node: Node) -> tuple[HostSpec, ...]:
        if isinstance(node, MappingNode):
            return (self.host_mapping(path, node),)
        if not (isinstance(node, ScalarNode) and node.tag == TAG + "str"):
            self.fail(node, path, "expected a host such as 'node1:8' or a mapping with "
                      f"'name' and 'slots', got {describe(node)}")
        try:
            return parse_host_specs(node.value)
        except HostSpecError as exc:
            self.fail(node, path, str(exc))

    def host_mapping(self, path: str, node: MappingNode) -> HostSpec:
        given: dict[str, Any] = {}
        for name, key_node, value_node in self.items(node, path):
            key = self.known(name, path, key_node, HOST_KEYS)
            given[name] = self.convert(key, join(path, name), value_node)
        if "name" not in given:
            self.fail(node, path, "a host needs a 'name'; add 'name: <hostname>'")
        name = self.host_name(given.pop("name"), join(path, "name"), node)
        devices = given.get("devices")
        slots = given.setdefault("slots", len(devices) if devices else 1)
        if given.get("max_slots") is not None and given["max_slots"] < slots:
            self.fail(node, join(path, "max_slots"), f"{given['max_slots']} is below "
                      f"slots {slots}; raise max_slots or lower slots")
        return HostSpec(name=name, **given)

    def host_name(self, text: str, path: str, node: Node) -> str:
        """One host's name, by the rules of ``-H`` (the same messages, quoting it)."""
        if text.count(":") == 1 and not text.startswith("["):
            self.fail(node, path, f"'{text}' is not a host name; give the slots as "
                      "'slots: N', not after a colon")
        bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        if any(c in bare for c in "@,[]"):
            self.fail(node, path, f"'{text}' is not a host name; give one name or address "
                      "(ranges like node[1-4] are for the 'node1:8' string form)")
        try:
            return check_host_name(text)
        except Problem as exc:
            self.fail(node, path, f"host name '{text}': {exc}")


_EMPTY: dict[str, Any] = {"env": {}, "names": (), "args": ()}

_CONVERTERS: dict[str, Callable[[_Reader, Key, str, Node], Any]] = {
    "int": _Reader.to_int,
    "float": _Reader.to_float,
    "bool": _Reader.to_bool,
    "str": _Reader.to_text,
    "user": _Reader.to_user,
    "path": _Reader.to_path,
    "choice": _Reader.to_choice,
    "devices": _Reader.to_words,
    "names": _Reader.to_words,
    "env": _Reader.to_env,
    "args": _Reader.to_args,
    "hosts": _Reader.to_hosts,
    "pair": _Reader.to_pair,
}


def _suggest(name: str, prefix: str, here: Iterable[str]) -> str:
    """The nearest valid key: first at this level, then in another section."""
    here = list(here)
    close = difflib.get_close_matches(name, here, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{close[0]}'?"
    if prefix in ("",) + SECTIONS:
        elsewhere = {key.name: key for key in KEYS
                     if key.in_profile and key.section != prefix}
        close = difflib.get_close_matches(name, list(elsewhere), n=1, cutoff=0.75)
        if close:
            key = elsewhere[close[0]]
            place = f"under '{key.section}:'" if key.section else "at the top level"
            return f"; did you mean '{key.path}'? it goes {place}"
    return "; valid keys here: " + ", ".join(sorted(here))
