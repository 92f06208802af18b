"""The SoC versions ``--soc-version`` / ``soc_config`` / ``$SOC_VERSION`` may name.

ATC compiles for one SoC and fails late, after the whole model is converted, on a name it does
not know. The names CANN knows are those of its platform files,
``<toolkit>/compiler/data/platform_config/<SoC>.ini`` (``<toolkit>/data/platform_config`` in
some layouts): with a toolkit installed they are the list. Without one, :data:`KNOWN_SOC_VERSIONS`
stands in: the SoC names of CANN 7/8 for the Ascend 310, 310B, 310P, 610 and 910 families (the
``Name`` of ``npu-smi info`` prefixed with ``Ascend``), as the Ascend Extension for PyTorch
(``torch_npu``) and CANN's documentation list them.
"""

import difflib
import glob
import os

from npu_adapter.errors import NpuConfigError

__all__ = ["KNOWN_SOC_VERSIONS", "check_soc_version", "known_soc_versions", "soc_problem"]

KNOWN_SOC_VERSIONS = (
    "Ascend310", "Ascend310B1", "Ascend310B2", "Ascend310B3", "Ascend310B4",
    "Ascend310P1", "Ascend310P2", "Ascend310P3", "Ascend310P4", "Ascend310P5", "Ascend310P7",
    "Ascend610", "Ascend610Lite", "Ascend615",
    "Ascend910", "Ascend910A", "Ascend910B", "Ascend910ProA", "Ascend910ProB",
    "Ascend910PremiumA", "Ascend910B1", "Ascend910B2", "Ascend910B2C", "Ascend910B3",
    "Ascend910B4", "Ascend910B4-1", "Ascend910_9361", "Ascend910_9362", "Ascend910_9372",
    "Ascend910_9381", "Ascend910_9382", "Ascend910_9391", "Ascend910_9392",
)
"""The SoC versions known without a CANN toolkit to ask."""

_CUTOFF = 0.85  # Ascend91OB1 -> Ascend910B1 (0.91); Ascend999 -> nothing
_PLATFORM_DIRS = ("compiler/data/platform_config", "data/platform_config",
                  "*-linux/data/platform_config")


def known_soc_versions(toolkit_home=None):
    """``(names, source)``: the SoC versions of the toolkit at ``toolkit_home`` (its
    ``platform_config/*.ini``), else :data:`KNOWN_SOC_VERSIONS`."""
    if toolkit_home:
        for pattern in _PLATFORM_DIRS:
            for folder in sorted(glob.glob(os.path.join(toolkit_home, pattern))):
                names = sorted(os.path.splitext(name)[0] for name in os.listdir(folder)
                               if name.endswith(".ini"))
                if names:
                    return tuple(names), folder
    return KNOWN_SOC_VERSIONS, "npu-adapter's list, as no CANN platform_config was found"


def soc_problem(soc, toolkit_home=None):
    """None when ``soc`` is a SoC version CANN knows, else what is allowed (with the near
    miss): ``did you mean Ascend910B1? known: Ascend310, ... (from <where the list is from>)``."""
    names, source = known_soc_versions(toolkit_home)
    if soc in names:
        return None
    close = difflib.get_close_matches(str(soc), names, n=1, cutoff=_CUTOFF)
    hint = f"did you mean {close[0]}? " if close else ""
    return (f"{hint}known: {', '.join(names)} (from {source}; the Name of `npu-smi info` "
            "prefixed with 'Ascend')")


def check_soc_version(soc, option="soc_config", toolkit_home=None):
    """``soc`` when it is a SoC version CANN knows; else :class:`NpuConfigError` on
    ``option`` naming the near miss and every known version."""
    problem = soc_problem(soc, toolkit_home)
    if problem:
        raise NpuConfigError(option, soc, "a SoC version CANN knows", detail=problem)
    return soc
