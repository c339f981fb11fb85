"""YAML nodes as the profile reader sees them: composing text into nodes with line marks,
and small questions about a node. Internal to :mod:`gcurun.config`."""

from __future__ import annotations

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gcurun.errors import ProfileError

TAG = "tag:yaml.org,2002:"
SCALAR_TAGS = frozenset(TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp"))
TEXT_TAGS = frozenset(TAG + t for t in ("str", "int", "float", "timestamp"))


def compose(text: str, source: str) -> Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "cannot be parsed"
        if problem.startswith("but ") and exc.context:
            problem = f"{exc.context}, {problem}"
        raise ProfileError(f"{source}{line}: not valid YAML: {problem}; check the "
                           "indentation and quoting there") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source}: not valid YAML: {exc}") from None


def describe(node: Node) -> str:
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, MappingNode):
        return "a mapping"
    if is_null(node):
        return "nothing"
    return f"'{node.value}'"


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == TAG + "null"


def line_of(node: Node) -> int:
    return int(node.start_mark.line) + 1


def join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
