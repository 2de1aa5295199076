"""``sm120patch bench server``: sglang's own answer, from its offline benchmark.

The pipeline: ``flags`` picks the options that turn fusion on and off in this release;
``config`` gives the model (the user's config.json, or a small bundled Llama-shaped one,
always with random weights); ``launch`` runs ``bench_one_batch`` once under a watchdog,
with ``remote/server_hook.py`` counting the fused calls in every process; ``parse`` reads
the latencies it prints and the lines that say fusion fell back; ``driver`` runs off and on
``--repeat`` times each; ``verdict`` and ``render`` say what it means.
"""
