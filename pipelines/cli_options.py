"""Command-line options made from pydantic config fields: each flag's type, help and default come from its field.

`field_flags(RunConfig, {...})` makes one `FieldFlag` per listed field (a dotted path, `"server.port"`, or
`"train.*"` for every field of a nested model); `command_signature` turns them into typer options. A
command then reads what the user gave with `given_values` (the flags left at their defaults stay out,
so the config's own defaults and validators decide those fields) and names the flag of a validation
error's field with `flag_for`.
"""

from __future__ import annotations

import inspect
import re
import types
from dataclasses import dataclass, field
from typing import Annotated, Any, Union, get_args, get_origin

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.markup import escape


@dataclass(frozen=True)
class FieldFlag:
    """A command-line option that sets the field at `path` of a config model."""

    path: str
    """Dotted path of the field in the root model: `train.loss`."""
    names: tuple[str, ...]
    """The option's names, the first the one errors show: `("--learning-rate", "--lr")`."""
    field: FieldInfo
    help: str
    """The first sentence of the field's docstring (and what else `field_flags` was given)."""
    options: dict[str, Any] = field(default_factory=dict)
    """More `typer.Option` arguments: `envvar`, `metavar`, `rich_help_panel`."""

    @property
    def param(self) -> str:
        """The command function's parameter name."""
        return self.path.replace(".", "__")

    @property
    def is_list(self) -> bool:
        return get_origin(_option_type(self.field.annotation)) is list

    def parameter(self) -> inspect.Parameter:
        """The typer option: the field's type, its help, its default (shown; the command ignores it)."""
        kind = _option_type(self.field.annotation)
        first, *more = self.names
        name = f"{first}/--no-{first[2:]}" if kind is bool else first
        help_text = f"{self.help} Repeatable, or comma-separated." if self.is_list else self.help
        option = typer.Option(name, *more, help=escape(help_text), **self.options)
        default = self.field.get_default(call_default_factory=True)
        return inspect.Parameter(
            self.param, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]
        )

    def value(self, raw: Any) -> Any:
        """The field's value from the option's: a list option takes repeated and comma-separated values."""
        if self.is_list:
            return [part.strip() for item in raw for part in str(item).split(",") if part.strip()]
        return raw


def field_flags(root: type[BaseModel], fields: dict[str, dict[str, Any]]) -> list[FieldFlag]:
    """One flag per field that `fields` lists, in its order, with `typer.Option` arguments for each.

    A key is a dotted path into `root` (`"server.port"`), or `"train.*"` for every field of the model at
    `root.train`; a later key for a path already listed adds to its arguments. A flag is named after its
    field (`--group-size`), or after its path where that name is taken (`--trainer-seed`), unless the
    arguments give `names`; `help_suffix` is appended to the help.
    """
    listed: dict[str, dict[str, Any]] = {}
    for key, options in fields.items():
        if key.endswith(".*"):
            prefix = key.removesuffix(".*")
            for name in _model_at(root, prefix).model_fields:
                listed.setdefault(f"{prefix}.{name}", {}).update(options)
        else:
            listed.setdefault(key, {}).update(options)
    flags, taken = [], set()
    for path, options in listed.items():
        options = dict(options)
        parent, _, name = path.rpartition(".")
        model = _model_at(root, parent)
        names = options.pop("names", None) or ((_flag_name(path) if _flag_name(name) in taken else _flag_name(name)),)
        taken.update(names)
        sentence = first_sentence(model.model_fields[name].description or "")
        help_text = " ".join(filter(None, [sentence, options.pop("help_suffix", "")]))
        flags.append(FieldFlag(path, tuple(names), model.model_fields[name], help_text, options))
    return flags


def command_signature(*leading: inspect.Parameter, flags: list[FieldFlag]) -> inspect.Signature:
    """The signature typer reads a command's options from: `leading` parameters, then one per flag."""
    return inspect.Signature([*leading, *(flag.parameter() for flag in flags)])


def given_values(ctx: typer.Context, flags: list[FieldFlag], values: dict[str, Any]) -> dict[str, Any]:
    """The values of the flags the user gave (on the command line or through an environment variable),
    nested by path: `{"steps": 3, "train": {"loss": "gspo"}}`. Flags left at their defaults are left out."""
    given: dict[str, Any] = {}
    for flag in flags:
        source = ctx.get_parameter_source(flag.param)  # an enum of the click that typer runs on
        if source is None or source.name == "DEFAULT":
            continue
        *parents, name = flag.path.split(".")
        target = given
        for part in parents:
            target = target.setdefault(part, {})
        target[name] = flag.value(values[flag.param])
    return given


def flag_for(flags: list[FieldFlag], loc: tuple[Any, ...]) -> str:
    """The flag that sets the field at a validation error's location (`("train", "epsilon")` -> `--epsilon`)."""
    path = ".".join(str(part) for part in loc)
    for flag in flags:
        if path == flag.path or path.startswith(f"{flag.path}."):
            return flag.names[0]
    return _flag_name(path)


def first_sentence(text: str) -> str:
    match = re.match(r"(.*?[.!?])(\s|$)", text, re.S)
    return " ".join((match.group(1) if match else text).split())


def _model_at(root: type[BaseModel], path: str) -> type[BaseModel]:
    model = root
    for part in filter(None, path.split(".")):
        model = model.model_fields[part].annotation
    return model


def _option_type(annotation: Any) -> Any:
    """The option's type: the field's, without its None (`float | None` -> `float`)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _flag_name(path: str) -> str:
    return "--" + path.replace(".", "-").replace("_", "-")
