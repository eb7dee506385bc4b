"""rdmascope: millisecond RDMA port-counter capture and analysis for multi-node LLM inference.

Packages (dependencies run one way: sampler -> capture format -> analysis -> figures/report -> CLI):

- ``rdmascope.capture``: the one module that owns the on-disk capture format (schema, version,
  metadata keys, writer and validating reader).
- ``rdmascope.models``: served models (presets, Hugging Face config.json, dense and MoE) and
  setups (TP size, nodes, links of runs A and B), with bytes per token under TP and EP.
- ``rdmascope.sampler``: the 1 ms counter sampling daemon (no pandas/matplotlib).
- ``rdmascope.emulator``: the ConnectX-7 twin emulator (traffic model, live sysfs tree, simulate).
- ``rdmascope.analysis``: loading, re-binning, peaks, bursts, attribution, estimate, figures, report.
- ``rdmascope.cli``: the ``rdmascope`` command.
"""

__version__ = "0.1.0"
