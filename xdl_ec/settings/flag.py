"""Flag: how one config field is set on the command line, declared in the field's metadata beside its type and
default (``count: int = field(default=3, metadata=flag("--count", help="... (default {default})"))``), so a
command's parser, the checks of the flag's text and the config's keywords all come from that one declaration.

A field whose value is a config of its own (``Cluster.cache``, a ``Cache``) declares ``flags_from(Cache)``: the
inner config's flags stand in its place, their parsed values named ``<field>_<inner field>``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple

FLAG = "xdl_ec.flag"
FLAGS_FROM = "xdl_ec.flags_from"


@dataclasses.dataclass(frozen=True)
class Flag:
    """A field's flag: ``name`` (``--resize-share``), its ``help`` (``{default}`` there is the field's default),
    the ``part`` of the command line it belongs to (a command lays its parts out in its own order), and what
    argparse needs: ``type`` (text to value, refusing bad text), ``metavar``, ``choices``, ``action``
    (``store_true``, ``store_false``, ``append``) and ``one_of`` (flags of one ``one_of`` name exclude each
    other). ``labels``: the names a config's errors give the setting, when not its field's name."""

    name: str
    help: str
    part: str = ""
    type: Optional[Callable[[str], Any]] = None
    metavar: Optional[str] = None
    choices: Optional[Tuple[str, ...]] = None
    action: Optional[str] = None
    one_of: Optional[str] = None
    labels: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.startswith("--"):
            raise ValueError(f"flag: a name starts with '--', got {self.name!r}")


def flag(name: str, help: str, **options: Any) -> Dict[str, Flag]:
    """A field's metadata declaring its flag (keywords: :class:`Flag`'s)."""
    return {FLAG: Flag(name, help, **options)}


def flags_from(config: type, part: str = "") -> Dict[str, Tuple[type, str]]:
    """A field's metadata saying that its value is a ``config`` whose fields' flags stand in its place, in the
    command line's ``part``."""
    return {FLAGS_FROM: (config, part)}


@dataclasses.dataclass(frozen=True)
class FieldFlag:
    """A flag with the config field it fills: ``dest`` names its parsed value (the field's name, or
    ``<field>_<inner field>`` for a config inside a field), ``field`` the field of ``config``."""

    config: type
    field: str
    dest: str
    flag: Flag
    default: Any

    @property
    def unset(self) -> Any:
        """The parsed value when the flag is not given (the field's default then applies)."""
        return {"store_true": False, "store_false": True}.get(self.flag.action or "")

    @property
    def help(self) -> str:
        """The help text, the field's default written in where it says ``{default}``."""
        default = self.default
        if isinstance(default, (tuple, list)):
            default = ",".join(map(str, default))
        return self.flag.help.replace("{default}", str(default))


def field_flags(config: type, parts: Optional[Collection[str]] = None, prefix: str = "") -> List[FieldFlag]:
    """The flags of ``config``'s fields in field order (those of ``parts`` when given), a config inside a field
    contributing its own in the field's place."""
    found: List[FieldFlag] = []
    for field in dataclasses.fields(config):
        if FLAGS_FROM in field.metadata:
            inner, part = field.metadata[FLAGS_FROM]
            if parts is None or part in parts:
                found += field_flags(inner, None, f"{prefix}{field.name}_")
            continue
        declared = field.metadata.get(FLAG)
        if declared is None or (parts is not None and declared.part not in parts):
            continue
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        found.append(FieldFlag(config, field.name, prefix + field.name, declared, default))
    return found
