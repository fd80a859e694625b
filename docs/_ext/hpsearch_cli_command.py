"""The ``cli-commands`` directive: every command of ``hpsearch`` with its arguments and
options, from the typer app itself (typer's own click, which sphinx-click does not read)."""

from __future__ import annotations

from typing import Any

from hpsearch_reference import _cell, _Generated, _list_table


def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    out = []
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix} {name}"
        out.append((path, command))
        if hasattr(command, "commands"):
            out += _commands(command, path)
    return out


def _param_row(param: Any) -> tuple[str, str, str]:
    names = ", ".join(f"``{o}``" for o in [*param.opts, *param.secondary_opts])
    if param.param_type_name == "argument":
        names = f"``{param.name.upper()}``"
    default = param.default
    if param.required:
        shown = "required"
    elif default is None or default is False or callable(default):
        shown = " "
    else:
        shown = f"``{default}``"
    return names, shown, _cell(param.help or "")


class CliCommands(_Generated):
    def rst(self) -> list[str]:
        import typer.main

        from hpsearch.cli import app

        root = typer.main.get_command(app)
        lines: list[str] = []
        for path, command in [("hpsearch", root), *_commands(root, "hpsearch")]:
            title = f"``{path}``"
            lines += [title, "-" * (len(title) + 4), ""]
            lines += [(command.help or "").strip(), ""]
            if command.epilog:
                lines += [command.epilog.strip(), ""]
            rows = [_param_row(p) for p in command.params if p.name != "help"]
            if rows:
                lines += _list_table(("argument / option", "default", "what"), rows, "30 15 55")
        return lines


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("cli-commands", CliCommands)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
