"""The two forms of the widened model auto-enable (``apply --auto-enable-tp 2|any``), in the
words the patch ends its applied finding with and the commands read back (no libcst here:
a trusted tree's reports are read without it)."""

from __future__ import annotations

TP2 = "2"  # the default: the one TP no report has fusion losing at on PCIe SM12x
ANY = "any"  # every TP, as sglang does on SM90 / SM100
CHOICES = (TP2, ANY)
SAFE_TP = 2
AT_TP2 = "auto-enable on SM12x at TP 2 only"
AT_ANY = "auto-enable on SM12x at any TP"
