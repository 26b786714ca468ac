"""Timing helpers shared by the benchmarks: CUDA events, L2 flushed before every run, medians."""
from __future__ import annotations

import math
import statistics
import time

import torch

_L2_FLUSH_BYTES = 256 * 1024 * 1024


class Timer:
    """Median device time of fn() in microseconds, with the L2 flushed before each run.

    flush="read" (default) streams a 256 MB buffer through L2 (a reduction): the inputs are evicted and L2
    holds only clean lines, as after a typical preceding kernel. flush="write" zero-fills it instead
    (triton's do_bench): L2 is then full of dirty lines whose write-back lands inside the timed kernel,
    which inflates short, memory-bound kernels by several microseconds.

    Reps as in interleaved()."""

    def __init__(self, reps: int = 50, warmup: int = 5, flush: str = "read"):
        if flush not in ("read", "write"):
            raise ValueError(f"flush must be 'read' or 'write', got {flush!r}")
        self.reps, self.warmup, self.flush = reps, warmup, flush
        self.flush_buf = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda").fill_(1.0)
        self.flush_sink = torch.empty((), dtype=torch.float32, device="cuda")
        self.warm_up_gpu()

    def warm_up_gpu(self, seconds: float = 0.5):
        """Keep the GPU busy for a while before the first timing: an idle GPU starts at low clocks, and the
        first rows of a run measured up to 1.5x slow without this (H200)."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(20):
                self.flush_l2()
            torch.cuda.synchronize()

    def flush_l2(self):
        if self.flush == "read":
            torch.sum(self.flush_buf, dim=0, out=self.flush_sink)
        else:
            self.flush_buf.zero_()

    def __call__(self, fn) -> float:
        return self.interleaved([fn])[0]

    def interleaved(self, fns) -> list[float]:
        """Median device times (us) of several fns measured in turn, one rep of each per round. For comparing
        kernels with each other: the GPU's clock drifts over seconds at its power cap, and timed one after
        another, two identical kernels measured up to 11% apart (H100, K = 14336).

        Each rep: flush, a spin kernel longer than the host needs to issue fn (measured during warm-up), start
        event, fn, end event -- so the events time the GPU work of fn, never the host issuing it."""
        host_us = max(warm_host_us(fn, self.warmup) for fn in fns)  # the slowest fn's enqueue time per call
        torch.cuda.synchronize()
        # The GPU must not reach the start event before fn's work is queued, or the host's time to issue fn
        # (tens of us for a torch.compile'd function's guards) is measured as device time. So each rep
        # parks the GPU in a spin kernel for longer than the host needs to issue fn (cycles at <= 2 GHz).
        spin_cycles = spin_cycles_for(host_us)
        pairs = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.reps)] for _ in fns]
        for r in range(self.reps):
            for fn, evs in zip(fns, pairs):
                s, e = evs[r]
                self.flush_l2()
                torch.cuda._sleep(spin_cycles)
                s.record()
                fn()
                e.record()
        torch.cuda.synchronize()
        return [statistics.median(s.elapsed_time(e) for s, e in evs) * 1e3 for evs in pairs]


# The spin kernel's length is bounded: an enqueue time of 10 ms (a host stall, not an issue cost) would already
# park the GPU for 20 ms per rep.
MAX_SPIN_US = 20_000


def warm_host_us(fn, calls: int) -> float:
    """Median host time (us) to enqueue one call of fn (no sync inside), over `calls` calls after a first one that
    is not counted. The first call of a row builds or loads its code object (the whole sm_90a unit on a fresh
    machine: ~40 s) or compiles (torch.compile's baseline): counted in, as the mean over the warm-up calls once
    was, it made every rep's spin kernel tens of seconds long, and a bench's first row on a fresh machine sat for
    over 420 s (H100, e244ff2)."""
    fn()
    times = []
    for _ in range(max(1, calls)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def spin_cycles_for(host_us: float) -> int:
    """Cycles (at <= 2 GHz) of the spin kernel before each timed rep: twice the host's enqueue time plus 20 us, at
    most MAX_SPIN_US."""
    return int(min(2 * host_us + 20, MAX_SPIN_US) * 2000)


def kernel_us(fn, timer: Timer, reps: int = 30) -> float:
    """Median GPU time of fn's own kernels and copies per call (us), from the profiler's device timestamps
    (CUPTI), with the L2 flushed before each call as Timer does. A multi-kernel fn counts the sum of its
    kernels' durations, not the gaps between them. Beside Timer's event times: a CUDA event pair adds a
    fixed ~3 us around even an empty kernel (H200: a 4-byte fill measures 3.8 us by events, 0.8 us here),
    which dominates few-microsecond rows and pulls their ratios towards 1.

    Each call is fenced by two spin kernels (torch.cuda._sleep), so fn's work is exactly what runs between
    the first and the second of a pair, whatever its kernels are named."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            timer.flush_l2()
            torch.cuda._sleep(1000)
            fn()
            torch.cuda._sleep(1000)
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    per_call, inside, total = [], False, 0.0
    for e in events:
        if "spin_kernel" in e.name:
            if inside:
                per_call.append(total)
            inside, total = not inside, 0.0
        elif inside:
            total += e.time_range.elapsed_us()
    if len(per_call) != reps:
        raise RuntimeError(f"kernel_us: found {len(per_call)} fenced calls in the profile, expected {reps}")
    return statistics.median(per_call)


def copy_bandwidth_gbs(timer: Timer, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth counting bytes read plus written (GB/s), measured now."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timer(lambda: dst.copy_(src))
    del src, dst
    return 2 * nbytes / (us * 1e-6) / 1e9


def time_what_runs(timer: Timer, fns: dict) -> tuple[dict, dict]:
    """A bench row's paths (label -> callable, or None for a path that does not apply): each is called once outside
    the timer (torch.compile / quack compile there, not in the timer's warm-up), then every one that ran is timed
    rep by rep in one interleaved set, so ours and its baselines see one GPU state. Timed one after another, the
    first of a row measured slow behind a heavy row (the gemm_a8 sweep's N 1024 K 5120 M 1024 behind N 12288 K 5120 M
    16384, 1.5 ms a call: ours 27.6 us, 21.6 in a process of its own, H100).
    -> ({label: median us} of those that ran, {label: the exception} of those that raised)."""
    runs, errors = {}, {}
    for label, fn in fns.items():
        if fn is None:
            continue
        try:
            fn()
            torch.cuda.synchronize()
            runs[label] = fn
        except Exception as exc:  # noqa: BLE001 - a path that cannot run this shape: the caller reports it
            errors[label] = exc
    return dict(zip(runs, timer.interleaved(list(runs.values())))), errors


def host_us_interleaved(fns: dict, calls: int = 200, batches: int = 15) -> dict:
    """host_us_per_call of several functions with their batches interleaved (batch i of each in turn), so a
    slow phase of the machine (clock, a noisy neighbour) hits all of them alike: {label: median us per call}."""
    for fn in fns.values():
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    per_call = {label: [] for label in fns}
    for _ in range(batches):
        for label, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            per_call[label].append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
    return {label: statistics.median(v) for label, v in per_call.items()}


def host_us_per_call(fn, calls: int = 200, batches: int = 15) -> float:
    """CPU time per eager call (us) on a problem too small to queue up: the median over `batches` of the mean
    of `calls` back-to-back calls, synchronised between batches (so the launch queue never fills and makes
    the host wait for the GPU). The median drops batches hit by GC or a noisy neighbour."""
    return host_us_interleaved({"fn": fn}, calls, batches)["fn"]


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def gpu_problem(bench: str) -> str | None:
    """Why `bench` cannot run here, as one line for the user (None when it can): torch sees no GPU, or the GPU
    has no fusedgemm code object."""
    if not torch.cuda.is_available():
        cpu_build = torch.version.cuda is None and torch.version.hip is None
        return (f"fusedgemm.bench {bench}: needs a CUDA or ROCm GPU; torch sees none"
                + (f" (torch {torch.__version__} is a CPU-only build)" if cpu_build else ""))
    from fusedgemm.runtime.arch import UnsupportedArchError, device_arch

    try:
        device_arch(torch.cuda.current_device())
    except UnsupportedArchError as exc:
        return f"fusedgemm.bench {bench}: {exc}"
    return None


def device_info() -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def progress(iterable, total: int, desc: str):
    try:
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, leave=False)
    except ImportError:
        return iterable


def print_table(rows: list[dict], cols: list[tuple[str, str, str]]):
    """cols: (key, header, format)."""
    widths = [max(len(h), *(len(format(r.get(k, float("nan")), f)) if r.get(k) is not None else 3 for r in rows))
              for k, h, f in cols]
    print("  ".join(h.rjust(w) for (_k, h, _f), w in zip(cols, widths)))
    for r in rows:
        cells = []
        for (k, _h, f), w in zip(cols, widths):
            v = r.get(k)
            cells.append(("-" if v is None else format(v, f)).rjust(w))
        print("  ".join(cells))


def sustained(fn, seconds: float):
    """Run fn back to back for `seconds` while nvidia-smi samples the SM clock and board power (every 100 ms).
    Returns (us per call, median MHz, median W) over the samples after the first 0.3 s. The clocks are only
    read, never set."""
    import subprocess

    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0, calls = time.perf_counter(), 0
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    samples = [tuple(float(x) for x in line.split(",")) for line in smi.communicate()[0].splitlines()[3:]
               if line.strip()]
    mhz = statistics.median(x[0] for x in samples) if samples else float("nan")
    watts = statistics.median(x[1] for x in samples) if samples else float("nan")
    return start.elapsed_time(end) * 1e3 / calls, mhz, watts


def error_line(exc: Exception) -> str:
    """An exception as one short line for a table cell."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


def time_paths(timer, fns: dict, device: str) -> tuple[dict, dict]:
    """time_what_runs on a GPU; on the CPU (--quick) each path's median host time per call (warm_host_us): the CPU
    calls are synchronous, so that is their run time -- of torch reference ops, not of any kernel."""
    if device == "cuda":
        return time_what_runs(timer, fns)
    runs, errors = {}, {}
    for label, fn in fns.items():
        if fn is None:
            continue
        try:
            runs[label] = warm_host_us(fn, timer)
        except Exception as exc:  # noqa: BLE001 - a path that cannot run this shape: the caller reports it
            errors[label] = exc
    return runs, errors
