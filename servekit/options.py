"""Options declared once: one :class:`Option` yields the flag, the environment variable, the YAML
key, the default shown in ``--help`` and the validation, for all three sources alike.

    SPEEDUP = Option("speedup", 1.0, positive_float, "simulated seconds per wall second")
    OPTIONS = OptionSet(SPEEDUP, ...)
    parser = OPTIONS.parser(prog="python -m simengine", description=...)
    args = OPTIONS.parse(parser, argv)          # flags > CACHEROUTE_SPEEDUP > --config YAML
    speedup: float = SPEEDUP.value(args)        # typed

``kv_blocks`` becomes ``--kv-blocks``, ``CACHEROUTE_KV_BLOCKS`` and the YAML key ``kv_blocks``
(or ``kv-blocks``); ``--help`` shows the default and the variable. A value from any source goes
through the same ``parse`` (and ``choices``), and an error names its source: the flag (argparse,
exit status 2), the variable, or ``FILE:key``. Every server's entry point declares its options
this way (docs/DEVELOPING.md); shared groups (logging, server TLS) live in
:mod:`servekit.flags`.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import yaml

T = TypeVar("T")
ENV_PREFIX = "CACHEROUTE_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


class SettingsError(ValueError):
    """A config file or environment value that cannot be used; names the source and key."""


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"YAML file of option values (env: {env_name('config')})",
    )


@dataclass(frozen=True)
class Option(Generic[T]):
    """One option. ``parse`` turns text into a value or raises ValueError/ArgumentTypeError.

    ``shown_default`` replaces the default in ``--help`` when the real one is computed later
    (``None`` standing for "the hostname and pid", say). ``fallback_env`` names a variable that
    is not ours but that a platform sets (Kubernetes' downward API ``POD_IP``, say): it is read
    only when neither a flag, ``CACHEROUTE_*`` nor the config file gives the option.
    """

    name: str
    default: T
    parse: Callable[[str], T]
    help: str
    choices: tuple[T, ...] | None = None
    metavar: str | None = None
    shown_default: str | None = None
    fallback_env: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return env_name(self.name)

    def value(self, args: argparse.Namespace) -> T:
        """This option's value in parsed ``args``."""
        return cast(T, getattr(args, self.name))

    def help_text(self) -> str:
        shown = self.shown_default
        if shown is None:
            shown = "none" if self.default is None else repr(self.default)
        fallback = f", else {self.fallback_env}" if self.fallback_env else ""
        return f"{self.help} (default: {shown}) (env: {self.env}{fallback})"

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            self.flag, dest=self.name, type=self.parse, default=self.default,
            choices=self.choices, metavar=self.metavar, help=self.help_text(),
        )  # fmt: skip

    def convert(self, raw: object, source: str) -> T:
        """A value from the environment or a config file, validated as a flag's would be."""
        try:
            value = self.parse(str(raw)) if isinstance(raw, str | int | float) else raw
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise SettingsError(f"{source}: {exc}") from exc
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(map(str, self.choices))
            raise SettingsError(f"{source}: {raw!r} is not one of {allowed}")
        return cast(T, value)


def parse_bool(text: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off/''`` (any case), as a variable or YAML value."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"expected a boolean (true/false, yes/no, on/off, 1/0), got {text!r}")


@dataclass(frozen=True)
class BoolOption(Option[bool]):
    """A switch: the bare flag turns it on; the variable and the YAML key take a boolean."""

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            self.flag, dest=self.name, action="store_true", default=self.default,
            help=self.help_text(),
        )  # fmt: skip

    def convert(self, raw: object, source: str) -> bool:
        if isinstance(raw, bool):
            return raw
        try:
            return parse_bool(str(raw))
        except ValueError as exc:
            raise SettingsError(f"{source}: {exc}") from exc


def switch(name: str, help: str) -> BoolOption:
    """A :class:`BoolOption` that is off unless given."""
    return BoolOption(name, False, parse_bool, help)


class _FromCommandLine(list[str]):
    """Values of a repeated flag given on the command line."""


class RepeatedFlag(argparse.Action):
    """A repeatable flag whose command-line values replace (not extend) an env/config list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        if not isinstance(current, _FromCommandLine):
            current = _FromCommandLine()
        current.append(str(values))
        setattr(namespace, self.dest, current)


@dataclass(frozen=True)
class ListOption(Option[list[str]]):
    """A repeatable flag (command-line values replace env/config ones); in the environment the
    values are separated by spaces or ``;``, in YAML a list or such a string. ``parse`` checks
    each item."""

    item: Callable[[str], object] = str

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            self.flag, dest=self.name, action=RepeatedFlag, type=self._checked,
            default=list(self.default), metavar=self.metavar, help=self.help_text(),
        )  # fmt: skip

    def _checked(self, text: str) -> str:
        try:
            self.item(text)
        except ValueError as exc:  # argparse shows an ArgumentTypeError's own message
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    def convert(self, raw: object, source: str) -> list[str]:
        if isinstance(raw, str):
            items = [x for x in re.split(r"[\s;]+", raw) if x]
        elif isinstance(raw, list):
            items = [str(x) for x in raw]
        else:
            raise SettingsError(f"{source}: expected {self.metavar or 'values'}, got {raw!r}")
        for item in items:
            try:
                self.item(item)
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                raise SettingsError(f"{source}: {exc}") from exc
        return items


def _list_parse(text: str) -> list[str]:
    return [text]


def list_option(
    name: str, help: str, item: Callable[[str], object] = str, metavar: str | None = None
) -> ListOption:
    """A :class:`ListOption` with an empty default."""
    return ListOption(name, [], _list_parse, help, metavar=metavar, item=item)


class OptionSet:
    """The options of one entry point, and the layered parse over them."""

    def __init__(self, *options: Option[Any] | Iterable[Option[Any]]) -> None:
        flat: list[Option[Any]] = []
        for item in options:
            flat.extend([item] if isinstance(item, Option) else item)
        self.options = tuple(flat)
        self._by_key = {o.name: o for o in self.options}
        if len(self._by_key) != len(self.options):
            raise ValueError(f"an option is declared twice in {[o.name for o in self.options]}")

    def parser(self, **kwargs: Any) -> argparse.ArgumentParser:
        """An ``ArgumentParser(**kwargs)`` with ``--config`` and every option.

        The declarations put each default and variable in the help text themselves, so the
        formatter only keeps the description's layout.
        """
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        parser = argparse.ArgumentParser(**kwargs)
        add_config_flag(parser)
        for option in self.options:
            option.add_to(parser)
        return parser

    def parse(
        self,
        parser: argparse.ArgumentParser,
        argv: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> argparse.Namespace:
        """Flags > ``CACHEROUTE_*`` variables > ``--config`` YAML > an option's
        ``fallback_env`` > declared defaults."""
        env = os.environ if environ is None else environ
        pre, _ = parser.parse_known_args(argv)
        path: Path | None = pre.config or (
            Path(env[env_name("config")]) if env_name("config") in env else None
        )
        defaults: dict[str, Any] = {
            o.name: o.convert(env[o.fallback_env], o.fallback_env)
            for o in self.options
            if o.fallback_env is not None and env.get(o.fallback_env)
        }
        if path is not None:
            defaults.update(self._from_file(path))
        for option in self.options:
            raw = env.get(option.env)
            if raw is not None:
                defaults[option.name] = option.convert(raw, option.env)
        parser.set_defaults(**defaults)
        return parser.parse_args(argv)

    def _from_file(self, path: Path) -> dict[str, Any]:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"config file {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise SettingsError(f"config file {path}: expected a mapping of option: value")
        values: dict[str, Any] = {}
        for key, raw in data.items():
            option = self._by_key.get(str(key).replace("-", "_"))
            if option is None:
                raise SettingsError(f"config file {path}: unknown option {key!r}")
            values[option.name] = option.convert(raw, f"{path}:{key}")
        return values
