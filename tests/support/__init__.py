"""What the tests, ``scripts/`` and ``benchmarks/`` share (no tests here).

* ``realtrees``: real sglang releases, pip-installed and cached; ``run_cycle``; the
  independent ``ast`` comparison; serving venvs.
* ``mini_sglang``: the miniature release the fast tier runs the whole tool on.
* ``sglang_exec``: sglang's own functions taken from a real release and executed.
* ``fakes``: fakes of what lies outside Python (``nvidia-smi``, torch, a FlashInfer install).
* ``faultsuite`` and ``faulty_cli``: fault injection into the write path.
* ``cli``: running sm120patch in-process or in a new process, and reading what it did.
* ``hand_fix``: the ``sed`` hand fix that sm120patch replaces, and its ``grep`` check.
* ``patch_checks``: what the tests of the patches share (every example, the eras of the
  release matrix, the pieces of generated variants).
"""
