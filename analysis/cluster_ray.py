"""Every node's map as a Ray task on the node that holds its capture (``cluster --engine ray``).

Ray is optional (``pip install 'rdmascope[ray]'``). ``run_maps_ray(args, address=...)``
connects to a running Ray cluster (``address``, e.g. ``ray://head:10001`` or ``auto``; without
one, a local Ray instance is started with this machine's cores) and submits one task per node:
``cluster_map.map_node`` on that node's capture. Placement (``placement``): a Ray node whose
host name is the capture's host (the name the manifest holds, which is the recorder's host
name) gets the task with hard node affinity, so the capture never crosses the network; only
its summary (a few MB) does. A capture whose host is not a live Ray node runs anywhere, which
works when the path is on a file system every Ray node mounts (a shared FS) and is named in
the failure otherwise. Before the map, ``locate`` asks every Ray node which of the paths it
holds (manifest and footers only), so the driver needs no copy of them and each task goes to
the node where its path was found. A task that fails (its worker or node died, or it raised) is retried
once (``max_retries=1``, ``retry_exceptions=True``) and then reported as that node's failure;
``ray.get`` is bounded by ``timeout_s`` per task, so a task that can never run is a failure
too, never a hang.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from rdmascope.analysis.cluster_map import NodeSummary, map_node, worker_memory
from rdmascope.analysis.stream import open_capture

from rdmascope.capture import CaptureError

HOW_TO_GET_RAY = ("--engine ray needs Ray, an optional extra: pip install 'rdmascope[ray]' "
                  "(or pip install ray) on the head node and every node holding a capture")


class RayUnavailable(RuntimeError):
    """Ray is not installed (the message says how to get it) or cannot be reached."""


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(HOW_TO_GET_RAY) from exc
    return ray


def _map_task(args: tuple) -> NodeSummary:
    worker_memory()
    summary = map_node(*args)
    summary.ran_on = socket.gethostname()  # type: ignore[attr-defined]
    return summary


def placement(host: str, ray_nodes: list[dict[str, Any]]) -> str | None:
    """The Ray node id whose host name is ``host`` (alive; the short name also matches a
    fully qualified one), else None (run anywhere: the capture must be on a shared FS).
    ``ray_nodes``: ``ray.nodes()`` records (``NodeID``, ``NodeManagerHostname``, ``Alive``)."""
    short = host.split(".")[0]
    for n in ray_nodes:
        if not n.get("Alive", False):
            continue
        name = str(n.get("NodeManagerHostname") or "")
        if name == host or name.split(".")[0] == short:
            return str(n["NodeID"])
    return None


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray (``address``) or start a local instance; True when this call started or
    connected it (the caller then ``ray.shutdown()``s). Raises ``RayUnavailable``."""
    return _connect(_import_ray(), address, num_cpus)


def _connect(ray, address, num_cpus=None) -> bool:
    """Connect to (``address``) or start a local Ray; True when this call started it."""
    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        else:
            ray.init(num_cpus=num_cpus or (os.cpu_count() or 1), log_to_driver=False,
                     include_dashboard=False)
    except Exception as exc:  # noqa: BLE001 (ray raises many kinds: one message)
        raise RayUnavailable(f"cannot start or reach Ray"
                             f"{' at ' + address if address else ''}: {exc}") from exc
    return True


def _open_here(paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in paths:
        if not os.path.isdir(p):
            continue
        try:
            out[p] = open_capture(p)
        except (CaptureError, OSError, ValueError) as exc:
            out[p] = f"{p} (on {socket.gethostname()}): {exc}"
    return out


def locate(paths: list[str], *, address: str | None = None, timeout_s: float = 600
           ) -> tuple[dict[str, Any], dict[str, str]]:
    """Find the captures on the Ray nodes: one small task per alive node opens (manifest and
    segment footers, no readings) the paths that exist there. Returns ({path: ``CaptureInfo``
    or an error string}, {path: Ray node id holding it}). A path found on no node is absent
    (named by the caller). Raises ``RayUnavailable``."""
    ray = _import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    _connect(ray, address)
    task = ray.remote(num_cpus=0, max_retries=1)(_open_here)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    refs = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(paths): str(n["NodeID"]) for n in alive}
    opened: dict[str, Any] = {}
    where: dict[str, str] = {}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    for r in ready:
        try:
            got = ray.get(r)
        except Exception:  # noqa: BLE001 (a node that cannot answer holds nothing we can map)
            continue
        for p, info in got.items():
            if p not in opened or isinstance(opened[p], str):
                opened[p] = info
                where[p] = refs[r]
    return opened, where


def run_maps_ray(args: list[tuple], *, address: str | None = None,
                 progress: Callable | None = None, timeout_s: float | None = 6 * 3600,
                 num_cpus: int | None = None, where: dict | None = None,
                 on_summary: Callable | None = None, order: list[int] | None = None
                 ) -> list[NodeSummary]:
    """Run ``map_node(*a)`` for each ``a`` of ``args`` as Ray tasks (module docstring); return
    the summaries in order (a failed node: a summary whose ``error`` says what happened).
    ``where``: {path: Ray node id} of the node holding each capture (``locate``), tried before
    the host name. ``on_summary(k, summary)``: called as each comes in; ``order``: the order
    the tasks are submitted in (node indices; default as given). Raises ``RayUnavailable`` without Ray or when ``address`` cannot be
    reached."""
    ray = _import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    started = _connect(ray, address, num_cpus)
    try:
        nodes = ray.nodes()
        task = ray.remote(max_retries=1, retry_exceptions=True, num_cpus=1)(_map_task)
        placed: dict[int, str | None] = {}
        pending = {}
        for k in (order if order is not None else range(len(args))):
            a = args[k]
            nid = (where or {}).get(a[0]) or placement(a[3], nodes)
            opts = {}
            if nid is not None:
                opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(nid, soft=False)
            placed[k] = nid
            pending[task.options(**opts).remote(a)] = k
        out: list[NodeSummary | None] = [None] * len(args)
        done = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout_s)
            if not ready:  # nothing finished within the bound: the rest are failures
                for r, k in pending.items():
                    ray.cancel(r, force=True)
                    out[k] = NodeSummary(path=args[k][0], host=args[k][3], error=(
                        f"{args[k][0]}: its Ray task did not finish within {timeout_s:g} s"))
                break
            for r in ready:
                k = pending.pop(r)
                try:
                    out[k] = ray.get(r)
                except Exception as exc:  # noqa: BLE001 (after its one retry: that node's failure)
                    why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc)
                    out[k] = NodeSummary(path=args[k][0], host=args[k][3], error=(
                        f"{args[k][0]}: its Ray task failed twice (retried once): {why}"
                        + ("" if placed[k] else " (no Ray node is named "
                           f"{args[k][3]}: the capture must be on a file system every Ray "
                           "node mounts)")))
                if on_summary:
                    on_summary(k, out[k])
                done += 1
                if progress:
                    progress(done, len(args), args[k][3])
        return out  # type: ignore[return-value]
    finally:
        if started:
            ray.shutdown()
