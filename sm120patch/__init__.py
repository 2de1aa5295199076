"""sm120patch: widen SGLang's FlashInfer allreduce-fusion gates to SM120 Blackwell."""

__version__ = "0.3.0"
