"""Click's usage errors in gcurun's words: one line that quotes the input, states what was
wrong and says how to fix it, as every other message of bad input does (exit code 2)."""

from __future__ import annotations

import click


def usage_message(exc: click.UsageError, command: click.Command | None = None,
                  where: str = "gcurun") -> str:
    """The text after ``gcurun: error: `` for one of click's usage errors raised by
    ``command`` (run as ``where``)."""
    ctx = exc.ctx
    if ctx is not None:
        command, where = ctx.command, ctx.command_path
    if isinstance(exc, click.NoSuchOption):
        text = f"no such option '{exc.option_name}'"
        if exc.possibilities:
            return text + f"; did you mean {' or '.join(sorted(exc.possibilities))}?"
        return text + f"; {where} --help lists the options"
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        kind = "option" if isinstance(exc.param, click.Option) else "argument"
        return f"{kind} {_name(exc.param)} is missing; {_fix(exc.param, where)}"
    if isinstance(exc, click.BadParameter) and exc.param is not None:
        return f"{_name(exc.param)}: {_sentence(exc.message)}; {_fix(exc.param, where)}"
    if isinstance(exc, click.BadOptionUsage) and " requires " in exc.message:
        param = _param(command, exc.option_name)
        metavar, count = "VALUE", 1
        if param is not None and command is not None:
            metavar, count = _metavar(param, command), param.nargs
        values = "a value" if count == 1 else f"{count} values"
        return f"option '{exc.option_name}' needs {values}; write {exc.option_name} {metavar}"
    text = _sentence(exc.format_message())
    if "; " in text:      # gcurun's own usage errors say how to fix already
        return text
    return f"{text}; {where} --help shows the usage"


def _sentence(text: str) -> str:
    """Click's sentence as a clause: no final full stop, a lower-case first word."""
    text = " ".join(text.strip().rstrip(".").split()).replace(". Did you mean", "; did you mean")
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _name(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        return param.opts[0]
    return (param.name or "argument").upper()


def _metavar(param: click.Parameter, command: click.Command) -> str:
    try:
        return param.make_metavar(click.Context(command))
    except TypeError:  # click before 8.2 takes no context
        return param.make_metavar()  # type: ignore[call-arg]


def _param(command: click.Command | None, option: str) -> click.Parameter | None:
    if command is None:
        return None
    for param in command.params:
        if option in getattr(param, "opts", ()) or option in getattr(param, "secondary_opts",
                                                                      ()):
            return param
    return None


def _fix(param: click.Parameter, where: str) -> str:
    """How to write a good value for ``param``."""
    kind = param.type
    if isinstance(kind, click.Choice):
        return "write one of " + ", ".join(str(c) for c in kind.choices)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        return "write a number in that range"
    if isinstance(kind, click.Tuple):
        count = len(kind.types)
        if all(t is click.INT for t in kind.types):
            return f"write {param.metavar or 'the values'}: {count} whole numbers"
        return f"write {param.metavar or 'the values'}: {count} values"
    if kind is click.INT:
        return "write a whole number"
    if kind is click.FLOAT:
        return "write a number"
    if isinstance(kind, click.Path):
        return "give a path to a file"
    from gcurun.cli.help import GROUP_OF

    group = GROUP_OF.get(param.name or "")
    if where == "gcurun" and group is not None:
        return f"gcurun help {group.topic} describes it"
    return f"{where} --help describes it"
