#!/usr/bin/env python3
"""Record a real PyTorch memory snapshot on the GPU, with PyTorch's own figures beside it.

    python3 integrations/record_snapshot.py -o OUT_DIR [--steps N]

Writes OUT_DIR/snapshot.pickle (``torch.cuda.memory._dump_snapshot``) and OUT_DIR/torch_figures.json
(``max_memory_allocated`` and friends). History recording starts before the first CUDA allocation,
so every block the job ever allocates is in the snapshot: the snapshot converted with
``gpumem-snapshot-to-csv`` (gpumem.snapshot_to_csv) and replayed through ``gpumem replay --resource exact`` must then peak at
exactly PyTorch's peak of requested bytes (``memory_stats()["requested_bytes.all.peak"]``): the
snapshot's alloc entries carry the size the caller asked for. ``max_memory_allocated`` counts the
caching allocator's rounded block sizes and is a little higher.

The job: a small GPT-style decoder (pure torch, no downloads) trained with AdamW for a few steps on
random tokens whose batch and sequence length change every step (the varying shapes that fragment
a caching allocator), then a few inference batches.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("-o", "--out", required=True, help="output folder")
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import torch

    if not torch.cuda.is_available():
        sys.exit("record_snapshot: no CUDA device visible")
    torch.cuda.init()
    # Before any allocation: the trace then holds every block, weights included.
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=5_000_000)
    torch.manual_seed(1234)
    d, layers, vocab = 512, 6, 8192
    layer = torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True, norm_first=True)
    embed = torch.nn.Embedding(vocab, d).cuda()
    body = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).cuda()
    head = torch.nn.Linear(d, vocab).cuda()
    params = list(embed.parameters()) + list(body.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    gen = torch.Generator().manual_seed(7)
    shapes = []
    losses = []
    for _ in range(args.steps):
        b = int(torch.randint(4, 33, (1,), generator=gen))
        t = int(torch.randint(32, 513, (1,), generator=gen))
        shapes.append([b, t])
        x = torch.randint(0, vocab, (b, t), generator=gen).cuda()
        mask = torch.nn.Transformer.generate_square_subsequent_mask(t, device="cuda")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = body(embed(x), mask=mask, is_causal=True)
            logits = head(h)
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab).float(),
                                                     x[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss))
    with torch.no_grad():
        for _ in range(4):
            b = int(torch.randint(1, 65, (1,), generator=gen))
            t = int(torch.randint(16, 513, (1,), generator=gen))
            shapes.append([b, t])
            x = torch.randint(0, vocab, (b, t), generator=gen).cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                head(body(embed(x)))
    torch.cuda.synchronize()
    snap = os.path.join(args.out, "snapshot.pickle")
    torch.cuda.memory._dump_snapshot(snap)
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    figures = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "steps": args.steps,
        "shapes": shapes,
        "losses": losses,
        # The peak of the sizes callers asked for: what the snapshot's alloc entries carry, so the
        # converted trace's peak live must equal it. max_memory_allocated counts PyTorch's rounded
        # block sizes (512 B steps, unsplit remainders) and is higher.
        "max_memory_requested": stats.get("requested_bytes.all.peak", -1),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "memory_allocated_at_end": torch.cuda.memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "allocation_count": stats.get("allocation.all.allocated", 0),
    }
    with open(os.path.join(args.out, "torch_figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    print(json.dumps({k: v for k, v in figures.items() if k not in ("shapes", "losses")}))


if __name__ == "__main__":
    main()
