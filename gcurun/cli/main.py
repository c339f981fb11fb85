"""Entry point: ``gcurun [OPTIONS] COMMAND...`` runs a job; ``gcurun check|bench|timeline|k8s``
are subcommands. One boundary turns gcurun's errors into messages and exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import click

from gcurun.errors import GcurunError, UsageError

# Subcommands, imported only when named so `gcurun --help` and plain runs stay fast.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "check": ("gcurun.cli.check", "check"),
    "bench": ("gcurun.cli.bench", "bench"),
    "timeline": ("gcurun.cli.timeline", "timeline"),
    "k8s": ("gcurun.cli.k8s", "k8s"),
}


def load_command(args: Sequence[str]) -> tuple[click.Command, list[str]]:
    """The click command that handles ``args``: a subcommand when the first argument names
    one (``gcurun run ...`` is the explicit form of the default), else the run command.
    ``gcurun help`` is the run command's ``--help``, ``gcurun help SUBCOMMAND`` that
    command's (other topics are :func:`show_help`'s)."""
    if args and args[0] == "help":
        named = args[1] if len(args) > 1 and args[1] in SUBCOMMANDS else "run"
        return load_command([named, "--help"])
    if args and args[0] in SUBCOMMANDS:
        module, attr = SUBCOMMANDS[args[0]]
        return getattr(__import__(module, fromlist=[attr]), attr), list(args[1:])
    from gcurun.cli.run import run

    return run, list(args[1:] if args and args[0] == "run" else args)


def main(argv: Sequence[str] | None = None) -> None:
    """Run gcurun and exit with its code: 0, 2 for bad input, 1 for a launch failure,
    the failing rank's code when a rank fails, 128+N after signal N."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["help"] and len(args) > 1 and args[1] not in (*SUBCOMMANDS, "run"):
        sys.exit(guarded(lambda: show_help(args[1:])))
    command, rest = load_command(args)
    name = "gcurun" if command.name == "run" else f"gcurun {command.name}"
    sys.exit(guarded(lambda: command.main(rest, prog_name=name, standalone_mode=False),
                     command, name))


def show_help(words: Sequence[str]) -> int:
    """``gcurun help TOPIC``: a group of options or a text topic. Raises UsageError for an
    unknown topic or more than one word."""
    from gcurun.cli.help import topic_list, topic_text
    from gcurun.cli.run import run

    text = topic_text(words[0], run) if len(words) == 1 else None
    if text is None:
        names = " ".join(words)
        raise UsageError(f"help topic '{names}' is unknown; write gcurun help TOPIC with one "
                         "of these topics:\n" + topic_list().rstrip("\n"))
    click.echo(text, nl=False)
    return 0


def guarded(call: Callable[[], object], command: click.Command | None = None,
            name: str = "gcurun") -> int:
    """Call ``call`` (``command`` run as ``name``) inside the error boundary and return the
    process exit code."""
    try:
        result = call()
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        from gcurun.cli.usage import usage_message

        click.echo(f"gcurun: error: {usage_message(exc, command, name)}", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"gcurun: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except GcurunError as exc:
        from gcurun.cli.render import report_error

        report_error(exc)
        return exc.exit_code
    return result if isinstance(result, int) else 0
