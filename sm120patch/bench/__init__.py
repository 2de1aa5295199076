"""``sm120patch bench kernel``: does FlashInfer's fused allreduce + RMSNorm pay on this host?

The pipeline: ``mirror`` reads how the installed sglang calls the kernel; ``measure`` asks
the serving interpreter what it has (``probes/bench_rank.py probe``), refuses what cannot
run, and starts one rank per GPU under ``launch``'s watchdog; ``verdict`` turns the rows
into advice; ``render`` prints them (rich table, JSON, plot).
"""
