"""The Xid catalog: what each Xid the driver reports means, what NVIDIA says to do, and gpufleet's rule.

The meanings and NVIDIA's *Resolution Bucket (Immediate Action)* come from NVIDIA's Xid catalog
(docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with the Xid Catalog", Ampere and later;
the legacy "Xid Errors" guide for the Xids that catalog marks unused, such as 61). gpufleet's rule
says whether the Xid alone marks the GPU unhealthy (its index goes into
``gpufleet.dev/unhealthy-gpus``), and whether it counts toward the storm rule
(:mod:`gpufleet.agent.health.machine`): an application Xid repeated on one GPU beyond a threshold
marks it, because a failing GPU surfaces as "application" faults in every job that lands on it.

The principle of the rule: an Xid marks the GPU when NVIDIA's action is to reset the GPU or reboot
the node (nothing the application does clears it, and the next job placed there fails too); it does
not mark when the action is to restart the application or to ignore it (the GPU stays usable, the
fault follows the program). An Xid not in this catalog is reported and does not mark the GPU: the
driver adds Xids with each branch, most new ones are informational or per-engine application faults,
and taking a GPU out of service on a number we cannot interpret would let one driver update drain a
fleet; a failing GPU also raises the ECC, remap or bus signals, which do mark it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

__all__ = ["XID_CATALOG", "XidAction", "XidRule", "xid_rule"]


class XidAction(Enum):
    """NVIDIA's immediate action for an Xid, by class (the catalog's resolution buckets)."""

    IGNORE = "ignore"  # IGNORE: informational, nothing to do
    RESTART_APPLICATION = "restart the application"  # RESTART_APP: the application's fault, the GPU is usable
    RESET_GPU = "reset the GPU"  # RESET_GPU, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR: a reset (or reboot) clears it
    REBOOT_NODE = "reboot the node"  # RESTART_BM: nothing short of a reboot brings the GPU back
    FOLLOW_RELATED_XID = "follow the related Xid"  # XID_154, WORKFLOW_XID_45: it summarises another Xid
    UNKNOWN = "unknown"  # not in gpufleet's catalog


@dataclass(frozen=True, slots=True)
class XidRule:
    """One Xid: NVIDIA's meaning and action, and gpufleet's rule for it (``why`` says why)."""

    xid: int
    mnemonic: str  # the catalog's mnemonic, e.g. ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
    meaning: str  # the catalog's description, e.g. "GPU has fallen off the bus"
    nvidia_action: str  # the catalog's immediate-action bucket, verbatim, e.g. "RESTART_BM"
    action: XidAction
    marks_unhealthy: bool
    counts_toward_storm: bool
    why: str

    def reason(self) -> str:
        """One line for a Node Event or condition: the Xid, its meaning and the action it calls for."""
        return f"Xid {self.xid}: {self.meaning}; action: {self.action.value}"


def _rule(xid: int, mnemonic: str, meaning: str, nvidia_action: str, action: XidAction, *,
          marks: bool, storm: bool, why: str) -> XidRule:
    return XidRule(xid, mnemonic, meaning, nvidia_action, action, marks, storm, why)


_APP = XidAction.RESTART_APPLICATION
_RESET = XidAction.RESET_GPU

_RULES = (
    _rule(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", _APP,
          marks=False, storm=True,
          why="a channel timed out; NVIDIA restarts the application, the GPU stays usable"),
    _rule(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP", _APP,
          marks=False, storm=True,
          why="almost always the program (out-of-range access, illegal instruction); rarely hardware, "
              "which the storm rule catches"),
    _rule(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", _APP,
          marks=False, storm=True,
          why="an illegal address in the program (MMU fault); rarely the driver or hardware"),
    _rule(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE",
          XidAction.IGNORE, marks=False, storm=True,
          why="the driver reset a faulting application's channel; the GPU keeps working"),
    _rule(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors",
          "WORKFLOW_XID_45", XidAction.FOLLOW_RELATED_XID, marks=False, storm=False,
          why="logged whenever a GPU process is killed or cleaned up after another Xid (gpufleet's own "
              "evictions cause it): the other Xid carries the rule, so it is not counted toward a storm"),
    _rule(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing (GPU timeout)", "RESET_GPU", _RESET,
          marks=True, storm=False, why="NVIDIA resets the GPU: the next job would fail too"),
    _rule(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", _RESET,
          marks=True, storm=False,
          why="an uncorrectable memory error; NVIDIA: a GPU reset or node reboot is needed to clear it"),
    _rule(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning",
          "none listed (legacy guide: hardware or driver error)",
          _RESET, marks=True, storm=False,
          why="Volta and older (the Ampere catalog lists it unused): the GPU's PMU firmware hit an "
              "unexpected state, a hardware or driver cause, never the application; treated as Xid 62"),
    _rule(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU", _RESET,
          marks=True, storm=False, why="the GPU's micro-controller halted; only a reset restarts it"),
    _rule(63, "INFOROM_DRAM_RETIREMENT_EVENT", "ECC page retirement or row remapping recording event",
          "IGNORE", XidAction.IGNORE, marks=False, storm=False,
          why="the GPU protected itself (a page retired or a row remapped); reported, and the retired-page "
              "and row-remap readings judge the memory"),
    _rule(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "ECC page retirement or row remapping recording failure",
          "RESET_GPU", _RESET, marks=True, storm=False,
          why="the GPU could not retire or remap failing memory: the memory is not trustworthy"),
    _rule(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 (video decoder) exception", "RESTART_APP", _APP,
          marks=False, storm=True, why="a video-decoder fault of the application"),
    _rule(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", _APP,
          marks=False, storm=True, why="an application or CUDA-runtime fault (CHECK_APP/CUDA)"),
    _rule(74, "NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR", _RESET,
          marks=True, storm=False,
          why="a link to another GPU or NVSwitch failed; NVIDIA: a GPU reset or node reboot is needed, and "
              "gangs across that link would hang"),
    _rule(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM",
          XidAction.REBOOT_NODE, marks=True, storm=False,
          why="the GPU is gone from PCIe; only a node reboot (or a repair) brings it back"),
    _rule(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", XidAction.IGNORE,
          marks=False, storm=False,
          why="single-bit errors are corrected; reported so operators see the trend, and the retired-page "
              "and row-remap readings mark the GPU once the memory is really failing"),
    _rule(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained ECC error", "RESTART_APP", _APP,
          marks=False, storm=True,
          why="the error was contained to one application, the page is offlined and the GPU stays usable; "
              "repeated ones (degrading memory) trip the storm rule"),
    _rule(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained ECC error", "RESET_GPU", _RESET,
          marks=True, storm=False, why="every application on the GPU is affected; NVIDIA resets the GPU"),
    _rule(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context switch timeout", "RESET_GPU", _RESET,
          marks=True, storm=False, why="the GPU could not switch contexts; NVIDIA resets the GPU"),
    _rule(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", "RESET_GPU", _RESET, marks=True, storm=False,
          why="the GPU System Processor stopped answering the driver; the GPU is wedged until reset"),
    _rule(120, "GSP_ERROR", "GSP error", "RESET_GPU", _RESET, marks=True, storm=False,
          why="the GPU System Processor firmware failed; NVIDIA resets the GPU"),
    _rule(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC unrecovered error", "RESET_GPU", _RESET,
          marks=True, storm=False, why="an uncorrectable memory error escaped containment"),
    _rule(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", "XID_154",
          XidAction.FOLLOW_RELATED_XID, marks=False, storm=False,
          why="it summarises the recovery an accompanying Xid needs (None, Drain P2P, Drain and Reset, GPU "
              "Reset Required, Node Reboot Required); that Xid carries the rule here, and the action text "
              "is not in the event NVML delivers"),
)

XID_CATALOG: Mapping[int, XidRule] = MappingProxyType({rule.xid: rule for rule in _RULES})


def xid_rule(xid: int) -> XidRule:
    """The rule for ``xid``; an Xid not in the catalog is reported and does not mark the GPU (see the
    module docstring for why)."""
    known = XID_CATALOG.get(xid)
    if known is not None:
        return known
    return XidRule(xid, "UNKNOWN", "not in gpufleet's Xid catalog", "UNKNOWN", XidAction.UNKNOWN,
                   marks_unhealthy=False, counts_toward_storm=False,
                   why="reported so an operator can look it up; the GPU is not marked on a number gpufleet "
                       "cannot interpret")
