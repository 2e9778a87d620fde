"""One way from flags, ``name=value`` pairs and TOML/YAML files to a config dataclass.

``ask``, ``synth``, ``train``, ``eval qa`` and ``eval code`` all build their config here, so a
setting is spelled and parsed the same way everywhere: booleans are strict (``true/false/1/0/
yes/no/on/off``; anything else is an error naming the field, where a bare ``bool("no")`` would be
True), numbers must parse as their field's type, an unknown name is an error listing the fields,
and a file that is missing or malformed is one clear message, before any model loads.

A config may nest cohesive groups of settings as sections (``section``): each setting of a section
keeps one flat name (``lora_r`` for ``lora.r``), so flags, flat TOML keys and ``name=value`` pairs
stay as they were while a file may also write the group as a table (``[lora]`` with ``r = 8``).
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


class ConfigError(ValueError):
    """A setting is unknown, has the wrong type, or a config file cannot be read."""


def section(kind: type | None, *, prefix: str = "", flat: dict[str, str] | None = None, flags: type | None = None,
            help: str = "") -> Any:
    """A field holding a nested config of type ``kind``, whose settings are also reachable by flat names.

    ``flat`` maps each flat name to the section's field (default: ``prefix`` + the field's name).
    ``kind=None`` leaves the section's type to the owner's ``__post_init__`` (it receives a dict of
    the settings given): then ``flags`` is a dataclass whose fields, named by their flat names, give
    each flat setting's type, default and help."""
    if kind is not None:
        flat = flat or {prefix + f.name: f.name for f in dataclasses.fields(kind)}
        source = {name: (kind, sub) for name, sub in flat.items()}
        return dataclasses.field(default_factory=kind, metadata={"help": help, "section": kind, "flat": flat,
                                                                "source": source})
    if flags is None or flat is None:
        raise TypeError("a section without a type needs flat names and a flags dataclass")
    source = {name: (flags, name) for name in flat}
    return dataclasses.field(default_factory=dict, metadata={"help": help, "section": None, "flat": flat,
                                                            "source": source})


def sections(cls: type) -> dict[str, dataclasses.Field]:
    """The section fields of ``cls``, by name."""
    return {f.name: f for f in dataclasses.fields(cls) if "flat" in f.metadata}


def flat_settings(cls: type) -> dict[str, tuple[str, str]]:
    """Each flat name of a section setting of ``cls`` → (section, field in it)."""
    return {name: (f.name, sub) for f in sections(cls).values() for name, sub in f.metadata["flat"].items()}


def flat_dict(obj: Any) -> dict[str, Any]:
    """A config as one flat dict: each plain field by its name, each section setting by its flat name
    (what a file or flag would set), so a record keeps the keys it had before the settings were grouped."""
    secs = sections(type(obj))
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name not in secs:
            out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
        elif dataclasses.is_dataclass(value):
            out.update({flat: getattr(value, sub) for flat, sub in f.metadata["flat"].items()})
        else:
            out[f.name] = value
    return out


def _flat_kind(cls: type, name: str) -> Any:
    owner, sub = next(f.metadata["source"][name] for f in sections(cls).values() if name in f.metadata["flat"])
    return field_types(owner)[sub]


def nest(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every flat name moved into its section, coerced on the way so that an error
    names the setting as it was written; a flat name overrides the same setting in a section's table."""
    flat, secs = flat_settings(cls), sections(cls)
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name in secs and isinstance(value, dict):
            out[name] = {**out.get(name, {}), **{str(k).replace("-", "_"): v for k, v in value.items()}}
        elif name in secs and dataclasses.is_dataclass(value):
            out[name] = value
        elif name not in flat:
            out[name] = value
    for name, value in values.items():
        if name in flat and not (name in secs and isinstance(value, dict)):
            sec, sub = flat[name]
            part = out.get(sec, {})
            part = dataclasses.asdict(part) if dataclasses.is_dataclass(part) else dict(part)
            part[sub] = coerce(name, _flat_kind(cls, name), value)
            out[sec] = part
    return out


def setting_names(cls: type) -> list[str]:
    """The names a file or flag may set: plain fields, sections and the sections' flat names."""
    return [f.name for f in dataclasses.fields(cls)] + [n for n in flat_settings(cls) if n not in sections(cls)]


def field_types(cls: type) -> dict[str, Any]:
    """Each field's resolved type, with ``X | None`` reduced to ``X``."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            kind = args[0] if len(args) == 1 else str
        out[f.name] = kind
    return out


def parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise ConfigError(f"{name}: {value!r} is not a boolean (use true/false, yes/no, 1/0 or on/off)")


def coerce(name: str, kind: Any, value: Any) -> Any:
    """``value`` (a string from the command line, or a TOML/YAML value) as a field of type ``kind``."""
    if value is None:
        return None
    if kind is bool:
        return parse_bool(name, value)
    if typing.get_origin(kind) is list or kind is list:
        if isinstance(value, str):
            return [x.strip() for x in value.split(",") if x.strip()]
        if isinstance(value, list | tuple) and all(isinstance(x, str) for x in value):
            return list(value)
        raise ConfigError(f"{name}: {value!r} is not a list of names (write a,b,c)")
    if kind in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{name}: {value!r} is not a number")
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: {value!r} is not {'an integer' if kind is int else 'a number'}") from None
        if kind is int and isinstance(value, float) and value != number:
            raise ConfigError(f"{name}: {value!r} is not an integer")
        return number
    if kind is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{name}: {value!r} is not a string")
    return value


def build(cls: type, values: dict[str, Any], base: Any = None) -> Any:
    """An instance of ``cls`` from ``values`` (over ``base``'s values when given), each coerced to its type."""
    kinds, secs = field_types(cls), sections(cls)
    values = nest(cls, values)
    unknown = sorted(set(values) - set(kinds))
    if unknown:
        raise ConfigError(f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                          f"the settings are: {', '.join(setting_names(cls))}")
    merged = {f.name: getattr(base, f.name) for f in dataclasses.fields(cls)} if base is not None else {}
    for k, v in values.items():
        if k not in secs:
            merged[k] = coerce(k, kinds[k], v)
        elif dataclasses.is_dataclass(v):
            merged[k] = v
        elif secs[k].metadata["section"] is not None:  # a table of the section's own fields
            try:
                merged[k] = build(secs[k].metadata["section"], v, merged.get(k))
            except ConfigError as e:
                raise ConfigError(f"[{k}] {e}") from None
        else:  # the owner picks the section's type: it gets the settings over the base's
            before = merged.get(k)
            merged[k] = {**(dataclasses.asdict(before) if dataclasses.is_dataclass(before) else before or {}), **v}
    try:
        return cls(**merged)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:  # __post_init__ refusing a combination of settings
        raise ConfigError(str(e)) from None


def parse_pairs(pairs: list[str] | None) -> dict[str, str]:
    """``["name=value", ...]`` as a dict; a pair without ``=`` is an error."""
    out = {}
    for pair in pairs or []:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"expected name=value, got {pair!r}")
        out[name.strip().replace("-", "_")] = raw
    return out


def load_file(path: str | Path) -> dict[str, Any]:
    """The settings of a TOML (or, by extension, YAML) file: a table of ``name = value``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        else:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except Exception as e:  # tomllib.TOMLDecodeError, yaml.YAMLError: the parser's message says where
        raise ConfigError(f"config file {path} is not valid {path.suffix.lstrip('.').upper() or 'TOML'}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold name = value settings, not a {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def add_flags(parser: argparse.ArgumentParser, cls: type, only: tuple[str, ...] | None = None,
              skip: tuple[str, ...] = (), defaults: dict[str, Any] | None = None) -> None:
    """``--field-name`` for each field (strings, parsed later by ``build``; unset flags stay None);
    ``defaults`` are the command's own defaults, where they differ from the dataclass's, for the help."""
    for name, f, kind in _flag_fields(cls):
        if name in skip or (only is not None and name not in only):
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        default = (defaults or {}).get(name, default)
        text = f.metadata.get("help", "")
        text = f"{text} (default: {default})" if text else f"default: {default}"
        flag, help_text = "--" + name.replace("_", "-"), text.replace("%", "%%")  # argparse formats help with %
        if kind is bool:  # a bare --flag means true; --flag false turns it off
            parser.add_argument(flag, dest=name, default=None, nargs="?", const="true", metavar="BOOL",
                                help=help_text)
        else:
            parser.add_argument(flag, dest=name, default=None, metavar="VALUE", help=help_text)


def _flag_fields(cls: type) -> list[tuple[str, dataclasses.Field, Any]]:
    """(flag name, the field that documents it, its type) for each plain field and flat section setting."""
    kinds, out = field_types(cls), []
    for f in dataclasses.fields(cls):
        if "flat" not in f.metadata:
            out.append((f.name, f, kinds[f.name]))
            continue
        for name, (owner, sub) in f.metadata["source"].items():
            documented = {g.name: g for g in dataclasses.fields(owner)}[sub]
            out.append((name, documented, field_types(owner)[sub]))
    return out


def flag_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of ``cls`` that were given as flags."""
    return {name: getattr(args, name) for name, _, _ in _flag_fields(cls) if getattr(args, name, None) is not None}


# Agent settings every command that runs the agent spells the same way, as flags (``ask``, ``synth
# trajectories``, ``train``, ``eval qa``, ``eval code``); every other field is reachable through
# ``--set NAME=VALUE`` and ``--config FILE``.
COMMON_FLAGS = ("context", "max_turns", "max_tool_calls", "max_new_tokens")


def add_config_flags(parser: argparse.ArgumentParser, cls: type, *, flags: tuple[str, ...] = COMMON_FLAGS,
                     defaults: dict[str, Any] | None = None) -> None:
    """``--config FILE``, ``--set NAME=VALUE`` (repeatable) and ``flags`` (those of them ``cls`` has)."""
    name = cls.__name__
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help=f"override one {name} setting (any of them, by its name in a --config file)")
    add_flags(parser, cls, only=flags, defaults=defaults)
    parser.add_argument("--config", default=None, metavar="FILE",
                        help=f"TOML or YAML file of {name} settings (--set and flags override it)")


def config_from_args(args: argparse.Namespace, cls: type, *, defaults: dict[str, Any] | None = None,
                     flags: tuple[str, ...] = COMMON_FLAGS, reserved: dict[str, str] | None = None) -> Any:
    """``cls`` from the command's ``defaults``, then ``--config``, then ``--set``, then ``flags``.

    ``reserved`` names fields that the command sets itself, with the flag that does it (``{"mode":
    "--mode"}``): setting one in a file or a pair is an error, not a silent override.
    Raises ``ConfigError`` with one message for anything wrong.
    """
    if not isinstance(args, argparse.Namespace):  # a list of pairs here would silently set nothing
        raise TypeError(f"config_from_args takes parsed arguments, not {type(args).__name__}")
    given = {**(load_file(args.config) if getattr(args, "config", None) else {}),
             **parse_pairs(getattr(args, "set", None))}
    for name, flag in (reserved or {}).items():
        if name in given:
            raise ConfigError(f"{name} is set with {flag}")
    values = {**(defaults or {}), **given,
              **{k: v for k, v in flag_values(args, cls).items() if k in flags}}
    return build(cls, values)
