#!/usr/bin/env python3
"""PyTorch's side of gpu_step (issue 38): the same models, steps and batches
as build/gpu_step's training figures, for comparison on the same GPU.

A step: the batch copied up from (pinned) host memory, forward, mean
softmax cross-entropy, backward, SGD with momentum 0.9 and lr 0.01; fp32
GEMMs in fp32 (TF32 off, as troupe's cuBLAS default math). Run eager, with
torch.compile, and with torch.compile(mode="reduce-overhead") (CUDA
graphs). Before a variant's figures it checks that it computes eager's
first two steps. Ends on one line of JSON. No torch or no GPU:
"SKIPPED: ..." and exit 77.

Each figure is printed as it is measured, eager's first (compiling takes
minutes): a run cut short keeps what it measured.

Usage: gpu_step.py [--steps=N] [--large=SPEC] [--no-compile]
"""
import json
import sys
import time


def parse(argv):
    opt = {"steps": 200, "large": "mlp:784-4096-4096-4096-10",
           "compile": True}
    for a in argv[1:]:
        if a.startswith("--steps="):
            opt["steps"] = int(a.split("=", 1)[1])
        elif a.startswith("--large="):
            opt["large"] = a.split("=", 1)[1]
        elif a == "--no-compile":
            opt["compile"] = False
        else:
            sys.exit(f"*** gpu_step.py: unknown flag {a}"
                     " (--steps=N --large=SPEC --no-compile)")
    if opt["steps"] < 1:
        sys.exit("*** gpu_step.py: --steps must be at least 1")
    return opt


def sizes_of(spec):
    if not spec.startswith("mlp:"):
        sys.exit(f"*** gpu_step.py: {spec}: a spec is mlp:IN-H1-...-OUT")
    return [int(s) for s in spec[4:].split("-")]


def make_model(torch, spec):
    nn = torch.nn
    sizes = sizes_of(spec)
    torch.manual_seed(1)  # the same weights for every variant
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).cuda()


def batches(torch, spec, batch):
    """Four host batches in pinned memory, taken in turn."""
    sizes = sizes_of(spec)
    g = torch.Generator().manual_seed(10)
    xs = [(torch.rand(batch, sizes[0], generator=g) * 2 - 1).pin_memory()
          for _ in range(4)]
    ys = [torch.randint(0, sizes[-1], (batch,), generator=g).pin_memory()
          for _ in range(4)]
    return xs, ys


def make_step(torch, net, compiled):
    fn = torch.nn.functional
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def loss_of(x, y):
        return fn.cross_entropy(net(x), y)

    if compiled:
        loss_of = torch.compile(loss_of, mode=compiled)

    graphs = compiled == "reduce-overhead"

    def step(x_host, y_host):
        if graphs:  # a new step: the last one's graph outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        x = x_host.cuda(non_blocking=True)
        y = y_host.cuda(non_blocking=True)
        opt.zero_grad()  # to None, PyTorch's default (and graphs' need)
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
        return loss

    return step


def rate(torch, spec, batch, steps, compiled):
    net = make_model(torch, spec)
    step = make_step(torch, net, compiled)
    xs, ys = batches(torch, spec, batch)
    for i in range(20):  # warm up (and compile)
        step(xs[i % 4], ys[i % 4])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step(xs[i % 4], ys[i % 4])
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if not torch.isfinite(loss).item():
        sys.exit(f"*** gpu_step.py: {spec}: the loss is not finite")
    return steps * batch / seconds


def first_loss(torch, spec, batch, compiled):
    net = make_model(torch, spec)
    step = make_step(torch, net, compiled)
    xs, ys = batches(torch, spec, batch)
    first = step(xs[0], ys[0]).item()
    second = step(xs[1], ys[1]).item()
    return first, second


def main():
    opt = parse(sys.argv)
    try:
        import torch
    except ImportError as e:
        print(f"SKIPPED: no PyTorch ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: no GPU (torch.cuda.is_available() is False)")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"gpu_step.py on {torch.cuda.get_device_name(0)},"
          f" torch {torch.__version__}")
    variants = [("eager", None)]
    if opt["compile"]:
        variants += [("compile", "default"),
                     ("compile-graphs", "reduce-overhead")]

    # The check, before each variant's figures: its first two losses as
    # eager's (compiled variants are checked as they come, so that eager's
    # figures need no compiling first).
    small = "mlp:784-256-128-10"
    want = first_loss(torch, small, 64, None)
    cases = [(small, 64), (small, 1024), (opt["large"], 1024)]
    rows = [{"model": spec, "batch": batch} for spec, batch in cases]
    print(f"\n{'variant':16} {'model':32} {'batch':>6} {'samples/s':>14}")
    for name, mode in variants:
        got = first_loss(torch, small, 64, mode) if mode else want
        for a, b in zip(want, got):
            if abs(a - b) > 1e-4 * abs(a):
                sys.exit(f"*** gpu_step.py: {name}'s step differs from"
                         f" eager's: losses {got} against {want}")
        print(f"check: {name}: the first two losses of {small} at batch 64"
              f" as eager's ({got[0]:.6f}, {got[1]:.6f})", flush=True)
        for row in rows:
            row[name] = rate(torch, row["model"], row["batch"], opt["steps"],
                             mode)
            print(f"{name:16} {row['model']:32} {row['batch']:6}"
                  f" {row[name]:14.0f}", flush=True)
    print(json.dumps({"bench": "gpu_step.py",
                      "device": torch.cuda.get_device_name(0),
                      "torch": torch.__version__, "train": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
