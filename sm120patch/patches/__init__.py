"""The patch registry: one module per patch (installed as ``sm120patch.patches``)."""
