"""``pdguard``: the command line. The parser is built from ``commands.COMMANDS`` (each module
adds its own arguments and runs itself); ``main`` turns what escapes a command into an exit code
(``errors``): 0 done, 1 findings or changes needed, 2 an error (one line on stderr)."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from . import __version__
from .commands import COMMANDS
from .errors import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    ISSUES_URL,
    PdguardError,
    bug_line,
)
from .fixes import FIXES

DEBUG_ENV = "PDGUARD_DEBUG"

DESCRIPTION = f"""\
Apply, and prove, a liveness fix for SGLang prefill-decode (PD) disaggregation.

Requests that finished prefill wait in the prefill inflight queue until their KV cache
reaches decode; without a deadline, a decode restart can wedge them there forever.
pdguard's fixes, LibCST codemods that keep the target's formatting, import order and
line endings:
{chr(10).join(f"  {fix.name:<26}{fix.summary}" for fix in FIXES)}
"""

EPILOG = f"""\
exit codes (every command):
  0    done, nothing to do, no findings
  1    findings, or changes needed (never an error)
  2    error: one line `pdguard: error: <file>[:line]: what` on stderr; also a
       bug in pdguard, reported as one, with where to report it:
       {ISSUES_URL}
  130  interrupted (Ctrl-C)
  141  stdout closed early (e.g. piped into `head`); the output stops quietly

--debug (or {DEBUG_ENV}=1) prints the traceback of a bug in pdguard.
"""


class _Parser(argparse.ArgumentParser):
    # the top parser's subcommand parsers, by name: an unknown option is the command's error
    commands: dict[str, argparse.ArgumentParser]
    # a command's epilog, built when its help is shown (simulate's imports pdguard.simulate)
    epilog_of: Callable[[], str] | None = None

    def format_help(self) -> str:
        if self.epilog_of is not None:
            self.epilog, self.epilog_of = self.epilog_of(), None
        return super().format_help()

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but an argument no parser took is the chosen command's error
        (``pdguard: error: check: unrecognized arguments: --x (see `pdguard check --help`)``),
        not the top parser's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(self, "commands", {}).get(getattr(parsed, "command", None) or "")
            (command or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        """A usage error in the one documented shape, ``pdguard: error: [COMMAND: ]what``,
        on one line, exit 2 (argparse's own is ``pdguard check: error:`` after the usage)."""
        command = self.prog.removeprefix("pdguard").strip()
        where = f"{command}: " if command else ""
        what = " ".join(message.split())
        self.exit(EXIT_ERROR, f"pdguard: error: {where}{what} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    debug = _Parser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help=f"on a bug in pdguard, print its traceback (also {DEBUG_ENV}=1)",
    )
    parser = _Parser(
        prog="pdguard",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawTextHelpFormatter,
        parents=[debug],
    )
    parser.add_argument("--version", action="version", version=f"pdguard {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = {}
    for command in COMMANDS:
        sub = subparsers.add_parser(
            command.NAME,
            help=command.HELP,
            description=command.DESCRIPTION,
            formatter_class=argparse.RawTextHelpFormatter,
            parents=[debug],
        )
        sub.epilog_of = command.epilog
        command.add_arguments(sub)
        parser.commands[command.NAME] = sub
        sub.set_defaults(func=command.run)
    return parser


def _debug(argv: Sequence[str] | None, args: argparse.Namespace | None) -> bool:
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        return True
    if args is not None:
        return bool(getattr(args, "debug", False))
    return "--debug" in (sys.argv[1:] if argv is None else argv)


def _stdout_closed() -> bool:
    """Whether stdout's reader went away (poll reports an error on the pipe's write end);
    True where that cannot be told (no real file behind stdout)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):
        return True
    return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in events)


def _stdout_gone() -> None:
    """stdout's reader went away: send what is still buffered nowhere, so that the interpreter's
    final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (tests)
        pass


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a command (reference counting still frees
    memory; see ``pdguard.runtime``), and give a library caller its own setting back."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    args: argparse.Namespace | None = None
    try:
        args = build_parser().parse_args(argv)
        with collector_paused():
            if args.command == "check" and args.fix:  # ruff's `check --fix`: apply, then check
                from .commands.apply import fix_before_check

                args.fixed = fix_before_check(args)
            elif args.command == "check" and args.show_fixes:  # what apply's plan would fix
                from .commands.apply import would_fix

                args.would_fix = would_fix
            code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
        return code
    except PdguardError as exc:
        print(f"pdguard: error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if not _stdout_closed():  # a pipe to a child process (git) broke: an error, not 141
            print(f"pdguard: error: {bug_line(exc)}", file=sys.stderr)
            return EXIT_ERROR
        _stdout_gone()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug in pdguard
        if _debug(argv, args):
            traceback.print_exc()
        print(f"pdguard: error: {bug_line(exc)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
