"""An engine in a process of its own on a real GPU: run on a CUDA machine with PyTorch (minutes; not in the suite).

    python deploy/gpu_isolation_check.py [--deaths 5]

A plugin engine (`torchgpu`, written here) runs a fixed convolutional network on CUDA through PyTorch in a child
process (backends/isolated.py, the way accelerator and plugin engines run). Checked, each printed:
- its outputs equal the same network's on this process's CPU;
- the child holds a CUDA context (nvidia-smi lists it with its GPU memory);
- the child aborts mid-stream (as a vendor runtime does on a device fault): the call says "died: SIGABRT", the child
  is gone from nvidia-smi and the GPU's used memory is back to what it was before it started;
- a new child runs on the GPU again; all of it `--deaths` times, then no process or GPU memory is left.
Exit status 0 when every check held.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_inference.backends import BackendOptions, engines
from edge_inference.backends.isolated import EngineCrashed, load_isolated
from tests.helpers import install_engine_plugin

ENGINE = textwrap.dedent(
    """
    import os

    import numpy as np
    import torch

    from edge_inference.backends.base import Backend, TensorInfo
    from edge_inference.backends.engine import Engine


    def network():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, stride=2),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
        ).eval()


    class TorchBackend(Backend):
        parallel = "shared"

        def __init__(self, *, net, torch_device, die_after, **kwargs):
            super().__init__(**kwargs)
            self.net, self.torch_device, self.die_after, self.count = net, torch_device, die_after, 0

        def run(self, tensor):
            self.count += 1
            if self.die_after and self.count >= self.die_after:
                os.abort()
            with torch.no_grad():
                return [self.net(torch.from_numpy(tensor).to(self.torch_device)).cpu().numpy()]


    def load(path, options):
        device = torch.device(options.device)
        net = network().to(device)
        net(torch.zeros(1, 3, 256, 256, device=device))  # the CUDA context and kernels, before the first frame
        return TorchBackend(
            key="torchgpu", model_path=str(path), engine=f"torch {torch.__version__}", device=str(device),
            inputs=[TensorInfo("x", (1, 3, 256, 256), np.dtype(np.float32))],
            outputs=[TensorInfo("y", (1, 10), np.dtype(np.float32))],
            net=net, torch_device=device, die_after=int(options.engine_options.get("die_after", 0)),
        )


    ENGINE = Engine(key="torchgpu", formats=(".py",), install="(a check)", probe=lambda: None, load=load,
                    rank=lambda path: None)
    """
)


def gpu_apps() -> dict[int, int]:
    """Processes holding a CUDA context: pid -> MiB, from nvidia-smi."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    apps = {}
    for line in out.strip().splitlines():
        pid, mib = (part.strip() for part in line.split(","))
        apps[int(pid)] = int(mib)
    return apps


def gpu_used_mib() -> int:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True
    )
    return int(out.stdout.split()[0])


def settled(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def one_death(number: int, model: Path, frames: np.ndarray, expected: list[np.ndarray], baseline: int) -> list[str]:
    """A child loaded on the GPU, checked against the CPU, killed by its own SIGABRT: what went wrong, if anything."""
    options = BackendOptions(device="cuda", engine_options={"die_after": len(frames) + 1})
    backend = load_isolated("torchgpu", model, options)
    assert backend.child is not None
    pid = backend.child.host.process.pid
    outputs = [backend.run(f)[0] for f in frames]
    worst = max(float(np.abs(o - e).max()) for o, e in zip(outputs, expected, strict=True))
    apps = gpu_apps()
    failures = []
    try:
        backend.run(frames[0])
        failures.append("the child did not die")
        said = "-"
    except EngineCrashed as exc:
        said = str(exc)
    gone = settled(lambda: pid not in gpu_apps())
    back = settled(lambda: gpu_used_mib() <= baseline + 16)
    backend.close()
    print(
        f"child {number}: pid {pid} on {backend.device}, {apps.get(pid, 0)} MiB in nvidia-smi; outputs vs "
        f"CPU max |diff| {worst:.2e}; then: {said!r}; gone from nvidia-smi: {gone}; GPU used back to "
        f"{gpu_used_mib()} MiB ({'yes' if back else 'NO'})",
        flush=True,
    )
    if pid not in apps:
        failures.append(f"child {number} held no CUDA context")
    if worst > 1e-3:
        failures.append(f"child {number} outputs differ from the CPU's by {worst}")
    if "died: SIGABRT" not in said or not gone or not back:
        failures.append(f"child {number}: death or cleanup not as expected")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deaths", type=int, default=5)
    args = parser.parse_args()
    import torch

    site = install_engine_plugin(Path(tempfile.mkdtemp()) / "site", "torchgpu", ENGINE)
    sys.path.insert(0, str(site))
    engines.cache_clear()
    model = Path(__file__)
    frames = np.random.default_rng(0).random((8, 1, 3, 256, 256), np.float32)
    reference_net = __import__("torchgpu_engine").network()
    with torch.no_grad():
        expected = [reference_net(torch.from_numpy(f)).numpy() for f in frames]
    baseline = gpu_used_mib()
    failures: list[str] = []
    print(f"GPU: {torch.cuda.get_device_name(0)}; used before any child: {baseline} MiB", flush=True)
    for death in range(args.deaths):
        failures += one_death(death + 1, model, frames, expected, baseline)
    leftover = [p for p in gpu_apps() if p != 0]
    print(f"after {args.deaths} deaths: processes on the GPU {leftover}, used {gpu_used_mib()} MiB", flush=True)
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures or leftover else 0


if __name__ == "__main__":
    sys.exit(main())
