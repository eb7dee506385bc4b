"""Read NCCL ``NCCL_DEBUG=INFO`` logs: what NCCL opened and which way each channel went.

The formats are NCCL's own ``INFO()`` format strings (NVIDIA/nccl, Apache-2.0/BSD licence; only
their shape is reproduced here, no code), per version:

- prefix, ``src/debug.cc``: ``"%s:%d:%d [%d] NCCL INFO "`` = host (cut at the first ``.``), pid,
  tid, CUDA device, after whatever a launcher puts in front (``[default0]:``, ``[1,0]<stdout>:``,
  ``0: ``, a container's name or timestamp); 2.26+ may put ``[%F %T] `` (local time,
  ``NCCL_DEBUG_TIMESTAMP_FORMAT``) in front, by default on WARN lines only
  (``NCCL_DEBUG_TIMESTAMP_LEVELS``). WARN lines carry
  ``file.cc:line`` between ``[dev]`` and ``NCCL WARN``.
- ``NCCL version 2.27.3+cuda12.9`` (``src/init.cc`` ``VERSION_STRING``); 2.20 printed it to
  stdout without a prefix as well, 2.24+ unprefixed at NCCL_DEBUG=VERSION/WARN.
- ``NCCL_IB_HCA set to %s`` (net_ib ``ncclIbInit``, all versions).
- ``NET/IB: [%d] %s:%s:%d/%s provider=%s speed=%d context=%p pciPath=%s ar=%d[ oooRqSize=%d]``:
  one line per port found, INFO from 2.27 (TRACE before), the index being the verbs device list's.
- ``NET/IB : Using [0]dev:port/RoCE [1]... [RO]; OOB if:addr<port>``: the HCAs opened, in NCCL's
  index order. 2.20-2.23 print merged NICs as ``[0]={[0] a:1/RoCE, [1] b:1/RoCE}``; 2.29+ may add
  ``:rail`` / ``:plane`` after the port.
- ``NET/IB : Made virtual device [%d] name=a+b speed=%d ndevs=%d[ rail=%d plane=%d]`` (2.24+): the
  NET device index a channel names; index < number of HCAs is one HCA, later ones are merged twins.
- ``NET/IB : No device found.``; ``NET/Socket : Using [0]if:addr<port> ...`` (net_socket.cc).
- ``Using network IB|Socket|<plugin>`` (init.cc); ``NET/Plugin: Loaded net plugin %s`` (net.cc).
- ``[[Rank %d] ][ncclCommInitRank |ncclCommSplit |...]comm %p rank %d nranks %d cudaDev %d
  [nvmlDev %d ]busId %lx [commId 0x%llx|parent %p ...] - Init START|COMPLETE`` (init.cc: 2.18
  has no function name and no nvmlDev, and no START line; 2.19-2.23 "ncclCommInitRank " only
  for the START/COMPLETE of ncclCommSplit/InitRank; 2.24+ the function name, HEAD ``[Rank R]``).
- ``comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d`` (init.cc, 2.19+).
- ``comm %p rank %d nranks %d cudaDev %d busId %lx - Destroy|Abort COMPLETE`` (init.cc; INIT
  subsystem through 2.29, DESTROY from 2.30): the communicator closed.
- ``Channel %02d/%d : %d[%x] -> %d[%x] [send|receive] via NET/%s/%d[(%d)][/GDRDMA[(PCI)]][/Shared]``
  (transport/net.cc; the bracketed numbers are busId in 2.18, nvmlDev later),
  ``... via P2P/...`` (p2p.cc), ``Channel %02d : ... via SHM/...`` (shm.cc).

Real logs quoted in public issue threads have the same shapes, e.g. NVIDIA/nccl#958 and
ROCm/rccl#419 (``NET/IB : Using [0]mlx5_3:1/IB ... ; OOB ib0:11.5.5.50<0>``).

Any other line is counted and skipped. Lines that start like a known message but do not parse
(a truncated file, a mangled copy) are skipped with a note naming file and line. A file with
NUL bytes, or without a single NCCL line, raises ``NcclLogError`` naming it: no verdict is
ever made from a log that was not understood.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["NcclLog", "NcclLogError", "Process", "Comm", "Channel", "read_logs", "parse_lines",
           "ANSI_RE"]


class NcclLogError(ValueError):
    """A file is not an NCCL log that can be read (binary, another tool's log, unreadable)."""


#: ANSI colour / cursor escape sequences (``ls --color``, rich, some launchers colour whole lines)
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")

#: NCCL's prefix, wherever it starts: a launcher's tag may be glued to the host with a ':'
#: (torchrun --tee ``[default0]:host:...``, mpirun --tag-output ``[1,0]<stdout>:host:...``) or
#: a blank (srun -l ``0: host:...``, docker compose ``worker-1  | host:...``)
_PREFIX = re.compile(
    r"(?<![\w.\-])(?P<host>[A-Za-z0-9][\w.\-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:[\w./\-]+:\d+ (?:\([^)]*\) )?)?NCCL (?P<level>INFO|WARN)(?: (?P<msg>.*))?$")
#: NCCL 2.26+ own timestamp just before the host, ``[%F %T] `` by default (local time)
_NCCL_TS = re.compile(r"\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\] ?$")
#: a launcher's / container runtime's ISO-8601 timestamp with a zone (docker --timestamps, k8s)
_ISO_TS = re.compile(r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(?P<z>Z|[+-]\d\d:?\d\d)")
_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)(?:\+cuda(?P<cuda>\d+\.\d+))?")

_IB_DEV = re.compile(
    r"NET/IB: \[(?P<i>\d+)\] (?P<name>[^\s:]+):(?P<uverbs>[^\s:]+):(?P<port>\d+)/(?P<link>\w+)"
    r" provider=(?P<provider>\S+) speed=(?P<speed>\d+) context=\S+ pciPath=(?P<pci>\S+)"
    r" ar=(?P<ar>\d+)")
_IB_USING = re.compile(r"NET/IB : Using(?P<list>.*?) ?(?P<ro>\[RO\])?; OOB (?P<oob>\S+)\s*$")
_IB_TOP = re.compile(r"\[(?P<i>\d+)\](?:=\{(?P<inner>[^}]*)\}|(?P<name>[^\s:\[\]={}]+):(?P<port>\d+)"
                     r"(?::-?\d*)?(?::-?\d+)?/(?P<link>\w+))")
_IB_INNER = re.compile(r"\[(?P<i>\d+)\] (?P<name>[^\s:,]+):(?P<port>\d+)/(?P<link>\w+)")
_VDEV = re.compile(r"NET/IB : Made virtual device \[(?P<i>\d+)\] name=(?P<name>\S+) speed=(?P<speed>\d+)"
                   r" ndevs=(?P<ndevs>\d+)")
_SOCK_USING = re.compile(r"NET/Socket : Using(?P<list>(?: \[\d+\][^\s:]+:\S+)+)\s*$")
_SOCK_ENTRY = re.compile(r"\[(?P<i>\d+)\](?P<ifname>[^\s:]+):(?P<addr>\S+)")
_USING_NET = re.compile(r"Using network (?P<net>.+?)\s*$")
_PLUGIN = re.compile(r"NET/Plugin ?: ?Loaded net plugin (?P<name>.+?)(?: \(v\d+\))?\s*$")
_HCA_ENV = re.compile(r"NCCL_IB_HCA set to (?P<v>.*?)\s*$")
_INIT = re.compile(
    r"(?:\[Rank \d+\] )?(?:(?P<func>nccl\w+) )?comm (?P<comm>0x[0-9a-fA-F]+|\(nil\)) rank (?P<rank>\d+) "
    r"nranks (?P<nranks>\d+) cudaDev (?P<cuda>-?\d+)(?: nvmlDev -?\d+)? busId (?P<bus>[0-9a-fA-F]+)"
    r"(?: commId (?P<commid>0x[0-9a-fA-F]+))?(?: parent (?P<parent>\S+))?.*?- Init (?P<phase>START|COMPLETE)\s*$")
_END = re.compile(r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) n[rR]anks (?P<nranks>\d+) cudaDev "
                  r"-?\d+ busId [0-9a-fA-F]+ - (?P<how>Destroy|Abort) COMPLETE")
_NNODES = re.compile(r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) "
                     r"nNodes (?P<nnodes>\d+) localRanks (?P<local>\d+)")
_CHANNEL = re.compile(
    r"Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[[0-9a-fA-F]+\] -> (?P<dst>\d+)\[[0-9a-fA-F]+\]"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>\S+(?: pointer)?)(?P<rest>.*)$")
_NET_VIA = re.compile(r"NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>(?:/[A-Za-z]+(?:\(PCI\))?)*)$")

#: messages this reader knows by their start: a line starting so that does not parse is noted
_KNOWN_STARTS = ("NET/IB : Using", "NET/IB: [", "NET/IB : Made virtual device", "NET/Socket : Using",
                 "Using network", "Channel ", "NCCL version")


@dataclass
class Comm:
    """One communicator as one process saw it (``comm`` = NCCL's pointer, unique per process)."""

    comm: str
    rank: int
    nranks: int
    cuda_dev: int
    comm_id: str | None = None
    func: str | None = None
    nnodes: int | None = None
    started: bool = False
    complete: bool = False
    #: "Destroy" or "Abort" when its ``- Destroy|Abort COMPLETE`` line was logged; ``t_end``: its stamp
    ended: str | None = None
    t_end: datetime | None = None


@dataclass
class Channel:
    """One ``Channel cc/k : a[x] -> b[y] [send|receive] via ...`` line.

    ``transport``: "NET", "P2P" or "SHM"; ``net``: "IB", "Socket" or a plugin's name (NET only);
    ``dev``: the NET device index; ``gdr``: GPUDirect RDMA; ``comm``: the communicator whose
    setup the line belongs to (the last Init START of that process/thread), or None.
    """

    channel: int
    src: int
    dst: int
    direction: str | None
    transport: str
    via: str
    net: str | None = None
    dev: int | None = None
    gdr: bool = False
    comm: str | None = None


@dataclass
class Process:
    """Everything one NCCL process (host, pid) logged that this reader understood.

    ``ib_hcas``: NCCL index -> (device name, port, link layer) from ``NET/IB : Using``;
    ``vdevs``: NET device index -> the HCA names behind it (merged twins: two names);
    ``ib_found``: the per-port ``NET/IB: [i]`` lines (2.27+): name, uverbs, port, link, speed
    (Mb/s), pci; ``sockets``: index -> (interface, address) of ``NET/Socket : Using``.
    ``times``: the datetimes its lines carried (NCCL's own local-time stamps are naive).
    """

    host: str
    pid: int
    files: list[str] = field(default_factory=list)
    version: str | None = None
    cuda: str | None = None
    cuda_devs: set[int] = field(default_factory=set)
    ib_hca_env: str | None = None
    ib_found: list[dict] = field(default_factory=list)
    ib_hcas: dict[int, tuple[str, int, str]] = field(default_factory=dict)
    vdevs: dict[int, list[str]] = field(default_factory=dict)
    ib_no_device: bool = False
    oob: str | None = None
    relaxed_ordering: bool = False
    sockets: dict[int, tuple[str, str]] = field(default_factory=dict)
    networks: list[str] = field(default_factory=list)
    plugin: str | None = None
    comms: dict[str, Comm] = field(default_factory=dict)
    channels: list[Channel] = field(default_factory=list)
    times: list[datetime] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _current: dict[int, str] = field(default_factory=dict, repr=False)
    _ts: datetime | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return f"{self.host}:{self.pid}"

    def net_dev_hcas(self, dev: int) -> list[str]:
        """Return the HCA names behind NET/IB device ``dev`` (``[]`` when the log does not say)."""
        if dev in self.vdevs:
            return list(self.vdevs[dev])
        if dev in self.ib_hcas and not self.vdevs:
            return [self.ib_hcas[dev][0]]
        if self.vdevs:  # 2.20-2.23 merged form, or 2.24+ with NET lines: only what they say
            return []
        if dev >= len(self.ib_hcas) == 2:  # 2.24+ merged device without its NET line: the
            return self.opened_hcas       # only device two HCAs can merge into is both
        return []

    @property
    def network(self) -> str | None:
        """The network NCCL used: the last ``Using network`` name, else what the channels say."""
        if self.networks:
            return self.networks[-1]
        nets = {c.net for c in self.channels if c.net}
        return nets.pop() if len(nets) == 1 else None

    def net_channels(self) -> list[Channel]:
        return [c for c in self.channels if c.transport == "NET"]

    def hcas_carrying(self) -> dict[str, int]:
        """Return HCA name -> number of NET/IB channel connections through it (merged devices count
        for each twin)."""
        out: dict[str, int] = {}
        for c in self.net_channels():
            if not is_ib(c.net) or c.dev is None:
                continue
            for h in self.net_dev_hcas(c.dev):
                out[h] = out.get(h, 0) + 1
        return out

    def channels_per_hca(self) -> dict[str, int]:
        """Return HCA name -> number of distinct channels (per communicator) with a NET/IB
        connection through it."""
        seen: dict[str, set] = {}
        for c in self.net_channels():
            if not is_ib(c.net) or c.dev is None:
                continue
            for h in self.net_dev_hcas(c.dev):
                seen.setdefault(h, set()).add((c.comm, c.channel))
        return {h: len(v) for h, v in seen.items()}

    @property
    def opened_hcas(self) -> list[str]:
        """The HCAs of ``NET/IB : Using`` (and of merged groups), in NCCL's order."""
        names = [v[0] for _, v in sorted(self.ib_hcas.items())]
        for _, hs in sorted(self.vdevs.items()):
            names += [h for h in hs if h not in names]
        return names

    def understood_network(self) -> bool:
        """True when the log says which network this process used (a line of any kind)."""
        return bool(self.networks or self.ib_hcas or self.sockets or self.net_channels()
                    or self.ib_no_device)


@dataclass
class NcclLog:
    """The processes of one or more NCCL logs; ``notes``: (file, line, reason) of skipped lines."""

    files: list[str]
    processes: list[Process]
    notes: list[tuple[str, int, str]] = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0
    unknown_lines: int = 0
    unprefixed_versions: dict[str, str] = field(default_factory=dict)

    def hosts(self) -> list[str]:
        return sorted({p.host for p in self.processes})

    def on_host(self, host: str) -> list[Process]:
        """Processes whose host is ``host`` (NCCL cuts the host name at its first dot)."""
        want = short_host(host)
        return [p for p in self.processes if short_host(p.host) == want]

    def time_span(self) -> tuple[datetime, datetime] | None:
        ts = [t for p in self.processes for t in p.times]
        return (min(ts, key=_sort_key), max(ts, key=_sort_key)) if ts else None


def is_ib(net: str | None) -> bool:
    """NCCL's own IB transport ("IB") or an IB-verbs plugin that names itself after it
    ("IBext", "IBext_v8": nccl-rdma-sharp-plugins), whose devices are the same HCAs."""
    return bool(net) and (net == "IB" or net.startswith("IBext"))


def short_host(host: str) -> str:
    """The host name as NCCL prints it: up to the first dot, lower case."""
    return str(host).split(".")[0].lower()


def _sort_key(t: datetime) -> float:
    return t.timestamp()


def _parse_ts(head: str) -> datetime | None:
    m = _ISO_TS.search(head)
    if m:
        z = m["z"]
        ts = re.sub(r"(\.\d{6})\d+", r"\1", m["ts"])  # ns stamps (docker, k8s): keep us
        s = ts + ("+00:00" if z == "Z" else (z if ":" in z else z[:3] + ":" + z[3:]))
        try:
            return datetime.fromisoformat(s)
        except ValueError:
            return None
    m = _NCCL_TS.search(head)
    if m:
        try:
            return datetime.fromisoformat(m["ts"].replace(",", ".").replace(" ", "T"))
        except ValueError:
            return None
    return None


def _check_text(path: Path, data: bytes) -> None:
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise NcclLogError(f"{path}: line {line}: not a text file (a NUL byte at offset {nul}); "
                           "expected an NCCL_DEBUG=INFO log")


def read_logs(paths: Iterable[str | os.PathLike]) -> NcclLog:
    """Read NCCL INFO logs (files, or directories of them: ``NCCL_DEBUG_FILE=%h.%p`` gives one
    file per process) into one ``NcclLog``.

    Raises ``NcclLogError`` naming the file (and line) for a missing or unreadable file, a
    binary file, or a file without any NCCL line (another tool's log: the first line is quoted).
    """
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            kids = sorted(q for q in p.iterdir() if q.is_file() and not q.name.startswith("."))
            if not kids:
                raise NcclLogError(f"{p}: a directory without files; expected NCCL log files")
            files += kids
        else:
            files.append(p)
    log = NcclLog(files=[str(f) for f in files], processes=[])
    procs: dict[tuple[str, str, int], Process] = {}
    for f in files:
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise NcclLogError(f"{f}: cannot read: {exc.strerror or exc}") from exc
        _check_text(f, data)
        text = data.decode("utf-8", errors="replace")
        before = log.nccl_lines
        parse_lines(text.splitlines(), str(f), log, procs, ends_with_newline=data.endswith(b"\n"))
        if log.nccl_lines == before and str(f) not in log.unprefixed_versions:
            first = next((ln for ln in text.splitlines() if ln.strip()), "")
            raise NcclLogError(
                f"{f}: line 1: no NCCL log line in this file (expected lines like "
                f"'host:pid:tid [dev] NCCL INFO ...' from NCCL_DEBUG=INFO); first line: "
                f"{ANSI_RE.sub('', first)[:100]!r}")
    log.processes = list(procs.values())
    return log


def parse_lines(lines: Iterable[str], name: str, log: NcclLog, procs: dict, *,
                ends_with_newline: bool = True) -> None:
    """Parse ``lines`` of file ``name`` into ``log`` / ``procs`` ((file, host, pid) -> Process)."""
    lines = list(lines)
    for no, raw in enumerate(lines, 1):
        log.lines += 1
        line = (ANSI_RE.sub("", raw) if "\x1b" in raw else raw).rstrip("\r")
        m = _PREFIX.search(line) if "NCCL " in line else None  # cheap test first
        if m is None:
            v = _VERSION.search(line) if "NCCL version" in line else None
            if v and line.strip().startswith(v.group(0)) or (v and "NCCL version" in line
                                                              and "NCCL INFO" not in line):
                log.unprefixed_versions[name] = v["v"] + v["suffix"]
            else:
                log.unknown_lines += 1
            continue
        log.nccl_lines += 1
        key = (name, m["host"], int(m["pid"]))  # a process writes one file (NCCL_DEBUG_FILE)
        p = procs.get(key)
        if p is None:
            p = procs[key] = Process(host=m["host"], pid=int(m["pid"]))
        if name not in p.files:
            p.files.append(name)
        p.cuda_devs.add(int(m["dev"]))
        ts = _parse_ts(line[:m.start()])
        if ts is not None:
            p.times.append(ts)
        msg = (m["msg"] or "").strip()
        p._ts = ts
        truncated = no == len(lines) and not ends_with_newline
        if m["level"] == "WARN":
            p.warnings.append(msg)
            continue
        if truncated:
            log.notes.append((name, no, "the file ends inside this line (no newline): "
                                        "it may be cut"))
        if not _dispatch(p, msg, int(m["tid"])):
            if msg.startswith(_KNOWN_STARTS) and not _ignorable(msg):
                if truncated:
                    log.notes.pop()
                why = "truncated (the file ends inside it)" if truncated else "not understood"
                log.notes.append((name, no, f"{why}, skipped: {msg[:80]!r}"))
            else:
                log.unknown_lines += 1


def _ignorable(msg: str) -> bool:
    """Known starts that are other messages: a ring's rank list ``Channel 00/02 : 0 1``."""
    return bool(re.match(r"Channel \d+/\d+ :[\d ]*$", msg))


def _dispatch(p: Process, msg: str, tid: int) -> bool:
    """Apply one message to ``p``; return False when it is not one this reader knows."""
    if msg.startswith("NCCL version"):
        m = _VERSION.match(msg)
        if not m:
            return False
        p.version, p.cuda = m["v"] + m["suffix"], m["cuda"]
        return True
    if msg.startswith("Channel "):
        m = _CHANNEL.match(msg)
        if not m:
            return _ignorable(msg)
        via = m["via"]
        transport = via.split("/")[0]
        ch = Channel(channel=int(m["ch"]), src=int(m["src"]), dst=int(m["dst"]),
                     direction=m["dir"], transport=transport, via=via + m["rest"],
                     comm=p._current.get(tid) or (p._current.get(-1)))
        if transport == "NET":
            n = _NET_VIA.match(via)
            if not n:
                return False
            ch.net, ch.dev = n["net"], int(n["dev"])
            ch.gdr = "/GDRDMA" in n["flags"]
        elif transport not in ("P2P", "SHM", "CollNet", "NVLS"):
            return False
        p.channels.append(ch)
        return True
    if msg.startswith("NET/IB: ["):
        m = _IB_DEV.match(msg)
        if not m:
            return False
        p.ib_found.append({"name": m["name"], "uverbs": m["uverbs"], "port": int(m["port"]),
                           "link": m["link"], "speed_mbps": int(m["speed"]), "pci": m["pci"]})
        return True
    if msg.startswith("NET/IB : Using"):
        m = _IB_USING.match(msg)
        if not m:
            return False
        hcas: dict[int, tuple[str, int, str]] = {}
        tops = list(_IB_TOP.finditer(m["list"]))
        if not tops or _IB_TOP.sub("", m["list"]).strip():
            return False
        merged_form = any(t["inner"] is not None for t in tops)  # 2.20-2.23
        for k, t in enumerate(tops):
            if t["inner"] is not None:  # [d]={[a] x:1/RoCE, [b] y:1/RoCE}: NET device d
                inner = list(_IB_INNER.finditer(t["inner"]))
                if not inner:
                    return False
                for e in inner:
                    hcas[int(e["i"])] = (e["name"], int(e["port"]), e["link"])
                p.vdevs[k] = [e["name"] for e in inner]
            else:
                hcas[int(t["i"])] = (t["name"], int(t["port"]), t["link"])
                if merged_form:  # printed with its HCA index; its NET index is its position
                    p.vdevs[k] = [t["name"]]
        p.ib_hcas = hcas
        p.relaxed_ordering = bool(m["ro"])
        p.oob = m["oob"]
        return True
    if msg.startswith("NET/IB : Made virtual device"):
        m = _VDEV.match(msg)
        if not m:
            return False
        p.vdevs[int(m["i"])] = m["name"].split("+")
        return True
    if msg.startswith("NET/IB : No device found"):
        p.ib_no_device = True
        return True
    if msg.startswith("NET/Socket : Using"):
        m = _SOCK_USING.match(msg)
        if not m:
            return False
        p.sockets = {int(e["i"]): (e["ifname"], e["addr"]) for e in _SOCK_ENTRY.finditer(m["list"])}
        return True
    if msg.startswith("Using network"):
        m = _USING_NET.match(msg)
        if not m:
            return False
        p.networks.append(m["net"])
        return True
    m = _PLUGIN.match(msg)
    if m:
        p.plugin = m["name"]
        return True
    if msg.startswith(("NET/Plugin: Using internal", "NET/Plugin : No plugin found",
                       "NET/Plugin: No plugin found", "NET/Plugin: Could not find")):
        p.plugin = p.plugin or "internal"
        return True
    m = _HCA_ENV.match(msg)
    if m:
        p.ib_hca_env = m["v"]
        return True
    if " - Init " in msg:
        m = _INIT.search(msg)
        if not m:
            return False
        c = p.comms.get(m["comm"])
        if c is None:
            c = p.comms[m["comm"]] = Comm(comm=m["comm"], rank=int(m["rank"]),
                                          nranks=int(m["nranks"]), cuda_dev=int(m["cuda"]))
        c.comm_id = m["commid"] or c.comm_id
        c.func = m["func"] or c.func
        if m["phase"] == "START":
            c.started = True
            p._current[tid] = m["comm"]
            p._current[-1] = m["comm"]
        else:
            c.complete = True
            if not c.started:  # 2.18 logs only COMPLETE: its channels came before it
                for ch in p.channels:
                    if ch.comm is None:
                        ch.comm = m["comm"]
        return True
    m = _END.match(msg)
    if m:  # 2.18+ INIT (2.30+ the DESTROY subsystem): the communicator closed
        c = p.comms.get(m["comm"])
        if c is None:
            c = p.comms[m["comm"]] = Comm(comm=m["comm"], rank=int(m["rank"]),
                                          nranks=int(m["nranks"]), cuda_dev=-1)
        c.ended, c.t_end = m["how"], p._ts
        return True
    m = _NNODES.match(msg)
    if m:
        c = p.comms.get(m["comm"])
        if c is None:
            c = p.comms[m["comm"]] = Comm(comm=m["comm"], rank=int(m["rank"]),
                                          nranks=int(m["nranks"]), cuda_dev=-1)
        c.nnodes = int(m["nnodes"])
        return True
    return False


def now_utc() -> datetime:  # for tests that need "a time"
    return datetime.now(timezone.utc)
