#!/usr/bin/env python3
"""Generates the small example traces in this folder (RMM log CSV), deterministically.

    python3 examples/make_examples.py            # rewrites the .csv files next to this script

Standard library only; a fixed seed per trace, so running it again gives the same bytes. The
traces are synthetic: shaped after the real ones in ../shared/traces (see examples/README.md), but
small enough to ship in the repository and replay in a blink.
"""
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


class Recorder:
    """Writes rows and plays the recording allocator: addresses are handed out like a simple
    caching allocator would (a freed address is reused for the next request of the same rounded
    size), so pointers repeat the way they do in real traces but never collide while live."""

    def __init__(self, seed, start_us=12 * 3600 * 10**6):
        self.rng = random.Random(seed)
        self.rows = []
        self.now = start_us
        self.next_addr = 0x7F0000000000
        self.cache = {}  # rounded size -> [free addresses]
        self.live = {}  # address -> (size, stream)

    def _tick(self):
        self.now += self.rng.randint(2, 60)

    def _time(self):
        s, us = divmod(self.now, 10**6)
        return "%02d:%02d:%02d.%06d" % (s // 3600 % 24, s // 60 % 60, s % 60, us)

    def alloc(self, size, stream=0):
        self._tick()
        rounded = max(512, (size + 511) // 512 * 512)
        free = self.cache.get(rounded)
        if free:
            addr = free.pop()
        else:
            addr = self.next_addr
            self.next_addr += (rounded + 2 * MiB - 1) // (2 * MiB) * 2 * MiB if rounded >= MiB else rounded
        self.live[addr] = (size, stream)
        self.rows.append("0,%s,allocate,0x%x,%d,0x%x" % (self._time(), addr, size, stream))
        return addr

    def free(self, addr, stream=None):
        self._tick()
        size, alloc_stream = self.live.pop(addr)
        stream = alloc_stream if stream is None else stream
        rounded = max(512, (size + 511) // 512 * 512)
        self.cache.setdefault(rounded, []).append(addr)
        self.rows.append("0,%s,free,0x%x,%d,0x%x" % (self._time(), addr, size, stream))

    def fail(self, size, stream=0):
        self._tick()
        self.rows.append("0,%s,allocate failure,0x0,%d,0x%x" % (self._time(), size, stream))

    def write(self, name):
        with open(os.path.join(HERE, name), "w", newline="\n") as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n")
            f.write("\n".join(self.rows) + "\n")
        print("%s: %d rows" % (name, len(self.rows)))


def small_training():
    """A scaled-down conv-net training loop: per step, a forward pass keeps one activation per
    layer (sizes shrink as channels grow and the image shrinks), with small workspaces and scalars
    that come and go; the backward pass frees activations in reverse and allocates gradients; the
    optimizer step touches small per-parameter buffers. Everything a step makes is freed by its end,
    so it is a clean trace: the same shapes every step, which a caching pool serves perfectly."""
    r = Recorder(seed=50)
    layers = [(64, 56), (64, 56), (128, 28), (128, 28), (256, 14), (256, 14), (512, 7), (512, 7)]
    batch = 16
    for _step in range(6):
        x = r.alloc(batch * 3 * 112 * 112 * 2)  # the input batch, bf16
        acts = []
        for ch, hw in layers:
            act = r.alloc(batch * ch * hw * hw * 2)
            ws = r.alloc(ch * 9 * 64 * 2)  # conv workspace
            stat = [r.alloc(ch * 4) for _ in range(2)]  # batch-norm mean and var
            scalar = r.alloc(8)
            r.free(scalar)
            r.free(ws)
            acts.append((act, stat))
        logits = r.alloc(batch * 1000 * 4)
        loss = r.alloc(4 * 128)
        r.free(logits)
        for act, stat in reversed(acts):
            grad = r.alloc(r.live[act][0])
            for s in stat:
                r.free(s)
            r.free(act)
            wgrad = r.alloc(256 * 9 * 64 * 2)
            r.free(grad)
            r.free(wgrad)
        r.free(loss)
        r.free(x)
        for _param in range(40):  # optimizer: momentum update scratch per parameter
            tmp = r.alloc(r.rng.choice([1024, 2048, 4096, 65536, 262144]))
            r.free(tmp)
    r.write("small_training.csv")


def varlen_inference():
    """BERT-like inference with a random batch size and sequence length per request: every
    request's activations have a new size, so freed blocks rarely fit the next request exactly —
    the pattern that leaves a best-fit pool with holes of the wrong size (fragmentation)."""
    r = Recorder(seed=1234)
    hidden, heads = 768, 12
    for _request in range(40):
        b = r.rng.randint(1, 32)
        s = r.rng.choice([16, 32, 64, 128, 256, 384, 512])
        ids = r.alloc(b * s * 8)
        h = r.alloc(b * s * hidden * 2)
        for _layer in range(6):
            qkv = r.alloc(3 * b * s * hidden * 2)
            scores = r.alloc(b * heads * s * s * 2)
            ctx = r.alloc(b * s * hidden * 2)
            r.free(scores)
            r.free(qkv)
            ffn = r.alloc(b * s * 4 * hidden * 2)
            out = r.alloc(b * s * hidden * 2)
            r.free(ffn)
            r.free(ctx)
            r.free(h)
            h = out
        pooled = r.alloc(b * hidden * 2)
        r.free(h)
        r.free(pooled)
        r.free(ids)
    r.write("varlen_inference.csv")


def pitfalls():
    """A deliberately unhealthy job, one of each problem `gpumem doctor` looks for: a storm of
    tiny allocations, sizes that are not multiples of 256 B, buffers made on a side stream and freed
    on the default one, a cache that grows and is never freed (a leak), one burst that needs far more
    than the job's usual footprint (peak vs average), and requests the allocator refused."""
    r = Recorder(seed=7)
    side = 0x5A5A00
    leaked = []
    for it in range(150):
        work = r.alloc(4 * MiB + 1000)  # unaligned: 4 MiB + 1000 B
        for _ in range(6):  # tiny per-iteration bookkeeping
            t = r.alloc(r.rng.choice([8, 16, 24, 100, 200]))
            r.free(t)
        staged = r.alloc(r.rng.choice([3000, 5000, 7000]) * 1024 + 17, stream=side)
        r.free(staged, stream=0)  # freed on the default stream: a cross-stream free
        if it % 10 == 0:
            leaked.append(r.alloc(2 * MiB))  # a cache entry nobody frees
        r.free(work)
        if it == 100:
            burst = [r.alloc(64 * MiB) for _ in range(8)]
            r.fail(1 << 36)  # 64 GiB: the device said no
            r.fail(1 << 36)
            for p in burst:
                r.free(p)
    r.write("pitfalls.csv")


def pinned_host():
    """Pinned host allocations of a training job (what trace_adaptor writes around
    pinned_host_resource), to pair with a device trace: `gpumem doctor small_training.csv --pinned
    pinned_host.csv`. An optimizer-state offload buffer stays pinned for the whole job, while the
    data loader pins each batch's staging buffers and unpins them after the copy: a re-pin every
    batch, each a cudaMallocHost + cudaFreeHost costing about a millisecond and a device sync."""
    r = Recorder(seed=99)
    offload = r.alloc(1536 * MiB)  # optimizer state offloaded to the host, kept
    for _batch in range(60):
        r.now += r.rng.randint(20000, 30000)  # 20-30 ms of compute between batches
        images = r.alloc(16 * 3 * 512 * 512 * 4)  # a float32 batch: 48 MiB
        labels = r.alloc(16 * 8)
        r.now += 3000  # the host-to-device copy
        r.free(labels)
        r.free(images)
    r.free(offload)
    r.write("pinned_host.csv")


if __name__ == "__main__":
    small_training()
    varlen_inference()
    pitfalls()
    pinned_host()
