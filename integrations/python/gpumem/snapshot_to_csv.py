#!/usr/bin/env python3
"""Convert a PyTorch CUDA memory snapshot to gpumem's trace format (RMM's log CSV).

    gpumem-snapshot-to-csv SNAPSHOT.pickle -o TRACE.csv [--device N]
    python3 -m gpumem.snapshot_to_csv ...   (or this file run directly: it imports nothing of gpumem)

The snapshot is what ``torch.cuda.memory._dump_snapshot()`` writes after
``torch.cuda.memory._record_memory_history()``: a pickled dict with ``segments`` and
``device_traces`` (one list per device of trace entries, each a dict with ``action``, ``addr``
(``device_free`` instead for ``oom``), ``size``, ``stream``, ``time_us`` and ``frames``).

Mapping, per entry of the chosen device's trace, in order:
  alloc           -> ``allocate`` (Pointer = addr, Size = size, Stream = stream)
  free_completed  -> ``free``: the moment the memory became reusable (the block's allocated size)
  free_requested  -> only remembered: used as the free when the block never gets a
                     free_completed (the history skipped them, or the snapshot was taken while
                     the free was pending); said on stderr
  oom             -> ``allocate failure`` with the requested size
  segment_*, snapshot, annotate, anything else -> ignored
A free of an address the history never saw allocated (recording started mid-run, or the ring
buffer dropped the alloc) is dropped, with a count on stderr. Time is ``time_us`` (microseconds
since the Unix epoch) as the UTC wall clock ``HH:MM:SS.micro``; Thread is 0 (snapshots do not
record threads).

Standard library only. The pickle is read by an Unpickler that refuses every global except a few
builtins: a snapshot holds only dicts, lists, tuples, strings, numbers and booleans.
"""

import argparse
import io
import pickle
import sys

HEADER = "Thread,Time,Action,Pointer,Size,Stream"
_U64 = (1 << 64) - 1
_SAFE_BUILTINS = frozenset({"dict", "list", "tuple", "set", "frozenset", "str", "bytes",
                            "bytearray", "int", "float", "bool", "complex"})


class SnapshotError(Exception):
    """The input is not a usable snapshot; the message says why."""


class _BuiltinsOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "builtins" and name in _SAFE_BUILTINS:
            return super().find_class(module, name)
        raise SnapshotError(
            f"the pickle refers to {module}.{name}; a PyTorch memory snapshot holds only builtin "
            "types, so this file is not one (refusing to load it: unpickling arbitrary classes "
            "can run code)")


def load_snapshot(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SnapshotError(f"{path}: {e.strerror}") from None
    try:
        snap = _BuiltinsOnlyUnpickler(io.BytesIO(data)).load()
    except SnapshotError as e:
        raise SnapshotError(f"{path}: {e}") from None
    except Exception as e:  # a truncated or non-pickle file: many exception types
        raise SnapshotError(f"{path}: not a readable pickle ({type(e).__name__}: {e})") from None
    if not isinstance(snap, dict) or "device_traces" not in snap:
        raise SnapshotError(
            f"{path}: not a memory snapshot (expected a dict with 'segments' and 'device_traces', "
            "as torch.cuda.memory._dump_snapshot() writes)")
    traces = snap["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError(f"{path}: 'device_traces' is not a list of lists")
    return snap


def _format_time(time_us):
    if time_us is None:
        return ""
    t = int(time_us)
    if t < 0:
        return ""
    us = t % 1_000_000
    s = t // 1_000_000 % 86400
    return f"{s // 3600:02}:{s // 60 % 60:02}:{s % 60:02}.{us:06}"


def _row(time_us, action, pointer, size, stream):
    return (f"0,{_format_time(time_us)},{action},0x{int(pointer) & _U64:x},{int(size)},"
            f"0x{int(stream) & _U64:x}")


class Stats:
    def __init__(self):
        self.allocs = 0
        self.frees = 0
        self.frees_from_requested = 0   # blocks with only a free_requested
        self.ooms = 0
        self.dropped = 0                # frees of addresses never seen allocated
        self.missing_free = 0           # an alloc reused a live address with no free at all
        self.ignored = {}               # action -> count
        self.live_at_end = 0


def convert_entries(entries, stats=None):
    """Returns the CSV rows (without the header) for one device's trace entries."""
    stats = stats if stats is not None else Stats()
    out = []          # (position, sequence, row): fallback frees go back to their free_requested
    seq = 0
    live = {}         # addr -> {"size", "stream", "req": (pos, time_us, stream) or None}

    def emit(pos, row):
        nonlocal seq
        out.append((pos, seq, row))
        seq += 1

    def free_from_requested(addr, block):
        pos, time_us, stream = block["req"]
        emit(pos, _row(time_us, "free", addr, block["size"], stream))
        stats.frees_from_requested += 1
        stats.frees += 1

    for pos, e in enumerate(entries):
        if not isinstance(e, dict):
            raise SnapshotError(f"trace entry {pos} is a {type(e).__name__}, not a dict")
        action = e.get("action")
        if action == "alloc":
            addr, size = e["addr"], e["size"]
            old = live.pop(addr, None)
            if old is not None:
                if old["req"] is not None:
                    free_from_requested(addr, old)
                else:
                    # Neither free was recorded (the ring buffer dropped it): end the old block now.
                    emit(pos, _row(e.get("time_us"), "free", addr, old["size"], old["stream"]))
                    stats.missing_free += 1
                    stats.frees += 1
            live[addr] = {"size": size, "stream": e.get("stream", 0), "req": None}
            emit(pos, _row(e.get("time_us"), "allocate", addr, size, e.get("stream", 0)))
            stats.allocs += 1
        elif action == "free_requested":
            block = live.get(e.get("addr"))
            if block is None:
                stats.dropped += 1
            else:
                block["req"] = (pos, e.get("time_us"), e.get("stream", block["stream"]))
        elif action == "free_completed":
            addr = e.get("addr")
            block = live.pop(addr, None)
            if block is None:
                stats.dropped += 1
            else:
                emit(pos, _row(e.get("time_us"), "free", addr, block["size"],
                               e.get("stream", block["stream"])))
                stats.frees += 1
        elif action == "oom":
            emit(pos, _row(e.get("time_us"), "allocate failure", 0, e.get("size", 0),
                           e.get("stream", 0)))
            stats.ooms += 1
        else:
            stats.ignored[str(action)] = stats.ignored.get(str(action), 0) + 1

    for addr, block in list(live.items()):
        if block["req"] is not None:
            free_from_requested(addr, block)
            del live[addr]
    stats.live_at_end = len(live)
    out.sort(key=lambda x: (x[0], x[1]))
    return [row for _, _, row in out]


def pick_device(snap, device):
    traces = snap["device_traces"]
    if device is not None:
        if not 0 <= device < len(traces):
            raise SnapshotError(f"--device {device}: the snapshot has traces for {len(traces)} "
                                f"device(s) (0..{len(traces) - 1})")
        return device
    used = [i for i, t in enumerate(traces) if t]
    if len(used) > 1:
        raise SnapshotError(f"the snapshot has traces for devices {used}; choose one with --device")
    if not used:
        if not traces:
            raise SnapshotError("the snapshot has no device traces (was "
                                "torch.cuda.memory._record_memory_history() enabled?)")
        return 0
    return used[0]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="gpumem-snapshot-to-csv",
                                 description="PyTorch memory snapshot -> gpumem trace CSV")
    ap.add_argument("snapshot", help="pickle written by torch.cuda.memory._dump_snapshot()")
    ap.add_argument("-o", "--output", default="-", help="CSV to write ('-' or absent: stdout)")
    ap.add_argument("--device", type=int, default=None,
                    help="device whose trace to convert (default: the only one with entries)")
    args = ap.parse_args(argv)
    prog = "gpumem-snapshot-to-csv"
    try:
        snap = load_snapshot(args.snapshot)
        dev = pick_device(snap, args.device)
        stats = Stats()
        rows = convert_entries(snap["device_traces"][dev], stats)
    except (SnapshotError, KeyError, TypeError, ValueError) as e:
        what = f"an entry lacks the field {e}" if isinstance(e, KeyError) else str(e)
        print(f"{prog}: error: {what}", file=sys.stderr)
        return 2
    text = HEADER + "\n" + "".join(r + "\n" for r in rows)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            with open(args.output, "w", newline="\n") as f:
                f.write(text)
        except OSError as e:
            print(f"{prog}: error: {args.output}: {e.strerror}", file=sys.stderr)
            return 2
    print(f"{prog}: device {dev}: {stats.allocs} allocate, {stats.frees} free, "
          f"{stats.ooms} allocate failure rows; {stats.live_at_end} block(s) still live at the end",
          file=sys.stderr)
    if stats.frees_from_requested:
        print(f"{prog}: {stats.frees_from_requested} block(s) had only a free_requested (no "
              "free_completed): their free uses the free_requested entry", file=sys.stderr)
    if stats.dropped:
        print(f"{prog}: dropped {stats.dropped} free entr{'y' if stats.dropped == 1 else 'ies'} of "
              "addresses not allocated in the history (recording started mid-run)",
              file=sys.stderr)
    if stats.missing_free:
        print(f"{prog}: {stats.missing_free} address(es) were allocated again with no free "
              "recorded: a free was added just before the new alloc", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
