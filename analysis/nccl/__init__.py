"""NCCL's own witnesses beside the counters: its ``NCCL_DEBUG=INFO`` log and Inspector records.

- ``log``: read NCCL INFO logs (2.18 through 2.30) into processes, networks, HCAs, channels and
  communicators (``read_logs``).
- ``inspector``: read NCCL Inspector records (JSON lines, or the Prometheus textfile variant).
- ``witness``: put the log beside a capture's emulation verdict (``compare_witnesses``).
- ``collectives``: place Inspector collectives on a capture's clock and set each beside the
  RDMA bytes the counters saw during it.

See docs/nccl.md for what each line means and which NCCL versions write it.
"""

from .log import NcclLog, NcclLogError, read_logs  # noqa: F401

__all__ = ["NcclLog", "NcclLogError", "read_logs"]
