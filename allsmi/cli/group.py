"""The click group behind ``allsmi`` (everything but the start-up fast path)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import click

from allsmi import __version__
from allsmi.cli.common import clip_message, common_options, dashboard_options, fail, refuse_empty
from allsmi.cli.main import COMMANDS

EPILOG = """\b
Examples:
  allsmi --simulate mixed                    live dashboard of a simulated mixed node
  allsmi snapshot --format json              one snapshot as JSON (for scripts and cron)
  allsmi snapshot --simulate mixed --format csv --output devices.csv
  allsmi doctor                              which vendors were found, and why not
  allsmi serve --listen 127.0.0.1:9477       Prometheus endpoint
  allsmi export --ledger /var/lib/allsmi/ledger.db --period yesterday
"""


def _available(name: str) -> bool:
    module = COMMANDS[name].split(":")[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class LazyGroup(click.Group):
    """Resolves subcommands from :data:`COMMANDS` only when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if _available(name)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS or not _available(cmd_name):
            return None
        module, attr = COMMANDS[cmd_name].split(":")
        return refuse_empty(getattr(importlib.import_module(module), attr))

    # A usage error (a bad value of an option of the group or of a command) is shown with each
    # value it echoes cut to a readable length (allsmi.schema.text.clipped).
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.ClickException as exc:
            raise clip_message(exc)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise clip_message(exc)


@click.group(cls=LazyGroup, invoke_without_command=True, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="allsmi")
@common_options
@dashboard_options
@click.pass_context
def cli(ctx: click.Context, theme: str | None, sort: str | None, **_: Any) -> None:
    """allsmi: one monitor for AMD, AWS Neuron, Furiosa, Google TPU, Huawei Ascend, Intel,
    NVIDIA, Rebellions and Tenstorrent accelerators.

    With no command, opens the live dashboard (it takes the dashboard's options, e.g.
    --theme and --sort, as 'allsmi view' does).
    """
    if ctx.invoked_subcommand is not None:
        if ctx.invoked_subcommand != "view":
            given = [flag for flag, value in (("--theme", theme), ("--sort", sort)) if value is not None]
            if given:
                verb = "apply" if len(given) > 1 else "applies"
                raise fail(f"{' and '.join(given)} {verb} to the dashboard ('allsmi' or 'allsmi view'), "
                           f"not to 'allsmi {ctx.invoked_subcommand}'")
        return
    if _available("view"):
        from allsmi.cli.view import dashboard_default
        ctx.invoke(dashboard_default, theme=theme, sort=sort)
    else:
        ctx.invoke(LazyGroup.get_command(cli, ctx, "snapshot"), output_format="table")  # type: ignore[arg-type]


refuse_empty(cli)
