"""How the core tables of the configuration are validated: ``[node]``, ``[collector]``,
``[backends]``, ``[groups.NAME]`` and ``[[rules]]`` (the consumers' tables validate their own
keys through :meth:`allsmi.config.Config.section`).

:mod:`allsmi.config` finds and reads the file and imports this module only when there is one
to validate (most runs have none).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from allsmi.config import (BILL_BY, CONSUMER_SECTIONS, DEFAULT_GROUP, HISTORY_RANGE,
                           INTERVAL_RANGE, MAX_BUDGET, MAX_GCO2E_PER_KWH, MAX_PRICE,
                           PARTITION_BILLING, RESERVED_LABELS, RULE_KEYS, TIMEOUT_RANGE, Config,
                           ConfigError, GroupRule, ResourceGroup, group_name_problem)
from allsmi.config.currencies import currency_problem
from allsmi.schema.numbers import MAX_INDEX, range_text, setting_number, whole_setting

if TYPE_CHECKING:
    from allsmi.support.tomlkeys import KeyLocator

_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"  # the whole key (re.fullmatch: never "team\n")


class TableValidator:
    """Validates the core tables of a parsed config file (``data``, as ``tomllib`` reads it);
    each problem raises :class:`ConfigError` naming ``path``, the line (from ``locator``) and the
    key."""

    def __init__(self, data: dict[str, Any], path: Path | None, locator: KeyLocator) -> None:
        self.data, self.path, self.locator = data, path, locator

    def fail(self, message: str, *key_path: str | int) -> ConfigError:
        """The :class:`ConfigError` of ``key_path`` (table keys, and array indexes as ints)."""
        keys = tuple(str(k) for k in key_path)  # an int is an array's index; a str a table's key
        shown = ".".join(f"[{k + 1}]" if isinstance(k, int) else k for k in key_path)
        return ConfigError(message, self.path, self.locator.find(keys), shown.replace(".[", "["),
                           keys)

    def table(self, value: Any, *key_path: str | int) -> dict[str, Any]:
        """``value`` if it is a table."""
        if not isinstance(value, dict):
            raise self.fail("must be a table", *key_path)
        return value

    def number(self, value: Any, *key_path: str | int, minimum: float = 0.0,
               allow_zero: bool = True, maximum: float | None = None) -> float:
        """``value`` as a float, if it is a finite number within the bounds."""
        number = setting_number(value)  # (a huge integer: out of range below)
        if number is None:
            raise self.fail(f"must be a number {range_text(minimum, maximum, allow_zero)}, "
                            f"got {value!r}", *key_path)
        if value < minimum or (not allow_zero and value == 0) \
                or (maximum is not None and value > maximum):
            raise self.fail(f"must be a number {range_text(minimum, maximum, allow_zero)}, "
                            f"got {value!r}", *key_path)
        return number

    def string(self, value: Any, *key_path: str | int) -> str:
        """``value`` stripped, if it is a string that is not blank."""
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"must be a non-empty string, got {value!r}", *key_path)
        return value.strip()

    def unknown(self, table: Mapping[str, Any], allowed: tuple[str, ...], *key_path: str | int) -> None:
        """Fail on the first key of ``table`` not in ``allowed``."""
        for key in table:
            if key not in allowed:
                raise self.fail(f"unknown key (allowed: {', '.join(allowed)})", *key_path, key)

    def config(self) -> Config:
        """The whole :class:`Config` (its key locator left to :func:`allsmi.config.config_problems`)."""
        top_allowed = ("node", "collector", "backends", "groups", "rules") + CONSUMER_SECTIONS
        self.unknown(self.data, top_allowed)
        node = self.table(self.data.get("node", {}), "node")
        self.unknown(node, ("resource_group",), "node")
        default_group = self.group_name(self.string(node.get("resource_group", DEFAULT_GROUP),
                                                    "node", "resource_group"),
                                        "node", "resource_group")

        coll = self.table(self.data.get("collector", {}), "collector")
        self.unknown(coll, ("interval_seconds", "backend_timeout_seconds", "history_size"), "collector")
        interval = self.number(coll.get("interval_seconds", 2.0), "collector", "interval_seconds",
                               minimum=INTERVAL_RANGE[0], maximum=INTERVAL_RANGE[1])
        timeout = self.number(coll.get("backend_timeout_seconds", 5.0), "collector",
                              "backend_timeout_seconds", minimum=TIMEOUT_RANGE[0],
                              maximum=TIMEOUT_RANGE[1])
        history = self.number(coll.get("history_size", 300), "collector", "history_size",
                              minimum=HISTORY_RANGE[0], maximum=HISTORY_RANGE[1])
        whole = whole_setting(coll.get("history_size", 300))
        if whole is None:
            raise self.fail(f"must be a whole number, got {coll['history_size']!r}",
                            "collector", "history_size")
        history = whole

        backends = self.table(self.data.get("backends", {}), "backends")
        enabled: tuple[str, ...] | None = None
        options: dict[str, dict[str, Any]] = {}
        for key, value in backends.items():
            if key == "enabled":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise self.fail("must be a list of backend names", "backends", "enabled")
                enabled = tuple(value)
            else:
                options[key] = self.table(value, "backends", key)

        groups = self.groups()
        rules = self.rules()

        sections = {}
        for name in CONSUMER_SECTIONS:
            if name in self.data:
                sections[name] = self.table(self.data[name], name)
        return Config(path=self.path, default_group=default_group, rules=tuple(rules),
                      groups=groups, interval_seconds=interval, backend_timeout_seconds=timeout,
                      history_size=history, backends_enabled=enabled, backend_options=options,
                      sections=sections)

    def groups(self) -> dict[str, ResourceGroup]:
        """The ``[groups.NAME]`` tables."""
        groups: dict[str, ResourceGroup] = {}
        for name, raw in self.table(self.data.get("groups", {}), "groups").items():
            self.group_name(name, "groups", name)
            groups[name] = self.group(name, self.table(raw, "groups", name))
        return groups

    def group_name(self, name: str, *path: str | int) -> str:
        """``name`` when a device's group can be called so: a sample's group is cleaned text
        (:func:`allsmi.schema.text.clean_text`), so a name with control or bidirectional characters,
        or over its length, would never be matched by its prices, labels or budget."""
        problem = group_name_problem(name)
        if problem:
            raise self.fail(problem, *path)
        return name

    def rules(self) -> list[GroupRule]:
        """The ``[[rules]]`` tables, in order."""
        rules_raw = self.data.get("rules", [])
        if not isinstance(rules_raw, list):
            raise self.fail("must be an array of tables ([[rules]])", "rules")
        rules = []
        for i, raw in enumerate(rules_raw):
            rule = self.table(raw, "rules", i)
            self.unknown(rule, ("resource_group",) + RULE_KEYS, "rules", i)
            if "resource_group" not in rule:
                raise self.fail("missing key 'resource_group'", "rules", i)
            group = self.group_name(self.string(rule["resource_group"], "rules", i,
                                                "resource_group"), "rules", i, "resource_group")
            patterns = {}
            for key in RULE_KEYS:
                if key in rule:
                    value = rule[key]
                    if key == "index" and not isinstance(value, str):
                        index = whole_setting(value)
                        if index is None or not 0 <= index <= MAX_INDEX:
                            raise self.fail(f"must be a device index (0 to {MAX_INDEX}, whole) or a "
                                            f"glob, got {value!r}", "rules", i, key)
                        value = str(index)
                    patterns[key] = self.string(value, "rules", i, key)
            if not patterns:
                raise self.fail(f"a rule needs at least one of {', '.join(RULE_KEYS)}", "rules", i)
            rules.append(GroupRule(group, patterns, self.locator.find(("rules", str(i)))))
        return rules

    def group(self, name: str, raw: dict[str, Any]) -> ResourceGroup:
        """The ``[groups.NAME]`` table ``raw`` of group ``name``."""
        self.unknown(raw, ("labels", "price_per_device_hour", "price_per_kwh", "currency",
                           "partition_billing", "bill_by", "grid_gco2e_per_kwh",
                           "budget_per_month"), "groups", name)
        labels_raw = self.table(raw.get("labels", {}), "groups", name, "labels")
        labels: dict[str, str] = {}
        for key, value in labels_raw.items():
            if not re.fullmatch(_LABEL_NAME, key) or key.startswith("__") or key in RESERVED_LABELS:
                raise self.fail("label names must match [a-zA-Z_][a-zA-Z0-9_]*, not start with '__' "
                                "and not be one of allsmi's own labels", "groups", name, "labels", key)
            if not isinstance(value, (str, int, float)) or isinstance(value, bool) \
                    or (isinstance(value, float) and not math.isfinite(value)):
                raise self.fail("label values must be strings (a finite number is taken as "
                                f"its text), got {value!r}", "groups", name, "labels", key)
            if group_name_problem(str(value)):  # shown and exported as devices' labels are
                raise self.fail("label values must be printable text of at most 256 "
                                "characters (no control, bidirectional or format characters but "
                                "the zero-width joiner and non-joiner)",
                                "groups", name, "labels", key)
            labels[key] = str(value)
        prices: dict[str, float | None] = {}
        for key in ("price_per_device_hour", "price_per_kwh"):
            prices[key] = self.number(raw[key], "groups", name, key, maximum=MAX_PRICE) \
                if key in raw else None
        billing = self.string(raw.get("partition_billing", "share"), "groups", name,
                              "partition_billing")
        if billing not in PARTITION_BILLING:
            raise self.fail(f"must be one of {', '.join(PARTITION_BILLING)}, got {billing!r}",
                            "groups", name, "partition_billing")
        bill_by = self.string(raw.get("bill_by", "allocated"), "groups", name, "bill_by")
        if bill_by not in BILL_BY:
            raise self.fail(f"must be one of {', '.join(BILL_BY)}, got {bill_by!r}",
                            "groups", name, "bill_by")
        carbon = self.number(raw["grid_gco2e_per_kwh"], "groups", name, "grid_gco2e_per_kwh",
                             maximum=MAX_GCO2E_PER_KWH) if "grid_gco2e_per_kwh" in raw else None
        currency = None
        if "currency" in raw:
            currency = self.string(raw["currency"], "groups", name, "currency").upper()
            problem = currency_problem(currency)
            if problem:
                raise self.fail(problem, "groups", name, "currency")
        if (prices["price_per_device_hour"] is not None or prices["price_per_kwh"] is not None) \
                and currency is None:
            raise self.fail("a group with prices needs a currency", "groups", name)
        budget = self.number(raw["budget_per_month"], "groups", name, "budget_per_month",
                             maximum=MAX_BUDGET) if "budget_per_month" in raw else None
        if budget is not None and currency is None:
            raise self.fail("a group with a budget needs a currency", "groups", name)
        return ResourceGroup(name, labels, prices["price_per_device_hour"], prices["price_per_kwh"],
                             currency, billing, bill_by, carbon, budget)
