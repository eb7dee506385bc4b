"""The emulation check: did all RDMA traffic use one interface (NCCL_IB_HCA naming one twin)?

method.md, "Hardware": restricting NCCL to the first of the two RDMA devices of a DGX Spark port
emulates a ~100 Gb/s link; the study confirmed from the adapter counters, in every emulated run,
that all traffic used the one remaining interface. ``verify_emulation`` makes that check from a
capture: each RDMA device's share of the bytes (tx + rx) over the range and its highest 1 ms
rate, and a verdict. When netdev statistics were sampled (counters with source "netdev"), it also
compares RDMA bytes with kernel-stack bytes and flags a collective that ran over TCP instead of
RDMA (RDMA bypasses the kernel stack, so during inference the netdev counters stay almost idle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .load import Capture
from .series import byte_intervals, integrate, to_gbps

__all__ = ["Verdict", "verify_emulation"]

MS = 1_000_000


@dataclass
class Verdict:
    """Result of ``verify_emulation``.

    ``ok``: the expectation holds. ``expect``: "single" or "both". ``message``: one sentence with
    the numbers. ``devices``: DataFrame indexed by RDMA device: tx_bytes, rx_bytes, bytes,
    share (of all RDMA bytes), peak_1ms_gbps (highest 1 ms rate, tx or rx), nan_windows (1 ms
    windows with unknown bytes inside the device's readings: reset/saturated/unavailable/
    implausible). ``kernel``: the same bytes from netdev statistics per RDMA device
    (kernel_bytes, rdma_bytes) or None when not sampled. ``tcp_suspected``: kernel-stack bytes
    reached the TCP threshold. ``main_device``: the device with the largest share.
    """

    ok: bool
    expect: str
    message: str
    devices: pd.DataFrame
    total_bytes: float
    main_device: str | None
    tcp_suspected: bool = False
    kernel: pd.DataFrame | None = None
    start_ns: int = 0
    end_ns: int = 0
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict of the verdict (devices as a list of records)."""
        return {
            "ok": self.ok, "expect": self.expect, "message": self.message,
            "total_bytes": self.total_bytes, "main_device": self.main_device,
            "tcp_suspected": self.tcp_suspected, "start_ns": self.start_ns,
            "end_ns": self.end_ns, "params": self.params,
            "devices": self.devices.reset_index().to_dict(orient="records"),
            "kernel": None if self.kernel is None
            else self.kernel.reset_index().to_dict(orient="records"),
        }


def _bytes_by(capture: Capture, source: str, by: str, start_ns, end_ns, width_ns):
    """Bytes per ``width_ns`` window over [start, end), the last window clipped at end."""
    iv = byte_intervals(capture, source=source)
    if len(iv) == 0:
        return None, start_ns, end_ns, None
    lo = int(iv["t0_ns"].min()) if start_ns is None else int(start_ns)
    hi = int(iv["t1_ns"].max()) if end_ns is None else int(end_ns)
    if hi <= lo:
        raise ValueError(f"empty time range: {lo} ns to {hi} ns")
    a = np.arange(lo, hi, width_ns, dtype=np.int64)
    e = np.minimum(a + width_ns, hi)
    out = integrate(iv, a, e, by=by, allow_partial=True)
    out.index = pd.Index(a, name="window_start_ns")
    # windows outside a series' own readings (capture edges) are NaN but not "unknown bytes"
    first = iv.groupby(by, observed=True)["t0_ns"].min()
    last = iv.groupby(by, observed=True)["t1_ns"].max()
    outside = pd.DataFrame({c: (a + width_ns <= first[c]) | (a >= last[c]) for c in out.columns},
                           index=out.index)
    return out, lo, hi, outside


def verify_emulation(capture: Capture, *, start_ns: int | None = None, end_ns: int | None = None,
                     expect: str = "single", single_share: float = 0.99,
                     both_min_share: float = 0.25, min_bytes: float = 1e6,
                     tcp_min_bytes: float = 10e6, tcp_ratio: float = 1.0) -> Verdict:
    """Check which RDMA interfaces carried the traffic of a capture over [start_ns, end_ns).

    ``expect="single"`` (emulated link): OK when one device carries >= ``single_share`` (99 %)
    of all RDMA bytes. ``expect="both"`` (normal 200 Gb/s setting): OK when at least two devices
    each carry >= ``both_min_share`` (25 %). Never OK with fewer than ``min_bytes`` (1 MB) of
    RDMA traffic (nothing to judge) or when TCP is suspected: netdev (kernel-stack) bytes of at
    least ``tcp_min_bytes`` (10 MB) and >= ``tcp_ratio`` x the RDMA bytes. Bytes are decimal;
    bytes of windows touching a reset/saturated/unavailable/implausible interval are unknown and
    left out (counted in ``nan_windows``). Raises ``ValueError`` on an unknown ``expect`` or a
    capture without RDMA data counters.
    """
    if expect not in ("single", "both"):
        raise ValueError(f"expect must be 'single' or 'both', got {expect!r}")
    c = capture.counters
    if not (c["data"] & (c["source"] == "infiniband")).any():
        raise ValueError(f"{capture.path}: no RDMA data counters (port_xmit_data/port_rcv_data)")
    b, lo, hi, outside = _bytes_by(capture, "infiniband", "series", start_ns, end_ns, MS)
    lo = capture.t_start_ns if lo is None else lo
    hi = capture.t_end_ns if hi is None else hi
    ser = c[c["data"] & (c["source"] == "infiniband")]
    dev_of = dict(zip(ser["series"], ser["device"], strict=True))
    dir_of = dict(zip(ser["series"], ser["direction"], strict=True))
    devices = list(dict.fromkeys(ser["device"]))
    rows = {}
    for dev in devices:
        row = {"tx_bytes": 0.0, "rx_bytes": 0.0, "peak_1ms_gbps": np.nan, "nan_windows": 0}
        if b is not None:
            for s in b.columns:
                if dev_of.get(s) != dev:
                    continue
                v = b[s].to_numpy()
                row[f"{dir_of[s]}_bytes"] += float(np.nansum(v))
                pk = np.nanmax(to_gbps(v, MS)) if np.isfinite(v).any() else np.nan
                row["peak_1ms_gbps"] = np.nanmax([row["peak_1ms_gbps"], pk])
                row["nan_windows"] += int((np.isnan(v) & ~outside[s].to_numpy()).sum())
        rows[dev] = row
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "device"
    df["bytes"] = df["tx_bytes"] + df["rx_bytes"]
    total = float(df["bytes"].sum())
    df["share"] = df["bytes"] / total if total > 0 else np.nan
    df = df[["tx_bytes", "rx_bytes", "bytes", "share", "peak_1ms_gbps", "nan_windows"]]
    main = str(df["bytes"].idxmax()) if total > 0 else None

    # kernel-stack bytes from netdev statistics, per RDMA device
    kernel = None
    tcp = False
    if (c["data"] & (c["source"] == "netdev")).any():
        kb, _, _, _ = _bytes_by(capture, "netdev", "device", lo, hi, 1000 * MS)
        kern = {dev: (float(np.nansum(kb[dev].to_numpy())) if kb is not None and dev in kb
                      else 0.0) for dev in dict.fromkeys(c[c["source"] == "netdev"]["device"])}
        kernel = pd.DataFrame({"kernel_bytes": pd.Series(kern),
                               "rdma_bytes": df["bytes"].reindex(list(kern)).fillna(0.0)})
        kernel.index.name = "device"
        k_total = float(kernel["kernel_bytes"].sum())
        tcp = k_total >= tcp_min_bytes and k_total >= tcp_ratio * total

    shares = ", ".join(f"{d} {df.at[d, 'share'] * 100:.2f} % ({df.at[d, 'bytes'] / 1e6:,.1f} MB,"
                       f" peak {df.at[d, 'peak_1ms_gbps']:.1f} Gb/s at 1 ms)"
                       if total > 0 else f"{d} 0 MB" for d in df.index)
    if total < min_bytes:
        ok = False
        msg = (f"cannot judge: only {total / 1e6:.3f} MB of RDMA traffic in the range "
               f"(need >= {min_bytes / 1e6:g} MB)")
    elif expect == "single":
        ok = bool(df["share"].max() >= single_share)
        msg = (f"all traffic on one interface: {main} carries {df['share'].max() * 100:.2f} % "
               f"of {total / 1e6:,.1f} MB" if ok else
               f"NOT a single interface: traffic is spread over {(df['share'] > 0.001).sum()} "
               f"devices (largest {main} {df['share'].max() * 100:.2f} %, needs >= "
               f"{single_share * 100:g} %)") + f"; {shares}"
    else:
        n_big = int((df["share"] >= both_min_share).sum())
        ok = n_big >= 2
        msg = (f"traffic on both interfaces: {n_big} devices carry >= "
               f"{both_min_share * 100:g} % each" if ok else
               f"NOT spread over both interfaces: {main} carries "
               f"{df['share'].max() * 100:.2f} %") + f"; {shares}"
    if tcp:
        ok = False
        msg += (f"; TCP SUSPECTED: the kernel network stack moved "
                f"{kernel['kernel_bytes'].sum() / 1e6:,.1f} MB against {total / 1e6:,.1f} MB "
                "over RDMA (did NCCL fall back to sockets?)")
    return Verdict(ok=bool(ok), expect=expect, message=msg, devices=df, total_bytes=total,
                   main_device=main, tcp_suspected=bool(tcp), kernel=kernel, start_ns=lo,
                   end_ns=hi,
                   params={"single_share": single_share, "both_min_share": both_min_share,
                           "min_bytes": min_bytes, "tcp_min_bytes": tcp_min_bytes,
                           "tcp_ratio": tcp_ratio})
