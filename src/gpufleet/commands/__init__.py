"""The sub-commands of ``gpufleet``, one module per command, and the one registry of them.

``COMMANDS`` maps each command as typed after ``gpufleet`` to the ``"module:attribute"`` of its click
command; every group (the root in ``gpufleet.cli``, ``simulate``) lists the entries one word below its
own (see :func:`subcommands`) and imports a module only when its command runs, so that
``gpufleet replay`` starts without the controller's, the webhook's or the simulator's imports.
Adding a command is one line here; this module imports nothing, to keep it so.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["COMMANDS", "subcommands"]

COMMANDS: Mapping[str, str] = {
    "replay": "gpufleet.commands.replay:replay",
    "bench": "gpufleet.commands.bench:bench",
    "simulate": "gpufleet.commands.simulate:simulate",
    "simulate run": "gpufleet.commands.simulate_run:run",
    "simulate fill": "gpufleet.commands.simulate_fill:fill",
    "snapshot": "gpufleet.commands.cluster_tools:snapshot",
    "explain": "gpufleet.commands.cluster_tools:explain",
    "manifests": "gpufleet.commands.manifests:manifests",
    "controller": "gpufleet.commands.controller:controller",
    "webhook": "gpufleet.commands.webhook:webhook",
    "policy": "gpufleet.commands.policy:policy",
    "policy check": "gpufleet.commands.policy_check:check",
    "device-plugin": "gpufleet.commands.device_plugin:device_plugin",
    "agent": "gpufleet.commands.agent:agent",
    "gpu": "gpufleet.commands.gpu:gpu",
    "gpu uncordon": "gpufleet.commands.gpu:uncordon",
    "gpu list": "gpufleet.commands.gpu:list_gpus",
    "report": "gpufleet.commands.report:report",
    "report usage": "gpufleet.commands.report_usage:usage",
    "report idle": "gpufleet.commands.report_idle:idle",
    "admin": "gpufleet.commands.admin:admin",
    "admin reclaim": "gpufleet.commands.admin:reclaim",
    "admin priority": "gpufleet.commands.admin:priority",
    "admin drain": "gpufleet.commands.admin:drain",
    "dashboard": "gpufleet.commands.dashboard:dashboard",
}


def subcommands(group: str = "") -> dict[str, str]:
    """The registry's entries one word below ``group`` ("" is ``gpufleet`` itself): name -> "module:attribute"."""
    prefix = f"{group} " if group else ""
    below = {path.removeprefix(prefix): target for path, target in COMMANDS.items() if path.startswith(prefix)}
    return {name: target for name, target in below.items() if " " not in name}
