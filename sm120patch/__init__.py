"""sm120patch: widen SGLang's FlashInfer allreduce-fusion gates to SM120 Blackwell."""

__version__ = "0.3.0"

#: The sglang releases sm120patch patches (older ones are refused; newer ones are checked by
#: structure like any other), as ``--version`` says.
FIRST_SUPPORTED = "0.5.4"
LAST_KNOWN = "0.5.23"
