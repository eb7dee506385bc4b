"""rdmascope.analysis: from capture files to the study's views (rates, peaks, bursts, checks).

Import what you need from here; see docs/ARCHITECTURE.md ("Analysis data model") for the
contract between the modules.
"""

from .load import (
    Capture,
    load_capture,
    load_captures,
    monotonic_to_realtime,
    realtime_to_monotonic,
)
from .series import (
    FLAGS,
    QUALITY_EMPTY,
    QUALITY_GAP,
    QUALITY_INVALID,
    QUALITY_OVER_LINE,
    QUALITY_PARTIAL,
    OverLineFlagger,
    byte_intervals,
    default_origin,
    flag_over_line,
    flag_over_line_capture,
    group_links,
    integrate,
    iter_rebin_capture,
    line_gbps_of,
    line_rate_lines,
    line_rates,
    over_line_causes,
    plausible_gbps,
    rebin,
    rebin_capture,
    rebin_with_quality,
    to_gbps,
    twin_links,
)

__all__ = [
    "Capture",
    "load_capture",
    "load_captures",
    "monotonic_to_realtime",
    "realtime_to_monotonic",
    "FLAGS",
    "QUALITY_EMPTY",
    "QUALITY_GAP",
    "QUALITY_INVALID",
    "QUALITY_OVER_LINE",
    "QUALITY_PARTIAL",
    "byte_intervals",
    "default_origin",
    "flag_over_line",
    "flag_over_line_capture",
    "OverLineFlagger",
    "line_gbps_of",
    "line_rate_lines",
    "line_rates",
    "over_line_causes",
    "group_links",
    "integrate",
    "iter_rebin_capture",
    "plausible_gbps",
    "rebin",
    "rebin_capture",
    "rebin_with_quality",
    "to_gbps",
    "twin_links",
]

from .bursts import BurstResult, allreduce_bytes, burst_analysis, detect_bursts  # noqa: E402
from .peaks import (  # noqa: E402
    DEFAULT_WINDOWS_NS,
    headline_peak,
    peak_bounds,
    peak_table,
    rebin_view,
)
from .verify import Verdict, verify_emulation  # noqa: E402

__all__ += [
    "BurstResult",
    "allreduce_bytes",
    "burst_analysis",
    "detect_bursts",
    "DEFAULT_WINDOWS_NS",
    "headline_peak",
    "peak_bounds",
    "peak_table",
    "rebin_view",
    "Verdict",
    "verify_emulation",
]
