"""A command's flags made from config classes (:mod:`xdl_ec.settings.flag`): argparse arguments from the fields'
declared flags, and back from the parsed arguments, the fields that were given and a config's errors written with
the flags' names."""

from __future__ import annotations

import argparse
import re
from typing import Any, Dict, List, Sequence

from xdl_ec.settings.flag import FieldFlag, field_flags


class FlagSection:
    """One group of a command's flags as --help lists them: the flags of config fields, in the order added; flags
    of one ``one_of`` exclude each other."""

    def __init__(self, group: Any) -> None:  # an ArgumentParser or one of its argument groups
        self.group = group
        self._exclusive: Dict[str, Any] = {}

    def add(self, config: type, *parts: str) -> List[FieldFlag]:
        """Adds the flags of ``config``'s fields (of those ``parts`` when given); returns them."""
        flags = field_flags(config, parts or None)
        for each in flags:
            declared = each.flag
            options = {
                "type": declared.type,
                "metavar": declared.metavar,
                "choices": declared.choices,
                "action": declared.action,
            }
            target = self.group
            if declared.one_of is not None:
                if declared.one_of not in self._exclusive:
                    self._exclusive[declared.one_of] = self.group.add_mutually_exclusive_group()
                target = self._exclusive[declared.one_of]
            default = {} if declared.action in ("store_true", "store_false") else {"default": None}
            target.add_argument(
                declared.name,
                dest=each.dest,
                help=each.help,
                **default,
                **{key: value for key, value in options.items() if value is not None},
            )
        return flags


def given(args: argparse.Namespace, flags: Sequence[FieldFlag]) -> List[str]:
    """The names of ``flags`` given a value (an unset flag reads None, or False for a switch; a given 0 counts)."""
    return [f.flag.name for f in flags if _given(getattr(args, f.dest, None))]


def _given(value: Any) -> bool:
    return value is not None and value is not False  # by identity: 0 == False, and --staleness 0 is a value


def values(args: argparse.Namespace, flags: Sequence[FieldFlag]) -> Dict[str, Any]:
    """{field: value} of the ``flags`` given on the command line (the fields' defaults apply to the others)."""
    out = {}
    for f in flags:
        value = getattr(args, f.dest, None)
        if value is not None and value != f.unset:
            out[f.field] = value
    return out


def flag_names(message: str, flags: Sequence[FieldFlag]) -> str:
    """A config's error with its setting names written as the ``flags`` that set them."""
    labels = sorted(
        ((label, f.flag.name) for f in flags for label in (f.dest, *f.flag.labels)), key=lambda p: -len(p[0])
    )
    for label, name in labels:  # the longest first: "cpr mode:" before "mode:"
        message = re.sub(rf"(?<![\w-]){re.escape(label)}:", f"{name}:", message)
    return re.sub(r"(ft|backend)='(\w+)'", r"--\1 \2", message)
