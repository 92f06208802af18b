"""The command-line parser of ``npu-adapter``: argparse with one-line errors that suggest the
option or command a typo meant.

argparse prints a usage block of a dozen lines before each error, reports a misspelt option
(``--outt``) as a missing required one, and (before Python 3.14) suggests nothing.
:class:`CliParser` prints one line instead, ``npu-adapter inspect: error: ...``, naming the
unknown option first with its near miss (``did you mean --out?``, from
:func:`difflib.get_close_matches`) and pointing at ``--help``. It also refuses, the same way, an
argument whose bytes are not UTF-8, which would otherwise fail only when written into a report
after the work.
"""

import argparse
import difflib
import re
import sys

__all__ = ["CliParser"]

_NUMBER = re.compile(r"-\d|-\.\d")
_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")
_CUTOFF = 0.7  # --outt/--out 0.91, --stpe/--step 0.75; not --lr/--help (0.6)


class CliParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors are one line (see the module docstring).

    Its sub-parsers are ``CliParser`` too; a sub-command's parser reports the arguments it does
    not know itself, so the suggestion comes from that command's options. (argparse keeps the
    option strings of a parser, its groups' included, in ``_option_string_actions`` and its
    arguments in ``_actions``; they are read here, as it has no public accessor.)
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._given = []
        self._has_commands = False

    def add_subparsers(self, **kwargs):
        self._has_commands = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not self._has_commands:
            self.error("unrecognized arguments: " + " ".join(extras))
        self._check_text(namespace)
        return namespace, extras

    def _check_text(self, namespace):
        """Every argument is text that encodes as UTF-8: a path or name given as bytes that are
        not UTF-8 (a str with surrogate escapes) would fail where it is written into a report
        or a graph, after the work. The arguments of the command ``launch`` starts are its
        own."""
        from npu_adapter.config.parsers import check_text
        from npu_adapter.errors import NpuConfigError

        for action in self._actions:
            if action.nargs == argparse.REMAINDER:
                continue
            value = getattr(namespace, action.dest, None)
            values = value if isinstance(value, list) else [value]
            flag = action.option_strings[-1] if action.option_strings else \
                (action.metavar or action.dest)
            for text in values:
                if isinstance(text, str):
                    try:
                        check_text(flag, text)
                    except NpuConfigError as exc:
                        self.error(str(exc))

    def _unknown_options(self):
        """``[(token, near miss or None)]`` for the given options this parser does not know
        (an unambiguous prefix of a known option counts as known, as argparse takes it). The
        arguments of a command that takes the rest of the line (``launch script.py --lr 1``)
        are not looked at."""
        actions = self._option_string_actions
        known = sorted(actions)
        takes_rest = any(action.nargs == argparse.REMAINDER for action in self._actions)
        unknown = []
        value_next = False
        for token in self._given:
            if token == "--":
                break
            if not token.startswith("-") or token == "-" or _NUMBER.match(token):
                if takes_rest and not value_next:
                    break  # the command whose arguments follow
                value_next = False
                continue
            name = token.split("=", 1)[0]
            action = actions.get(name)
            value_next = action is not None and action.nargs != 0 and "=" not in token
            if action is not None or (self.allow_abbrev and name.startswith("--") and
                                      any(option.startswith(name) for option in known)):
                continue
            close = difflib.get_close_matches(name, known, n=1, cutoff=_CUTOFF)
            unknown.append((name, close[0] if close else None))
        return unknown

    def error(self, message):
        """Print ``prog: error: message`` on one line and exit with status 2."""
        choice = _CHOICE.search(message)
        unknown = self._unknown_options()
        if choice:
            allowed = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), allowed, n=1, cutoff=_CUTOFF)
            message = (f"{message[:choice.start()]}{choice.group(1)!r} is not one of "
                       f"{', '.join(allowed)}" + (f": did you mean {close[0]}?" if close else ""))
        elif unknown and (message.startswith(("the following arguments are required",
                                              "unrecognized arguments"))
                          or any(close for _, close in unknown)):
            name, close = next(((n, c) for n, c in unknown if c), unknown[0])
            message = f"unrecognized option {name}" + (f": did you mean {close}?" if close else "")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
