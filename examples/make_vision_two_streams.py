#!/usr/bin/env python3
"""Writes examples/vision_two_streams.csv: a CNN-training-like trace with varying image sizes on two
streams, in RMM's log CSV. Standard library only; a fixed seed, so the same bytes every run.

Stream 0x1 computes; stream 0x2 loads the next batch (its input buffer is allocated on 0x2 and freed
on 0x1 after the step used it: the cross-stream free that real data loaders make). Each step picks
an image side between 128 and 320 px, so activation sizes change step to step."""
import random

rng = random.Random(20261202)
rows = []
t_us = [12 * 3600 * 10**6]
addr = [0x7F0000000000]
live = {}


def clock():
    t_us[0] += rng.randint(5, 60)
    t = t_us[0]
    return f"{t // 3600000000 % 24:02d}:{t // 60000000 % 60:02d}:{t // 1000000 % 60:02d}.{t % 1000000:06d}"


def alloc(size, stream):
    addr[0] += (size + 0xFFFF) & ~0xFFFF  # the recording allocator's addresses: never reused here
    p = addr[0]
    live[p] = size
    rows.append(f"0,{clock()},allocate,{p:#x},{size},{stream:#x}")
    return p


def free(p, stream):
    rows.append(f"0,{clock()},free,{p:#x},{live.pop(p)},{stream:#x}")


batch, channels = 32, [64, 128, 256, 512]
weights = [alloc(rng.randint(1, 64) * 4096 * 9, 0x1) for _ in range(40)]  # persistent
next_input = None
for step in range(24):
    side = rng.choice(range(128, 321, 32))
    inp = next_input or alloc(batch * 3 * side * side * 2, 0x2)
    next_side = rng.choice(range(128, 321, 32))
    next_input = alloc(batch * 3 * next_side * next_side * 2, 0x2)  # prefetch on the loader stream
    acts = []
    s = side
    for stage, c in enumerate(channels):
        for _ in range(3):
            acts.append(alloc(batch * c * s * s * 2, 0x1))
            tmp = alloc(rng.choice([512, 1024, 4096, 65536]), 0x1)
            free(tmp, 0x1)
        s //= 2
    free(inp, 0x1)  # used by the step on stream 0x1: freed there
    grads = []
    for a in reversed(acts):
        g = alloc(live[a], 0x1)
        free(a, 0x1)
        grads.append(g)
        if len(grads) > 2:
            free(grads.pop(0), 0x1)
    for g in grads:
        free(g, 0x1)
free(next_input, 0x1)
for w in weights:
    free(w, 0x1)

with open("examples/vision_two_streams.csv", "w") as f:
    f.write("Thread,Time,Action,Pointer,Size,Stream\n")
    f.write("\n".join(rows) + "\n")
print(f"examples/vision_two_streams.csv: {len(rows)} rows")
