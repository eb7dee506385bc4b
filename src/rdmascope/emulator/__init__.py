"""The ConnectX-7 twin emulator: what one DGX Spark node's RDMA counters show under TP inference.

- ``model``: the tensor-parallel traffic model (``simulate(scenario, config, seed) -> Traffic``:
  per-twin cumulative tx/rx bytes as an exact piecewise-linear function of time, and the ground-truth
  request timeline); scenarios ``P1``..``P6``, ``demo``, ``single4k`` (``make_scenario``).
- ``tree``: the emulated Spark sysfs tree (``build_tree``) and the live player (``play``) that
  rewrites its counter files in place at 4 kHz.
- ``serve``: build + play + write the ground truth (``rdmascope simulate serve``).
- ``simcapture``: captures written directly, as if sampled at 1 ms, plus ``requests.jsonl`` and
  ``truth.json`` (``rdmascope simulate capture``; the fixtures).
- ``demo``: ``rdmascope demo`` (live tree -> real ``rdmascope record`` -> ``run_analysis``).
- ``fixtures``: ``python -m rdmascope.emulator.fixtures fixtures/`` regenerates ``fixtures/sim-*``.

Imports nothing at package import time (numpy is imported by the modules that need it).
"""
