#!/usr/bin/env python3
"""PyTorch's training steps on a CUDA device, for comparison with row 6 of bench/gpu_eager.cpp (issue #15).
Usage (scripts/gpu-check.sh runs it where python3 has torch and a GPU):

    python3 bench/torch_gpu_steps.py

The models are gpu_eager's: the reference model (Dense(10 -> 64, relu) -> Dense(64 -> 1), batch 32) and the larger
model (784 -> 512 -> 512 -> 10 with relu between, batch 256); mean squared error and Adam (lr 1e-3) in both, float32.
Each step is timed as PyTorch runs it eagerly and as one CUDA graph replayed (the whole step captured, with Adam's
capturable update), best of 5 rounds of `steps` steps, the device waited for at the end of each round.
Prints one line per model and mode: "torch <model> <mode>: <us> us per step".
"""
import sys
import time


def main():
    try:
        import torch
    except ImportError:
        print("torch_gpu_steps: PyTorch is not installed; skipped")
        return 0
    if not torch.cuda.is_available():
        print("torch_gpu_steps: no CUDA device; skipped")
        return 0
    dev = torch.device("cuda")
    print(f"torch_gpu_steps: PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}")

    def model(widths):
        layers = []
        for i in range(len(widths) - 1):
            layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
            if i + 2 < len(widths):
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers).to(dev)

    def best_us(fn, steps, rounds=5):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t0) / steps)
        return best * 1e6

    for name, widths, batch, steps in (("reference (10-64-1, batch 32)", [10, 64, 1], 32, 200),
                                       ("larger (784-512-512-10, batch 256)", [784, 512, 512, 10], 256, 50)):
        torch.manual_seed(3)
        x = torch.randn(batch, widths[0], device=dev)
        y = torch.randn(batch, widths[-1], device=dev)
        loss_fn = torch.nn.MSELoss()

        def training_step(net, opt, xs, ys, set_to_none):
            def step():
                opt.zero_grad(set_to_none=set_to_none)
                loss = loss_fn(net(xs), ys)
                loss.backward()
                opt.step()
                return loss
            return step

        net = model(widths)
        eager_step = training_step(net, torch.optim.Adam(net.parameters(), lr=1e-3), x, y, True)
        print(f"torch {name} eager: {best_us(eager_step, steps):.1f} us per step")

        try:
            gnet = model(widths)
            # (the gradients stay allocated: a captured graph replays into the same memory)
            one = training_step(gnet, torch.optim.Adam(gnet.parameters(), lr=1e-3, capturable=True),
                                x.clone(), y.clone(), False)

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    one()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                one()
            print(f"torch {name} CUDA graph: {best_us(graph.replay, steps):.1f} us per step")
        except Exception as e:  # capture is optional: report and go on
            print(f"torch {name} CUDA graph: not measured ({type(e).__name__}: {e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
