#!/usr/bin/env python3
"""bench/RESULTS.md from the runs stored under bench/results/ (Python standard library only).

Each bench/results/*.jsonl file holds the current runs of one device model: a header line
  {"record": "run", "device": ..., "commit": ..., "date": ..., "command": ..., "cpu": ...}
followed by the JSON lines `gpumem bench --json` (or --json-out) wrote for that run: the figures, and
(from runs that have them) the default's goals (pattern "goal"). A file may hold several runs (a
header each). RESULTS.md holds one section per file.

  python3 scripts/results_md.py                  write bench/RESULTS.md
  python3 scripts/results_md.py --check          exit 1 if bench/RESULTS.md is not what it would write
  python3 scripts/results_md.py record bench/results/h100.jsonl --device "NVIDIA H100 80GB HBM3" \\
      --commit SHA --command "gpumem bench all ..." [--date YYYY-MM-DD] [--cpu MODEL] [--append] < run.jsonl
                                                 store a run (replacing the file's runs unless --append);
                                                 --info info.json (`gpumem info --json`) names the device
  python3 scripts/results_md.py goals out/bench.jsonl out/models.jsonl
                                                 one short table of the goal lines in those files (`gpumem
                                                 bench --json-out`, integrations/bench_models.py --json-out):
                                                 a row per goal, a cell per trace / size / model
"""
from __future__ import annotations

import argparse
import datetime
import difflib
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEADER_KEYS = ("device", "commit", "date", "command")
FIGURE_KEYS = {"pair": "ns_per_pair", "churn": "ns_per_op", "threads": "mops_per_s",
               "replay": "ns_per_op", "replay-warm": "ns_per_op", "goal": "value"}


class InputError(Exception):
    """A stored run that cannot be read: the message names file, line and what is wrong."""


# ---- reading ----

def json_objects(lines, name: str):
    """(FILE:LINE, object) for each non-blank line of a JSON-lines text; InputError on a line that
    is not a JSON object."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: a JSON object was expected")
        yield where, obj


def read_runs(path: pathlib.Path) -> list[dict]:
    """The runs of one file: [{"header": {...}, "records": [...]}], in file order."""
    runs: list[dict] = []
    with path.open(encoding="utf-8") as f:
        for where, obj in json_objects(f, path.name):
            if obj.get("record") == "run":
                missing = [k for k in HEADER_KEYS if not isinstance(obj.get(k), str) or not obj[k]]
                if missing:
                    raise InputError(f"{where}: the run header lacks {', '.join(missing)}")
                runs.append({"header": obj, "records": []})
                continue
            if not runs:
                raise InputError(f"{where}: a bench record before any run header "
                                 '({"record": "run", ...}; store runs with `results_md.py record`)')
            check_record(obj, where)
            runs[-1]["records"].append(obj)
    if not runs:
        raise InputError(f"{path.name}: no run in it")
    for run in runs:
        if not run["records"]:
            raise InputError(f"{path.name}: the run of {run['header']['date']} has no bench records")
    return runs


def check_record(obj: dict, where: str) -> None:
    pattern = obj.get("pattern")
    if pattern not in FIGURE_KEYS:
        raise InputError(f"{where}: unknown pattern {pattern!r} (expected one of {', '.join(FIGURE_KEYS)})")
    if not isinstance(obj.get("allocator"), str):
        raise InputError(f"{where}: no allocator")
    if pattern == "goal":
        # A goal read off the figures: measured (value, met true/false) or not (met null, a note).
        if not isinstance(obj.get("goal"), str) or not isinstance(obj.get("what"), str):
            raise InputError(f"{where}: a goal record without goal and what")
        if obj.get("compare") not in ("<=", ">=") or not isinstance(obj.get("bound"), (int, float)):
            raise InputError(f"{where}: a goal record without compare (<= or >=) and bound")
        if "met" not in obj or obj["met"] not in (True, False, None):
            raise InputError(f"{where}: a goal record without met (true, false or null)")
        if obj["met"] is not None and "note" not in obj and not isinstance(obj.get("value"), (int, float)):
            raise InputError(f"{where}: a measured goal record without value")
        return
    if "error" not in obj and not isinstance(obj.get(FIGURE_KEYS[pattern]), (int, float)):
        raise InputError(f"{where}: a {pattern} record without {FIGURE_KEYS[pattern]}")
    param = {"pair": "size_bytes", "threads": "threads", "replay": "trace", "replay-warm": "trace"}.get(pattern)
    if param and param not in obj:
        raise InputError(f"{where}: a {pattern} record without {param}")


# ---- formatting ----

def num(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def is_gpumem(name: str) -> bool:
    return name.startswith("gpumem")


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def ratio_text(pattern: str, gpumem_value, peers: dict) -> str:
    """How many times better gpumem is than the best peer (x > 1: gpumem faster)."""
    values = {k: v for k, v in peers.items() if v is not None}
    if gpumem_value is None or not values:
        return "–"
    if pattern == "threads":
        name, best = max(values.items(), key=lambda kv: kv[1])
        return f"{gpumem_value / best:,.1f}x ({name})" if best > 0 else "–"
    name, best = min(values.items(), key=lambda kv: kv[1])
    return f"{best / gpumem_value:,.1f}x ({name})" if gpumem_value > 0 else "–"


def run_section(run: dict) -> list[str]:
    h = run["header"]
    records = run["records"]
    # With --rounds, bench writes every round's line (`round`) and then one merged line per figure
    # (`rounds`, `round_values`, the median as its value): only the merged lines are the figures.
    merged = [r for r in records if "round" not in r]
    if merged:
        records = merged
    rounds = max((int(r.get("rounds", 1)) for r in records), default=1)
    reps = sorted({int(r["reps"]) for r in records if "reps" in r})
    options = sorted({r["pool_options"] for r in records if r.get("pool_options")})

    goals = [r for r in records if r["pattern"] == "goal"]
    records = [r for r in records if r["pattern"] != "goal"]

    out = [f"### `{h['commit']}`", ""]
    out.append(f"Command: `{h['command']}`")
    out.append("")
    facts = []
    if h.get("cpu"):
        facts.append(f"host CPU {h['cpu']}")
    facts.append("gpumem's pool options: " + (", ".join(f"`{o}`" for o in options) if options else "the defaults"))
    if reps:
        facts.append("each figure the median of " + "/".join(map(str, reps)) + " timed runs"
                     + (f", then the median of {rounds} rounds" if rounds > 1 else ""))
    hosts = [r["host_ns_per_sim_pair"] for r in records if r.get("host_ns_per_sim_pair")]
    if hosts:
        facts.append(f"host speed before each pattern (simulated 512 B pair) {num(min(hosts))}–{num(max(hosts))} ns")
    if h.get("note"):
        facts.append(h["note"])
    line = "; ".join(facts) + "."
    out.append(line[0].upper() + line[1:])
    out.append("")

    allocators: list[str] = []
    for r in records:
        if r["allocator"] not in allocators:
            allocators.append(r["allocator"])
    ours = [a for a in allocators if is_gpumem(a)]
    peers = [a for a in allocators if not is_gpumem(a)]
    columns = ours + peers

    def figure(r):
        return None if "error" in r else float(r[FIGURE_KEYS[r["pattern"]]])

    def cell(r):
        return "error" if r is None or "error" in r else num(figure(r))

    def rows_of(patterns, param, label):
        keys: list = []
        by: dict = {}
        for r in records:
            if r["pattern"] not in patterns:
                continue
            key = (r["pattern"], r.get(param))
            if key not in keys:
                keys.append(key)
            by[(key, r["allocator"])] = r
        rows = []
        for key in keys:
            row = [label(*key)]
            row += [cell(by.get((key, a))) if (key, a) in by else "" for a in columns]
            if ours and peers:
                mine = by.get((key, ours[0]))
                row.append(ratio_text(key[0], figure(mine) if mine else None,
                                      {a: figure(by[(key, a)]) for a in peers if (key, a) in by}))
            rows.append(row)
        return rows

    passes = max((int(r.get("passes", 0)) for r in records), default=0)
    replay_title = ("Replay (ns per op): the first pass on a fresh allocator, then a warm second pass" if not passes
                    else f"Replay (ns per op): the first pass on a fresh allocator, then the median of the {passes} "
                         "warm passes after it")
    sections = [
        ("Alloc+free pair (ns per pair)", ("pair",), "size_bytes", lambda p, v: size_text(int(v))),
        ("Churn: 1,000 live blocks, 256 B – 64 MiB (ns per op)", ("churn",), None, lambda p, v: "churn"),
        ("Threads, each on its own stream (Mops/s, higher is better)", ("threads",), "threads",
         lambda p, v: f"{v} threads" if v != 1 else "1 thread"),
        (replay_title, ("replay", "replay-warm"), "trace", lambda p, v: f"{v}, {'warm' if p == 'replay-warm' else 'first pass'}"),
    ]
    ratio_head = [f"{ours[0]} vs best peer"] if ours and peers else []
    for title, patterns, param, label in sections:
        rows = rows_of(patterns, param, label)
        if not rows:
            continue
        out.append(f"**{title}**")
        out.append("")
        out += table([""] + columns + ratio_head, rows)
        out.append("")

    # What gpumem's speed cost in memory, and in driver work.
    mem = [r for r in records if is_gpumem(r["allocator"]) and "peak_reserved_over_live" in r]
    # Peers that report their reserve (newer runs: cudaMallocAsync's pool, CUB's cache) follow gpumem's rows.
    peer_mem = [r for r in records if not is_gpumem(r["allocator"]) and "peak_reserved_over_live" in r]
    mem += peer_mem
    if mem:
        # Runs that record the peak in granules (and the driver's maps of the first pass) get two
        # more columns; a warm row's granules are then those of the warm pass that moved the most.
        granules = any("peak_granules" in r for r in mem)
        out.append(("**Reserve and driver work** (peak reserved / peak live, gpumem's and the peers' that report it; "
                    if peer_mem else "**gpumem's reserve and driver work** (peak reserved / peak live; ")
                   + "granules mapped + unmapped over the pattern, and of those, by the driver"
                   + ("; a warm row: the warm pass that moved the most)" if granules else ")"))
        out.append("")
        rows = []
        for r in mem:
            what = {"churn": "churn", "threads": f"threads {r.get('threads')}",
                    "replay": f"{r.get('trace')}, first pass", "replay-warm": f"{r.get('trace')}, warm"}[r["pattern"]]
            moved = [f"{int(r.get('granules_moved', 0)):,}", f"{int(r.get('driver_granules', 0)):,}"]
            row = [f"{what} ({r['allocator']})", f"{float(r['peak_reserved_over_live']):.3f}"]
            row += moved if is_gpumem(r["allocator"]) else ["–", "–"]
            if granules:
                row += [f"{int(r['peak_granules']):,}" if "peak_granules" in r else "",
                        f"{int(r['driver_maps']):,}" if "driver_maps" in r else ""]
            rows.append(row)
        out += table(["", "reserve", "granules moved", "by the driver"]
                     + (["peak's granules", "mapped by the driver"] if granules else []), rows)
        out.append("")

    if goals:
        met = sum(1 for g in goals if g["met"] is True)
        measured = sum(1 for g in goals if g["met"] is not None)
        out.append(f"**Goals of the default** ({goals[0]['allocator']}): {met} of {measured} met"
                   + (f", {len(goals) - measured} not measured" if measured < len(goals) else ""))
        out.append("")
        rows = []
        for g in goals:
            v = g.get("value")
            value = "–" if not isinstance(v, (int, float)) else num(v) if v >= 1000 else f"{v:.4g}"
            verdict = {True: "met", False: "**not met**", None: "not measured"}[g["met"]]
            if g.get("note"):
                verdict += f" ({g['note']})"
            rows.append([g["what"], value, f"{g['compare']} {g['bound']:g} {g.get('unit', '')}".rstrip(), verdict])
        out += table(["figure", "value", "goal", ""], rows)
        out.append("")

    errors = [r for r in records if "error" in r]
    if errors:
        out.append("**Errors**")
        out.append("")
        out += [f"- {r['allocator']}, {r['pattern']}: {r['error']}" for r in errors]
        out.append("")
    return out


def render(results_dir: pathlib.Path) -> str:
    files = sorted(results_dir.glob("*.jsonl"))
    if not files:
        raise InputError(f"{results_dir}: no *.jsonl file")
    loaded = [(f, read_runs(f)) for f in files]
    # GPU models first, by name; the simulated device last.
    loaded.sort(key=lambda fr: (fr[1][0]["header"].get("simulated", False), fr[1][0]["header"]["device"]))
    out = [
        "# Measured runs",
        "",
        "Generated by `scripts/results_md.py` from `bench/results/*.jsonl`: do not edit by hand. Each",
        "file holds the current runs of one device model, each run a header (date, commit, command,",
        "device) and the JSON lines `gpumem bench --json` wrote. To record a run:",
        "",
        "```sh",
        "scripts/gpu_check.sh --out out        # on a GPU: out/bench.jsonl (gpumem bench all --json-out), out/info.json",
        "python3 scripts/results_md.py record bench/results/MODEL.jsonl --info out/info.json \\",
        "    --commit \"$(git rev-parse --short HEAD)\" --command \"gpumem bench all ...\" --input out/bench.jsonl",
        "python3 scripts/results_md.py          # rewrites this file; ctest checks it is current",
        "```",
        "",
        "Peers are timed in the same process as gpumem, in the same tables. \"vs best peer\" is how many",
        "times faster gpumem is than the fastest peer on that row.",
        "",
    ]
    for f, runs in loaded:
        out.append(f"## {runs[0]['header']['device']}")
        out.append("")
        out.append(f"From `bench/results/{f.name}`.")
        out.append("")
        for run in runs:
            out += run_section(run)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


# ---- commands ----

def cmd_record(args) -> int:
    source = open(args.input, encoding="utf-8") if args.input else sys.stdin
    records = []
    with source:
        try:
            for where, obj in json_objects(source, args.input or "<stdin>"):
                check_record(obj, where)
                records.append(obj)
        except InputError as e:
            print(f"results_md.py record: {e}", file=sys.stderr)
            return 2
    if not records:
        print("results_md.py record: no bench records on the input", file=sys.stderr)
        return 2
    device = args.device
    if args.info:
        try:
            with open(args.info, encoding="utf-8") as f:
                first = next((line for line in f if line.strip()), "")
            device = device or json.loads(first)["name"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"results_md.py record: --info {args.info}: no device name in it ({e})", file=sys.stderr)
            return 2
    if not device:
        print("results_md.py record: name the device with --device or --info", file=sys.stderr)
        return 2
    header = {"record": "run", "device": device, "commit": args.commit,
              "date": args.date or datetime.date.today().isoformat(), "command": args.command}
    if args.cpu:
        header["cpu"] = args.cpu
    if args.note:
        header["note"] = args.note
    if args.simulated or all(r.get("device") in ("simulated", "host") for r in records):
        header["simulated"] = True
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a" if args.append else "w", encoding="utf-8") as f:
        for obj in [header] + records:
            f.write(json.dumps(obj, sort_keys=False, separators=(",", ":")) + "\n")
    print(f"results_md.py: {len(records)} records of {device} in {out}")
    return 0


# One row per goal: what it measures, without the trace / size / model its cells name.
GOAL_LABELS = {
    "reserve": "peak reserved / peak live",
    "first_pass_granules": "first pass: granules mapped / peak's",
    "warm_granules": "warm pass: granules moved, % of peak's",
    "warm_ns": "warm pass: ns/op",
    "first_pass_vs_async": "first pass: ns/op / cudaMallocAsync's",
    "pair_ns": "pair: ns per alloc+free",
    "churn_ns": "churn: ns/op",
    "churn_reserve": "churn: peak reserved / peak live",
    "threads_mops": "16 threads: Mops/s",
    "threads_scaling": "16 threads / 1 thread",
    "model_step": "model step time / native's",
    "model_reserve": "model peak reserved / allocated",
}


def goals_table(goals: list[dict]) -> list[str]:
    """The goal lines as one short table: a row per goal, a cell per trace / size / model (`*`: not
    met, `n/a`: not measured), and a count."""
    rows: dict = {}
    for g in goals:
        rows.setdefault(g["goal"], []).append(g)
    width = max([len(GOAL_LABELS.get(k, k)) for k in rows] + [4])
    out = [f"{'goal':<{width}}  {'bound':<9} {'met':>5}  values (* not met)"]
    for key, gs in rows.items():
        cells = []
        for g in gs:
            param = str(g.get("param") or "")
            for suffix in (".csv.gz", ".csv"):
                param = param.removesuffix(suffix)
            v = g.get("value")
            value = "n/a" if g["met"] is None else f"{v:.4g}" if isinstance(v, (int, float)) else "error"
            cells.append(f"{param + ' ' if param else ''}{value}{'*' if g['met'] is False else ''}")
        met = sum(1 for g in gs if g["met"] is True)
        measured = sum(1 for g in gs if g["met"] is not None)
        out.append(f"{GOAL_LABELS.get(key, key):<{width}}  {g['compare'] + ' ' + format(g['bound'], 'g'):<9} "
                   f"{f'{met}/{measured}':>5}  {', '.join(cells)}")
    met = sum(1 for g in goals if g["met"] is True)
    measured = sum(1 for g in goals if g["met"] is not None)
    notes = sorted({g["note"] for g in goals if g["met"] is None and g.get("note")})
    out.append(f"goals met: {met} of {measured} measured" + (f"; not measured: {'; '.join(notes)}" if notes else ""))
    return out


def cmd_goals(args) -> int:
    goals = []
    for name in args.files:
        try:
            with open(name, encoding="utf-8") as f:
                for where, obj in json_objects(f, name):
                    if obj.get("pattern") == "goal":
                        check_record(obj, where)
                        goals.append(obj)
        except FileNotFoundError:
            print(f"({name}: not there; its step did not run)")
        except (InputError, OSError) as e:
            print(f"results_md.py goals: {e}", file=sys.stderr)
            return 2
    if not goals:
        print("no goal lines in " + ", ".join(args.files))
        return 0
    print("\n".join(goals_table(goals)))
    return 0


def cmd_generate(args) -> int:
    results_dir = pathlib.Path(args.results)
    target = pathlib.Path(args.output)
    try:
        text = render(results_dir)
    except (InputError, OSError) as e:
        print(f"results_md.py: {e}", file=sys.stderr)
        return 2
    if args.check:
        current = target.read_bytes().decode("utf-8", "replace") if target.exists() else ""
        if target.exists() and target.read_bytes() == text.encode("utf-8"):
            print(f"results_md.py: {target} is current")
            return 0
        print(f"results_md.py: {target} is not what {results_dir}/*.jsonl make: "
              f"run `python3 scripts/results_md.py` and commit it", file=sys.stderr)
        diff = difflib.unified_diff(current.splitlines(), text.splitlines(), str(target), "generated", lineterm="")
        for n, line in enumerate(diff):
            if n == 60:
                print("...", file=sys.stderr)
                break
            print(line, file=sys.stderr)
        return 1
    target.write_text(text, encoding="utf-8")
    print(f"results_md.py: wrote {target}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["record"]:
        p = argparse.ArgumentParser(prog="results_md.py record", description="store a bench run under bench/results/")
        p.add_argument("out", help="the device model's file, e.g. bench/results/h100.jsonl")
        p.add_argument("--device", help="device name as the GPU reports it, e.g. 'NVIDIA H100 80GB HBM3'")
        p.add_argument("--info", help="`gpumem info --json` output of the device: its name, when --device is not given")
        p.add_argument("--commit", required=True, help="the commit the measured build was made from")
        p.add_argument("--command", required=True, help="the command that measured it")
        p.add_argument("--date", help="YYYY-MM-DD (default: today)")
        p.add_argument("--cpu", help="the host's CPU model")
        p.add_argument("--note", help="one sentence about the run")
        p.add_argument("--simulated", action="store_true", help="the simulated device (default: when every record says so)")
        p.add_argument("--append", action="store_true", help="add the run to the file's runs instead of replacing them")
        p.add_argument("--input", help="the JSON lines of gpumem bench (default: stdin)")
        return cmd_record(p.parse_args(argv[1:]))
    if argv[:1] == ["goals"]:
        p = argparse.ArgumentParser(prog="results_md.py goals", description="the goal lines of bench runs, one short table")
        p.add_argument("files", nargs="+", help="JSON lines of `gpumem bench --json-out` or bench_models.py --json-out")
        return cmd_goals(p.parse_args(argv[1:]))
    p = argparse.ArgumentParser(prog="results_md.py", description="write bench/RESULTS.md from bench/results/*.jsonl")
    p.add_argument("--check", action="store_true", help="only compare: exit 1 if the file differs from what would be written")
    p.add_argument("--results", default=str(ROOT / "bench" / "results"), help="folder of the stored runs")
    p.add_argument("--output", default=str(ROOT / "bench" / "RESULTS.md"), help="the file to write or check")
    return cmd_generate(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
