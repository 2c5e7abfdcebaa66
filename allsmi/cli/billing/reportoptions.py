"""The options every usage report takes (``allsmi export``, ``idle``, ``waste`` and ``report``):
the source, the window and the grouping, as one decorator (:func:`source_options`).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

from allsmi.accounting.periods import PERIODS_HELP
from allsmi.accounting.settings import EXPORT_TIMEOUT_RANGE
from allsmi.cli.common import finite
from allsmi.cli.numbertype import DecimalRange

_F = TypeVar("_F", bound=Callable[..., Any])

#: The options of every usage report (``export`` and ``idle``): the source, the window and the
#: grouping.
SOURCE_OPTIONS = [
    click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
                  help="Ledger file to read (default: $ALLSMI_LEDGER, ledger.path, "
                       "$XDG_STATE_HOME/allsmi/ledger.db or /var/lib/allsmi/ledger.db for root)."),
    click.option("--prometheus", "prometheus_url", metavar="URL", default=None,
                  help="Compute the export with PromQL from this Prometheus server instead, "
                       "http[s]://[user:password@]host:port[/path] (config: export.prometheus)."),
    click.option("--prometheus-user", metavar="USER", default=None,
                  help="Basic-auth user for Prometheus; the password is read from "
                       "--prometheus-password-file (config: export.prometheus_user)."),
    click.option("--prometheus-password-file", metavar="FILE", default=None,
                  help="File holding the basic-auth password (one line; "
                       "config: export.prometheus_password_file)."),
    click.option("--prometheus-bearer-token-file", metavar="FILE", default=None,
                  help="File holding a bearer token sent as 'Authorization: Bearer' "
                       "(config: export.prometheus_bearer_token_file)."),
    click.option("--ca-file", "--prometheus-ca-file", "prometheus_ca_file", metavar="FILE", default=None,
                  help="PEM file of the CA(s) that signed Prometheus' TLS certificate, trusted "
                       "instead of the system's CAs (config: export.prometheus_ca_file; default: "
                       "the system's CAs)."),
    click.option("--period", metavar="PERIOD", default=None,
                  help=f"{PERIODS_HELP[0].upper()}{PERIODS_HELP[1:]}."),
    click.option("--since", metavar="TIME", default=None,
                  help="Window start, ISO 8601 (e.g. 2026-03-01 or 2026-03-01T06:00:00Z)."),
    click.option("--until", metavar="TIME", default=None,
                  help="Window end (exclusive), ISO 8601; default: the start of the "
                       "current minute (the minute in progress is not billed)."),
    click.option("--tz", "tz_name", metavar="ZONE", default=None,
                  help="Time zone of periods and of times without an offset (default UTC; "
                       "config: export.tz)."),
    click.option("--group-by", "group_by", metavar="KEYS", default=None,
                  help="Comma-separated: resource_group, vendor, model, host, user, namespace, "
                       "pod, job (default: export resource_group,vendor,model,host; idle "
                       "resource_group,user,namespace,pod,job, without user from Prometheus; "
                       "Prometheus knows users from exporters run with --processes)."),
    click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                  help="Config file (prices, groups, [ledger], [export] and [export.focus] tables)."),
    click.option("--timeout", "timeout", type=DecimalRange(*EXPORT_TIMEOUT_RANGE),
                  default=None, callback=finite,
                  help=f"Seconds each whole Prometheus query may take, connecting and reading "
                       f"included ({EXPORT_TIMEOUT_RANGE[0]:g} to {EXPORT_TIMEOUT_RANGE[1]:g}, "
                       f"default 30; config: export.timeout_seconds)."),
    click.option("--allow-partial", "allow_partial", is_flag=True, default=False,
                  help="Accept answers the server marks partial (warnings or isPartial, as "
                       "Thanos, Mimir and VictoriaMetrics cluster give with a store down): the "
                       "file is written, the warnings are named, and its coverage is lowered "
                       "to 0 (exit status 3). Without it a partial answer fails the export."),
    click.option("--no-rollups", "no_rollups", is_flag=True, default=False,
                  help="Bill from Prometheus' raw counters even where the hourly roll-ups of "
                       "deploy/prometheus/allsmi-rules.yml exist (to check them against each "
                       "other; slower over long periods)."),
    click.option("--simulate", metavar="SCENARIO", default=None,
                  help="Bill a simulated node instead: replay the scenario over the window (up to "
                       "now) into a temporary ledger and export that."),
    click.option("--verbose", "-v", "verbose", is_flag=True, default=False,
                  help="Say on stderr how long the work took (progress is shown on stderr "
                       "whenever it is a terminal)."),
]


def source_options(func: _F) -> _F:
    """Apply :data:`SOURCE_OPTIONS` (in their order) to a click command function."""
    for option in reversed(SOURCE_OPTIONS):
        func = option(func)
    return func
