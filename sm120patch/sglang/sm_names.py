"""The names of sglang's SM-capability tests, readable without a parser.

``sm_terms`` matches them in libcst's tree (the patches), ``plan/gate_sweep`` in the standard
library's (the sweep of the whole package, which must stay cheap): both take the names from
here, so a new spelling of a name is one change.
"""

from __future__ import annotations

import re

#: ``is_sm100_supported()``, ``is_blackwell()``: a helper called without arguments.
HELPER_NAME = re.compile(r"^is_(sm\d+|blackwell)(?:_supported)?$")
#: ``_is_sm100_supported``: a module's cached flag.
FLAG_NAME = re.compile(r"^_is_(sm\d+|blackwell)(?:_supported)?$")
#: ``get_platform().is_sm100``: an attribute of the platform object (0.5.19+).
PLATFORM_ATTR = re.compile(r"^is_(sm\d+|blackwell)$")
PLATFORM_CALL = "get_platform"

#: Architectures whose SM term already admits SM12x (12.0 and 12.1).
SM12X_ARCHS = frozenset({"sm120", "sm121", "blackwell"})
#: Architectures a term names as SM120 itself: the terms the patches add are of these.
SM120_ARCHS = frozenset({"sm120", "sm121"})
