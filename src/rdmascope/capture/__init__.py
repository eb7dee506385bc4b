"""The rdmascope capture format: the one package that owns it (schema, version, metadata, I/O).

A *capture* is a directory::

    CAPTURE/
      manifest.json             metadata (see MANIFEST KEYS below), rewritten atomically
      segments/seg-000000.parquet   closed segments, rows sorted by (counter_id, sweep)
      segments/seg-000001.parquet   ...
      live-000002.arrow         the open segment: an Arrow IPC *stream*, one record batch per flush
                                (<= FLUSH_INTERVAL_S of readings). Present while recording and after
                                a crash; rolled into a Parquet segment on roll/close.
      .lock                     while a writer has the capture open: an ``fcntl.flock`` exclusive
                                lock (holding the writer's pid) that refuses a second writer, even
                                with ``force``; released by the kernel when the writer dies, removed
                                on close. Not part of the data: readers ignore it.

Rows are *readings*: one row per counter read (long form). Columns (``SAMPLE_SCHEMA``):

=================  ========  ==================================================================
column             type      meaning
=================  ========  ==================================================================
counter_id         uint16    index into ``manifest["counters"]``
sweep              int64     sweep number k; its deadline is start_monotonic_ns + k * interval_ns
t_before_ns        int64     CLOCK_MONOTONIC ns taken just before the read (time.perf_counter_ns)
read_duration_ns   uint32    t_after - t_before, ns (the read's timing bracket)
value              uint64    the raw value as the kernel prints it (units per the counter's ``unit``,
                             e.g. 4 bytes for port_xmit_data); null when status != OK
status             uint8     STATUS_OK, STATUS_READ_ERROR, STATUS_PARSE_ERROR, STATUS_MISSING
=================  ========  ==================================================================

MANIFEST KEYS (``manifest.json``, a JSON object; ``MANIFEST_FIELDS`` is the table of the
required keys and the type of each checked key, refused naming the file and the key):

- ``format`` = ``"rdmascope-capture"``, ``format_version`` (int, ``FORMAT_VERSION`` = 2; 1 is
  still read). Version 2: every Parquet segment and live file stores, in its schema metadata,
  ``rdmascope.capture_id`` (the manifest's ``capture_id``), ``rdmascope.counters`` (the
  descriptors it was written with) and ``rdmascope.interval_ns``; a reader refuses a file
  whose id differs (another capture's), that has none (in a version-2 capture), or whose
  descriptors (``CHECKED_COUNTER_KEYS``) or interval differ from the manifest's (an edited
  manifest), naming the file, the counter and the key. Version 1 files have no id; their
  descriptors are compared when stored.
  ``capture_id`` (uuid4 hex), ``writer`` (``"sampler"`` | ``"simulate"``), ``sampler_version``.
- ``host``, ``kernel``, ``command_line`` (list of str), ``sysfs_root``.
- ``clock`` = ``"CLOCK_MONOTONIC"`` (clock of every ``*_ns`` column), ``interval_ns``.
- ``start`` = {``monotonic_ns``, ``realtime_ns``}; ``stop`` = same or ``null`` (null = unclean end).
- ``clock_pairs``: list of [realtime_ns, monotonic_ns] taken at start, every <= 10 s, and at stop.
- ``devices``: the discovery records of the sampled RDMA devices (free-form dicts from
  ``rdmascope.sampler``: name, ports with rate string / rate_gbps / link_layer / netdevs, pci, ...).
- ``devices[i].pcie`` (optional, added without a version change; absent in older captures and
  None for a device without PCIe link files: unknown, never a zero rate): the device's PCIe
  link as read at discovery, {``current_link_speed``, ``current_link_width``,
  ``max_link_speed``, ``max_link_width`` (the sysfs texts, e.g. "32.0 GT/s PCIe" and "4", null
  when unreadable), ``gts``, ``width``, ``bound_gbps``, ``max_gts``, ``max_width``,
  ``max_bound_gbps``} (``rdmascope.pcie.pcie_record``). Readers recompute the bound from the
  texts (``rdmascope.pcie.record_bound``) and treat anything malformed as unknown.
- ``discovered_devices`` (optional, added without a version change): EVERY RDMA device found under
  ``class/infiniband`` at record time, sampled or not (``--device`` may select fewer), as a list of
  {``name``, ``pci`` (str or null), ``netdevs`` (list of str)}. Tells a reader that a twin device
  existed even when only one was recorded. Absent in older captures: unknown, not "none".
- ``counters``: list of counter descriptors, position = ``counter_id``; each has
  ``source`` ("infiniband" | "netdev"), ``device``, ``port`` (int or null for netdev),
  ``name`` (kernel file name, e.g. "port_xmit_data" or "tx_bytes"), ``path``,
  ``unit`` ("4 bytes" | "bytes" | "packets" | "count"), ``bytes_per_unit`` (4, 1 or null),
  ``width_bits`` (64, 32, 16, 8 or null when unknown), ``direction`` ("tx" | "rx" | null).
  Optional (added without a version change; absent in older captures, e.g.
  ``fixtures/v1-capture``, whose byte counters are always ``counters/port_*_data``):
  ``byte_source``, on a port's byte counter, the file it was read from relative to the port,
  one of ``BYTE_SOURCE_FILES``: "counters/port_xmit_data" (unit "4 bytes"),
  "counters_ext/port_xmit_data_64" (legacy mlx4, "4 bytes", 64-bit), "hw_counters/tx_bytes"
  (bnxt_re, mana, efa: unit "bytes", bytes_per_unit 1) or, for irdma, "hw_counters/ip4OutOctets"
  and "hw_counters/ip6OutOctets" (two counters of one series, whose bytes add up; IP-level
  octets), and the rx counterparts (added without a version change: a reader older than these
  names refuses such a capture naming the value). The sampled
  devices' port records (``devices``) then also hold ``byte_source``, ``byte_files``,
  ``byte_unit``, ``byte_width_bits`` and ``byte_note`` (why that source, or why the port has
  no byte counter, e.g. soft iWARP).
- ``device_changes`` (optional, added without a version change; present from the first
  change): RDMA devices that appeared, vanished, returned or were renamed while recording,
  each {``name``, ``pci``, ``sys_image_guid``, ``kind`` ("appeared" | "vanished" | "returned"
  | "renamed": a recorded device back at its PCI address under another name, or a netdev
  renamed, then with ``netdev`` true and its ``ifindex``), ``t_ns``; ``seen_ns`` when first
  seen still probing; ``as``: a followed device's name now; ``was``: the name it had before
  (a second rename); ``counters``: how many were added}. A device that appeared and was added has descriptors
  with ``appeared_ns`` (its first reading). Said by ``device_change_texts``.
- ``events``: list of {``t_ns``, ``counter_id`` (or null), ``kind``, ``message``}: unavailable
  counters (said once, with the reason), recoveries, write errors.
- ``segments``: one record per closed Parquet segment, {``name``, ``rows``, ``bytes``,
  ``sha256``}, appended at each roll; the reader refuses a listed segment that is missing, altered
  (size, SHA-256 or row count) or followed by unlisted ones. Manifests without the key (written
  before it existed, e.g. ``fixtures/v1-capture``) are read with Parquet page checksums only.
- ``audit``: the sampler's self-audit at stop (sweeps taken/missed, interval and read-bracket
  percentiles, CPU seconds), or ``null``.
- ``extra``: free-form (the emulator stores its scenario and ground truth pointers here).

Only this package reads or writes these files: ``rdmascope.capture.schema`` (names, format
version, columns, errors, manifest validation), ``rdmascope.capture.writer`` (``CaptureWriter``,
used by the sampler), ``rdmascope.capture.reader`` (``read_capture`` and friends, used by the
analysis) and ``rdmascope.capture.lock`` (the writer lock). The writer and the reader import the
schema, never each other. Everything depends only on pyarrow (no pandas). The public names of all
four are importable from ``rdmascope.capture``.
"""

import os  # callers patch rdmascope.capture.os (e.g. os.write in disk-full tests)

from rdmascope.capture.lock import _acquire_lock, _lock_pid, _release_lock, recording_pid
from rdmascope.capture.reader import (
    RawCapture,
    _check_rows,
    _check_unique_readings,
    _counter_slices,
    _merge_by_counter,
    _open_segment,
    _prepare,
    _read_live,
    _sorted_by_counter,
    estimate_size,
    iter_capture_batches,
    iter_capture_tables,
    list_capture_files,
    listed_segments,
    live_time_range,
    read_capture,
    read_manifest,
    segment_counters,
    segment_time_range,
)
from rdmascope.capture.schema import (
    BYTE_SOURCE_FILES,
    CHECKED_COUNTER_KEYS,
    COLUMNS,
    COUNTER_KEYS,
    FLUSH_INTERVAL_S,
    FORMAT_NAME,
    FORMAT_VERSION,
    LIVE_PREFIX,
    LIVE_SUFFIX,
    LOCK_NAME,
    MANIFEST_FIELDS,
    MANIFEST_NAME,
    READABLE_VERSIONS,
    REQUIRED_MANIFEST_KEYS,
    ROLL_INTERVAL_S,
    SAMPLE_SCHEMA,
    SEGMENT_CAPTURE_ID_KEY,
    SEGMENT_COUNTERS_KEY,
    SEGMENT_DIR,
    SEGMENT_INTERVAL_KEY,
    SEGMENT_PREFIX,
    SEGMENT_SUFFIX,
    STATUS_MISSING,
    STATUS_NAMES,
    STATUS_OK,
    STATUS_PARSE_ERROR,
    STATUS_READ_ERROR,
    CaptureError,
    CaptureExistsError,
    CaptureLockedError,
    CaptureSchemaError,
    CaptureWriteError,
    CorruptSegmentError,
    NotACaptureError,
    UnsupportedVersionError,
    _check_manifest_types,
    _check_schema,
    _is_int,
    check_counter_descriptors,
    check_origin,
    clock_pair,
    device_change_texts,
    empty_table,
    host_metadata,
    is_enospc,
    make_batch,
    origin_metadata,
)
from rdmascope.capture.writer import (
    _IPC_EOS,
    _OWN_SEGMENT,
    _OWN_TOP,
    _PARQUET_ENCODINGS,
    CaptureWriter,
    _atomic_write_json,
    _LiveFile,
    _remove_capture_files,
    _safe_child,
    check_output,
    foreign_entries,
    segment_entry,
    write_segment,
)
