"""rdmascope: millisecond RDMA port-counter capture and analysis for multi-node LLM inference.

Packages (dependencies run one way: sampler -> capture format -> analysis -> figures/report -> CLI):

- ``rdmascope.capture``: the one module that owns the on-disk capture format (schema, version,
  metadata keys, writer and validating reader).
- ``rdmascope.sampler``: the 1 ms counter sampling daemon (no pandas/matplotlib).
- ``rdmascope.emulator``: the ConnectX-7 twin emulator (traffic model, live sysfs tree, simulate).
- ``rdmascope.analysis``: loading, re-binning, peaks, bursts, attribution, estimate, figures, report.
- ``rdmascope.cli``: the ``rdmascope`` command.
"""

__version__ = "0.1.0"
