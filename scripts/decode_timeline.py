#!/usr/bin/env python3
"""decode_timeline.py [--prefill] PROFILE.sqlite: where a decode (or, with --prefill, a prefill) step's time
goes, kernel by kernel, from an Nsight Systems trace (`nsys profile --cuda-graph-trace=node -t cuda`, exported with `nsys export --type sqlite`),
as scripts/decode_timeline.sh records it on the GPU machine.

Decode steps are delimited by argmax_merge_advance_kernel (the last kernel of every decode graph). For the
last complete steps of every GPU it prints:
  - per kernel name: launches per step, mean start-to-end time, and the EXPOSED time per step: what the
    kernel adds after the previous kernel of the same GPU ended (kernels launched with programmatic
    dependent launch start early and wait, so start-to-end overstates them);
  - one step kernel by kernel: start and end (us after the previous step's end) and the overlap with
    the previous kernel.
--prefill: steps are delimited by embedding_kernel (the first kernel of every step); for the last complete
steps it prints the same per-kernel table and the time the GPU sat idle between kernels (host-bound gaps).
Reads only the CUPTI kernel table; standard library only.
"""
import collections
import sqlite3
import sys

STEP_END = "argmax_merge_advance"
STEPS = 4  # complete steps analysed per GPU (the last ones but one)


def kernels(path):
    db = sqlite3.connect(path)
    rows = db.execute("select k.start, k.end, k.deviceId, s.value from CUPTI_ACTIVITY_KIND_KERNEL k "
                      "join StringIds s on k.shortName = s.id order by k.deviceId, k.start").fetchall()
    by_dev = collections.defaultdict(list)
    for start, end, dev, name in rows:
        by_dev[dev].append((start, end, name))
    return by_dev


def report(dev, ks):
    ends = [i for i, k in enumerate(ks) if STEP_END in k[2]]
    print(f"\n## GPU {dev}: {len(ks)} kernels, {len(ends)} decode steps")
    if len(ends) < STEPS + 2:
        print("too few decode steps in the trace")
        return
    steps = [(ends[j - 1] + 1, ends[j]) for j in range(len(ends) - STEPS - 1, len(ends) - 1)]
    agg = collections.defaultdict(lambda: [0.0, 0.0, 0])
    print("step us (previous step's end to this step's end):",
          ", ".join(f"{(ks[b][1] - ks[a - 1][1]) / 1e3:.1f}" for a, b in steps))
    for a, b in steps:
        prev_end = ks[a - 1][1]
        for start, end, name in ks[a:b + 1]:
            agg[name][0] += (end - start) / 1e3
            agg[name][1] += (end - max(start, prev_end)) / 1e3
            agg[name][2] += 1
            prev_end = max(prev_end, end)
    print("\n| kernel | launches per step | mean start-to-end us | exposed us per step |")
    print("|---|---|---|---|")
    for name, (dur, exposed, count) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name[:60]} | {count / STEPS:.0f} | {dur / count:.2f} | {exposed / STEPS:.1f} |")
    a, b = steps[-1]
    base = prev_end = ks[a - 1][1]
    print("\nlast analysed step, kernel by kernel (us after the previous step's end):\n")
    print("| kernel | start | end | exposed |")
    print("|---|---|---|---|")
    for start, end, name in ks[a:b + 1]:
        print(f"| {name[:40]} | {(start - base) / 1e3:.2f} | {(end - base) / 1e3:.2f} | "
              f"{(end - max(start, prev_end)) / 1e3:.2f} |")
        prev_end = max(prev_end, end)


def report_prefill(dev, ks):
    """Per kernel name over the last STEPS complete prefill steps (embedding_kernel to embedding_kernel)."""
    starts = [i for i, k in enumerate(ks) if "embedding_kernel" in k[2]]
    print(f"\n## GPU {dev}: {len(ks)} kernels, {len(starts)} steps")
    if len(starts) < STEPS + 1:
        print("too few steps in the trace")
        return
    spans = [(starts[j], starts[j + 1]) for j in range(len(starts) - STEPS - 1, len(starts) - 1)]
    agg = collections.defaultdict(lambda: [0.0, 0.0, 0])
    idle = total = 0.0
    for a, b in spans:
        total += (ks[b][0] - ks[a][0]) / 1e3
        prev_end = ks[a][0]
        for start, end, name in ks[a:b]:
            idle += max(0, start - prev_end) / 1e3
            agg[name][0] += (end - start) / 1e3
            agg[name][1] += max(0, end - max(start, prev_end)) / 1e3
            agg[name][2] += 1
            prev_end = max(prev_end, end)
    print(f"step us: {total / STEPS:.1f} (GPU idle between kernels {idle / STEPS:.1f})")
    print("\n| kernel | launches per step | mean start-to-end us | exposed us per step | % of step |")
    print("|---|---|---|---|---|")
    for name, (dur, exposed, count) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name[:60]} | {count / STEPS:.0f} | {dur / count:.2f} | {exposed / STEPS:.1f} | "
              f"{100 * exposed / total:.1f} |")


def main():
    args = [a for a in sys.argv[1:] if a != "--prefill"]
    if len(args) != 1:
        sys.exit("usage: decode_timeline.py [--prefill] PROFILE.sqlite")
    for dev, ks in sorted(kernels(args[0]).items()):
        (report_prefill if "--prefill" in sys.argv else report)(dev, ks)


if __name__ == "__main__":
    main()
