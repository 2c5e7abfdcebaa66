"""The base of backends that read a vendor command-line tool.

:class:`CliToolBackend` holds what those backends share: finding the tool their
:class:`~allsmi.backends._common.toolpath.VendorTool` declares (the override,
``PATH``, the vendor's directories), saying why it is missing, a probe that looks
and runs nothing, the version the tool reported once it has run, and the
:class:`~allsmi.backends._common.runner.Tool` that runs it with the backend's timeout.
Only :mod:`os` and the tool search are imported with it: the runner (``subprocess``,
``selectors``, threads) is imported by the first :meth:`CliToolBackend.tool` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from allsmi.backend_api import Backend, BackendUnavailable, ProbeResult
from allsmi.schema.declarations import VendorDeclaration

from .toolpath import VendorTool

if TYPE_CHECKING:
    from .runner import Tool


class CliToolBackend(Backend):
    """A backend whose data come from running ``tool_spec``'s executable.

    Subclasses set :attr:`tool_spec` and may add to the probe's details
    (:meth:`probe_details`); ``search_dirs`` replaces the declared install
    directories (tests use it to keep a machine's real tools out).
    """

    tool_spec: ClassVar[VendorTool]
    extra_tools: ClassVar[tuple[VendorTool, ...]] = ()
    """Further tools the backend runs beside :attr:`tool_spec` (``neuron-monitor`` beside
    ``neuron-ls``, ``xpu-smi`` beside sysfs): each found the same way (its own override
    variable, ``PATH``, its directories; :meth:`locate_extra`), its variable among ``env_vars``,
    and its path (or why it is missing) in the probe's details as ``tool:<executable>``, which
    ``allsmi doctor`` shows. Whether a missing one makes the vendor unavailable is the
    backend's decision (:meth:`require_extra`), and the fault matrix faults each one."""

    @classmethod
    def declaration(cls) -> VendorDeclaration:
        """The class's declarations, with every tool's override variable among ``env_vars`` and
        the tool's name as the ``interface`` unless the class names one."""
        from dataclasses import replace
        base = super().declaration()
        tools = (cls.tool_spec, *cls.extra_tools)
        env = tuple(dict.fromkeys((*(t.env_var for t in tools), *base.env_vars)))
        return replace(base, env_vars=env, interface=base.interface or cls.tool_spec.executable)

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None,
                 search_dirs: Sequence[str] | None = None) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self.search_dirs: tuple[str, ...] | None = None if search_dirs is None else tuple(search_dirs)
        self.tool_version: str | None = None
        """The version the tool reported about itself in its output, once it has run."""

    def locate_tool(self) -> str | None:
        """The executable to run, or ``None``; looks, runs nothing."""
        return self.tool_spec.find(self.search_dirs)

    def missing_reason(self) -> str:
        """Why :meth:`locate_tool` found nothing, and what to set."""
        return self.tool_spec.missing(self.search_dirs)

    def require_tool(self) -> str:
        """The executable, or :class:`BackendUnavailable` saying why there is none."""
        path = self.locate_tool()
        if path is None:
            raise BackendUnavailable(self.missing_reason())
        return path

    def locate_extra(self, spec: VendorTool) -> str | None:
        """One of :attr:`extra_tools`, or ``None``; looks, runs nothing."""
        return spec.find(self.search_dirs)

    def require_extra(self, spec: VendorTool) -> str:
        """One of :attr:`extra_tools`, or :class:`BackendUnavailable` saying why there is none."""
        path = self.locate_extra(spec)
        if path is None:
            raise BackendUnavailable(spec.missing(self.search_dirs))
        return path

    def probe_details(self, path: str) -> dict[str, str]:
        """What the probe reports besides the tool's path (nothing by default)."""
        return {}

    def quick_probe(self) -> ProbeResult | None:
        """:meth:`probe` itself where it says absent: it only looks for the tool (files and
        ``PATH``), it runs nothing."""
        result = self.probe()
        return None if result.available else result

    def probe(self) -> ProbeResult:
        """Available when the tool is found; runs nothing and never raises."""
        try:
            path = self.locate_tool()
        except Exception as exc:  # noqa: BLE001 - probe never raises; an odd environment is a reason
            return ProbeResult(False, f"cannot look for {self.tool_spec.label}: {exc}")
        if path is None:
            return ProbeResult(False, self.missing_reason())
        details = {"tool": path, **self.probe_details(path)}
        for spec in self.extra_tools:
            try:
                found = self.locate_extra(spec)
            except Exception as exc:  # noqa: BLE001 - probe never raises
                found, why = None, f"cannot look for {spec.label}: {exc}"
            else:
                why = "" if found else spec.missing(self.search_dirs)
            details[f"tool:{spec.executable}"] = found or f"missing: {why}"
        if self.tool_version:
            details["tool_version"] = self.tool_version
        return ProbeResult(True, "", details)

    def tool(self, path: str) -> Tool:
        """``path`` run under this backend's timeout (imports the runner on first use)."""
        from .runner import Tool
        return Tool(path, self.timeout_seconds)
