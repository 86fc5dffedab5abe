"""How settings are loaded: `conf/base/*.yml` + `conf/<env>/*.yml` + `.env` + environment.

Layering, lowest first:
1. `conf/base/*.yml` (committed, shared),
2. `conf/<env>/*.yml` (the `--env` overlay; `local` by default and gitignored),
3. `LAKEHOUSE__SECTION__KEY=value` environment variables (after `.env` / `.env.<env>` are loaded
   with python-dotenv; variables already in the environment win over the files).

The merged tree is built into frozen dataclasses (`lakehouse.core.settings` declares them) by
`build`, which checks every key and type. Values may reference environment variables as
`${NAME}`; that is how secrets get in, and a secret field *must* be such a reference, so a
password can never be committed with a default. A secret is resolved when it is used, not at
load, so a job never needs a secret it does not use (refine_silver runs without the PostgreSQL
password). Every problem raises `SettingsError` naming the file and the dotted key, plus the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from dotenv import load_dotenv

from lakehouse.core.errors import UsageError

ENV_PREFIX = "LAKEHOUSE__"
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SettingsError(UsageError):
    """A configuration problem; the message names the file, the key and the fix."""


class Secret:
    """A `${NAME}` reference to an environment variable, resolved when used: it never shows
    itself in repr, str, logs or tracebacks, and a missing variable is an error naming the
    file and key that asked for it."""

    __slots__ = ("_dotted", "_reference", "_where")

    def __init__(self, reference: str, where: str = "", dotted: str = "") -> None:
        self._reference, self._where, self._dotted = reference, where, dotted

    def get(self) -> str:
        return interpolate(self._reference, self._where, self._dotted)

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._reference == self._reference

    def __hash__(self) -> int:
        return hash(self._reference)


T = TypeVar("T")


def project_root() -> Path:
    """The checkout this package runs from (where `conf/` lives), or `LAKEHOUSE_HOME`. Imported
    from the archive spark-submit ships (`--py-files lakehouse-*.zip`), the package has no
    checkout around it: the working directory then stands for it."""
    home = os.environ.get("LAKEHOUSE_HOME")
    if home:
        return Path(home).resolve()
    package = Path(__file__).resolve().parent.parent
    if not package.parent.is_dir():  # inside a zip archive
        return Path.cwd().resolve()
    return package.parent


def load_tree(
    env: str, conf_dir: Path | None, overrides: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The merged configuration of `env` and, per dotted key, where it was set."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", env):
        raise SettingsError(f"--env {env!r}: use letters, digits, '-' or '_' (e.g. --env local)")
    root = project_root()
    env_conf = os.environ.get("LAKEHOUSE_CONF_DIR")
    conf = (conf_dir or (Path(env_conf) if env_conf else root / "conf")).resolve()
    if not (conf / "base").is_dir():
        raise SettingsError(
            f"{conf / 'base'}: no such directory; set LAKEHOUSE_HOME to the checkout"
        )
    _load_dotenv(root, env)

    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    files = sorted((conf / "base").glob("*.yml"))
    if env != "base":
        files += sorted((conf / env).glob("*.yml"))
    for path in files:
        _merge(merged, origin, _read_yaml(path), str(path.relative_to(conf.parent)), "")
    _merge(merged, origin, _env_overrides(), "", "")
    if overrides:
        _merge(merged, origin, _unflatten(overrides), "overrides", "")
    merged["env"] = env
    origin["env"] = "--env"
    return merged, origin


def _load_dotenv(root: Path, env: str) -> None:
    # Most specific file first: with override=False the first value set wins, and variables
    # already in the environment win over both files.
    for name in (f".env.{env}", ".env"):
        candidate = root / name
        if candidate.is_file():
            load_dotenv(candidate, override=False)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: the top level must be a mapping of sections")
    return data


def _env_overrides() -> dict[str, Any]:
    flat = {
        key[len(ENV_PREFIX) :].lower().replace("__", "."): value
        for key, value in os.environ.items()
        if key.startswith(ENV_PREFIX)
    }
    return _unflatten(flat)


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = nested
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _merge(
    into: dict[str, Any], origin: dict[str, str], new: Mapping[str, Any], source: str, prefix: str
) -> None:
    for key, value in new.items():
        dotted = f"{prefix}{key}"
        where = source or f"environment variable {ENV_PREFIX}{dotted.upper().replace('.', '__')}"
        if isinstance(value, dict) and isinstance(into.setdefault(key, {}), dict):
            origin.setdefault(dotted, where)
            _merge(into[key], origin, value, source, f"{dotted}.")
        else:
            into[key] = value
            origin[dotted] = where


def where(origin: Mapping[str, str], dotted: str) -> str:
    # The nearest key that some file set tells the user which file to open.
    probe = dotted
    while probe:
        if probe in origin:
            return origin[probe]
        probe = probe.rpartition(".")[0]
    return "conf/base"


def build(cls: type[T], data: Any, origin: Mapping[str, str], prefix: str) -> T:
    if not isinstance(data, Mapping):
        raise SettingsError(
            f"{where(origin, prefix.rstrip('.'))}: '{prefix.rstrip('.')}' must be a mapping"
        )
    assert dataclasses.is_dataclass(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            dotted = f"{prefix}{key}"
            raise SettingsError(
                f"{where(origin, dotted)}: unknown key '{dotted}'; "
                f"allowed under '{prefix.rstrip('.') or '<top>'}': {', '.join(sorted(fields))}"
            )
    kwargs: dict[str, Any] = {}
    for name, fld in fields.items():
        dotted = f"{prefix}{name}"
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], origin, dotted)
        elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
            if isinstance(hints[name], type) and dataclasses.is_dataclass(hints[name]):
                kwargs[name] = build(hints[name], {}, origin, f"{dotted}.")
            else:
                raise SettingsError(f"{where(origin, dotted)}: missing required key '{dotted}'")
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a dataclass's own check (__post_init__)
        name = prefix.rstrip(".")
        # A check of one key (its message starts with the key) names the file that set it;
        # a cross-field check names the section's.
        key = next((k for k in data if str(exc).startswith(f"'{k}'")), None)
        place = where(origin, f"{prefix}{key}" if key else name)
        raise SettingsError(f"{place}: '{name}': {exc}") from None


def _coerce(hint: Any, value: Any, origin: Mapping[str, str], dotted: str) -> Any:
    place = where(origin, dotted)
    optional = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) and len(optional) == 1:  # `X | None`
        return None if value is None else _coerce(optional[0], value, origin, dotted)
    if hint is Secret:
        return _secret(value, place, dotted)
    if isinstance(value, str):
        value = interpolate(value, place, dotted)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return build(hint, value, origin, f"{dotted}.")
    kind = typing.get_origin(hint)
    if hint is bool:
        return _as_bool(value, place, dotted)
    if hint in (int, float):
        return _as_number(hint, value, place, dotted)
    if hint is str:
        if isinstance(value, bool | int | float) or not isinstance(value, str):
            raise SettingsError(f"{place}: '{dotted}' must be a string, got {value!r}")
        return value
    if kind is dict:
        if not isinstance(value, Mapping):
            raise SettingsError(f"{place}: '{dotted}' must be a mapping, got {value!r}")
        item = typing.get_args(hint)[1]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            return {str(k): build(item, v, origin, f"{dotted}.{k}.") for k, v in value.items()}
        if item is Any:  # free-form arguments (e.g. an expectation's kwargs): YAML types kept
            return {str(k): v for k, v in value.items()}
        options = {str(k): _option_text(v, origin, f"{dotted}.{k}") for k, v in value.items()}
        if item == str | Secret:  # options that may hold references: resolved when used
            return {k: _maybe_secret(v, place, f"{dotted}.{k}") for k, v in options.items()}
        return {k: interpolate(v, place, f"{dotted}.{k}") for k, v in options.items()}
    if kind is tuple and _is_dataclass(typing.get_args(hint)[0]):
        if not isinstance(value, list):
            raise SettingsError(f"{place}: '{dotted}' must be a list of mappings, got {value!r}")
        item = typing.get_args(hint)[0]
        return tuple(build(item, v, origin, f"{dotted}[{i}].") for i, v in enumerate(value))
    if kind is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise SettingsError(f"{place}: '{dotted}' must be a list, got {value!r}")
        return tuple(str(item).strip() for item in items if str(item).strip())
    raise SettingsError(f"{dotted}: unsupported settings type {hint}")  # pragma: no cover


def _option_text(value: Any, origin: Mapping[str, str], dotted: str) -> str:
    """An option's value as the text its consumer (Spark, Kafka, Kafka Connect) parses: a YAML
    boolean as `true`/`false`. A mapping or list is refused: it is an option's name split at
    its dots (`spark.sql.x` in an environment variable), which would pass on as a printed
    mapping under the name's first part, and its consumer would never see the option."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list):
        leaf, node = dotted, value
        while isinstance(node, Mapping) and node:  # the first key some file or variable set
            key, node = next(iter(node.items()))
            leaf = f"{leaf}.{key}"
        fix = (
            "got a mapping: write the option's whole dotted name as one key in a YAML file (an "
            "environment variable splits it at its dots)"
            if isinstance(value, Mapping)
            else "got a list: write it as one string, comma-separated, as the option reads lists"
        )
        raise SettingsError(
            f"{where(origin, leaf)}: '{dotted}' must be a value (a string, number or boolean), "
            f"{fix}"
        )
    return str(value)


def _is_dataclass(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _secret(value: Any, where: str, dotted: str) -> Secret:
    if not isinstance(value, str) or not _REF.fullmatch(value.strip()):
        raise SettingsError(
            f"{where}: '{dotted}' is a secret and must be a reference such as "
            "'${POSTGRES_PASSWORD}'; put the value in .env (see .env.example), never in YAML"
        )
    return Secret(value.strip(), where, dotted)


def _maybe_secret(value: str, where: str, dotted: str) -> str | Secret:
    return Secret(value, where, dotted) if _REF.search(value) else value


def resolved(options: Mapping[str, str | Secret]) -> dict[str, str]:
    """`options` with each reference resolved (a missing variable raises `SettingsError`
    naming the file and key): called by what uses them, so a job never fails on a secret it
    does not use."""
    return {k: v.get() if isinstance(v, Secret) else v for k, v in options.items()}


def interpolate(value: str, where: str, dotted: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        found = os.environ.get(name)
        if found is None or found == "":
            raise SettingsError(
                f"{where}: '{dotted}' needs environment variable {name}, which is not set; "
                "add it to .env (copy .env.example) or export it"
            )
        return found

    return _REF.sub(replace, value)


def _as_bool(value: Any, where: str, dotted: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise SettingsError(f"{where}: '{dotted}' must be true or false, got {value!r}")


def _as_number(kind: type, value: Any, where: str, dotted: str) -> int | float:
    if isinstance(value, bool):
        raise SettingsError(f"{where}: '{dotted}' must be a number, got {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{where}: '{dotted}' must be a number, got {value!r}") from None
    if kind is int and isinstance(value, float) and value != number:
        raise SettingsError(f"{where}: '{dotted}' must be a whole number, got {value!r}")
    return typing.cast(int | float, number)
