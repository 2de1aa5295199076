"""``sm120patch bench kernel``: does FlashInfer's fused allreduce + RMSNorm pay on this host?

The pipeline (``kernel/``): ``sglang/fusion_call.py`` reads how the installed sglang calls
the kernel; ``measure`` asks the serving interpreter what it has (``remote/bench_rank.py
probe``), refuses what cannot run, and starts one rank per GPU under the rank watchdog
(``runner/ranks.py``); ``verdict`` turns the rows into advice; ``render`` prints them (rich
table, JSON, plot); ``saved`` keeps the result for ``apply --fuse-up-to measured``.
``server/`` is ``sm120patch bench server``, and ``fuse_limit`` the limit ``--fuse-up-to`` asks.
"""
