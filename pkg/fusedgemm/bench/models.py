"""python -m fusedgemm.bench models: whole transformers models (random init from configs, nothing downloaded) under
eager, torch.compile (Inductor), fg.fuse, torch.compile(backend=fg.backend) and fp8 (fg.quantize: every nn.Linear
but lm_head as a Linear8, eager); prefill and single-token forwards; plus the MLP block alone (eager vs fg.fuse vs
fp8). Device time per forward (CUDA events, L2 flushed, the host's issue time excluded) and wall time per call
(what a serving loop sees at decode sizes). --compile-time: first-call seconds of torch.compile with the default
backend and with fg.backend, cold and again with warm caches (each after torch._dynamo.reset())."""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch

from .common import Timer, device_info, geomean, gpu_problem, print_table

SHAPES = {"prefill 1x2048": (1, 2048), "prefill 8x512": (8, 512), "decode b1": (1, 1), "decode b16": (16, 1),
          "decode b64": (64, 1)}


def _configs(transformers, layers: int) -> dict:
    return {
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig(
            hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers, num_attention_heads=32,
            num_key_value_heads=8, vocab_size=32000)),
        "gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config(
            n_embd=1600, n_layer=layers, n_head=25, vocab_size=50257, n_positions=2048)),
        "vit": (transformers.ViTModel, transformers.ViTConfig(
            hidden_size=1024, num_hidden_layers=layers, num_attention_heads=16, intermediate_size=4096,
            image_size=224, patch_size=16)),
    }


def _model(transformers, name: str, layers: int):
    """The named model, random weights from seed 0, bf16 on the GPU, eval mode."""
    cls, cfg = _configs(transformers, layers)[name]
    torch.manual_seed(0)
    return cls(cfg).cuda().bfloat16().eval()


def _inputs(name: str, batch: int, seq: int):
    if name == "vit":  # an image is 197 tokens; the shapes' batch is the number of images (seq unused)
        return torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
    return torch.randint(0, 1000, (batch, seq), device="cuda")


def _mlp_of(name: str, model):
    if name == "llama":
        return model.model.layers[0].mlp, model.config.hidden_size
    if name == "gpt2":
        return model.transformer.h[0].mlp, model.config.n_embd
    for mod_name, mod in model.named_modules():  # ViT's MLP block: ViTMLP / ViTIntermediate by version
        if mod_name.endswith(("mlp", "intermediate")):
            return mod, model.config.hidden_size
    raise ValueError(f"no MLP block found in {type(model).__name__}")


def _wall_us(fn, calls: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def run(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusedgemm.bench models", description=__doc__)
    ap.add_argument("--models", default="llama,gpt2,vit",
                    help="comma-separated models built from small configs (nothing downloaded): llama, gpt2, vit "
                         "(default: all three)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated keys of: " + ", ".join(SHAPES))
    ap.add_argument("--layers", type=int, default=2, help="transformer layers per model (default 2)")
    ap.add_argument("--modes", default="eager,compile,fuse,fg_backend,fp8",
                    help="comma-separated: eager, compile (torch.compile), fuse (fg.fuse), fg_backend "
                         "(torch.compile(backend=fg.backend)), fp8 (fg.quantize to fp8); default: all")
    ap.add_argument("--compile-time", action="store_true",
                    help="only the first-call (compile) seconds of each model at the first shape")
    ap.add_argument("--json", default=None, metavar="FILE", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    problem = gpu_problem("models")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import transformers

    import fusedgemm as fg

    if args.compile_time:
        return _compile_times(args, transformers, fg)
    timer = Timer(reps=10, warmup=3)
    rows, info = [], device_info()
    modes = args.modes.split(",")
    for name in args.models.split(","):
        model = _model(transformers, name, args.layers)
        runners, compile_s = {"eager": model}, {}
        if "fuse" in modes:
            runners["fuse"] = fg.fuse(model)
        if "compile" in modes:
            torch._dynamo.reset()
            runners["compile"] = torch.compile(model, dynamic=True)
        if "fg_backend" in modes:
            runners["fg_backend"] = torch.compile(model, backend=fg.backend, dynamic=True)
        if "fp8" in modes:
            runners["fp8"] = fg.quantize(copy.deepcopy(model), "fp8", skip=["lm_head"])
        mlp, hidden = _mlp_of(name, model)
        fused_mlp = fg.fuse(mlp)
        fp8_mlp = fg.quantize(copy.deepcopy(mlp), "fp8") if "fp8" in modes else None
        for shape in args.shapes.split(","):
            batch, seq = SHAPES[shape]
            x = _inputs(name, batch, seq)
            row = {"model": name, "shape": shape}
            with torch.no_grad():
                for mode, fn in runners.items():
                    t0 = time.perf_counter()
                    fn(x)  # first call: compiles / measures the fusion decisions
                    torch.cuda.synchronize()
                    compile_s.setdefault(mode, time.perf_counter() - t0)
                    row[mode] = timer(lambda: fn(x))
                    row[mode + "_wall"] = _wall_us(lambda: fn(x))
                tokens = batch * (197 if name == "vit" else seq)
                h = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
                row["mlp_eager"] = timer(lambda: mlp(h))
                fused_mlp(h)
                row["mlp_fuse"] = timer(lambda: fused_mlp(h))
                if fp8_mlp is not None:
                    fp8_mlp(h)
                    row["mlp_fp8"] = timer(lambda: fp8_mlp(h))
            for mode in runners:
                row["x_" + mode] = row["eager"] / row[mode]
            row["x_mlp"] = row["mlp_eager"] / row["mlp_fuse"]
            if fp8_mlp is not None:
                row["x_mlp_fp8"] = row["mlp_eager"] / row["mlp_fp8"]
            rows.append(row)
            print(json.dumps(row), flush=True)
        print(f"{name}: first-call seconds (compile / fusion decisions): "
              + ", ".join(f"{k} {v:.1f}" for k, v in compile_s.items()), flush=True)
        print(runners.get("fuse", model).fusion_report if "fuse" in runners else "", flush=True)
        del runners, model
        torch.cuda.empty_cache()
    cols = [("model", "model", ""), ("shape", "shape", "")]
    cols += [(m, f"{m} us", ".0f") for m in ["eager", *[m for m in modes if m != "eager"]]]
    cols += [("x_" + m, f"x {m}", ".2f") for m in modes if m != "eager"]
    cols += [("mlp_eager", "mlp us", ".0f"), ("mlp_fuse", "mlp fused", ".0f"), ("x_mlp", "x mlp", ".2f")]
    if "fp8" in modes:
        cols += [("mlp_fp8", "mlp fp8", ".0f"), ("x_mlp_fp8", "x mlp fp8", ".2f")]
    print(f"\n{info['gpu']}, torch {info['torch']}, {info['date']}; device us per forward (x = eager / mode)")
    print_table(rows, cols)
    for m in modes:
        if m != "eager":
            print(f"geomean x {m}: {geomean(r['x_' + m] for r in rows):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "rows": rows}, f, indent=1)
    return 0


def _compile_times(args, transformers, fg) -> int:
    """First-call seconds (trace + compile + run, synchronised) of torch.compile(dynamic=True) with Inductor and
    with fg.backend, each cold (first in this process; fusedgemm's kernels and decisions may already be cached
    on disk) and warm (again after torch._dynamo.reset(): Inductor's and fusedgemm's caches are filled)."""
    shape = args.shapes.split(",")[0]
    batch, seq = SHAPES[shape]
    rows = []
    for name in args.models.split(","):
        model = _model(transformers, name, args.layers)
        x = _inputs(name, batch, seq)
        row = {"model": name, "layers": args.layers, "shape": shape}
        for label, backend in (("inductor", "inductor"), ("fg_backend", fg.backend)):
            for trial in ("cold", "warm"):
                torch._dynamo.reset()
                compiled = torch.compile(model, backend=backend, dynamic=True)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.no_grad():
                    compiled(x)
                torch.cuda.synchronize()
                row[f"{label}_{trial}"] = time.perf_counter() - t0
        row["warm_extra"] = row["fg_backend_warm"] - row["inductor_warm"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        del model
        torch.cuda.empty_cache()
    info = device_info()
    print(f"\n{info['gpu']}, torch {info['torch']}, {info['date']}; first-call seconds, torch.compile(dynamic=True)")
    print_table(rows, [("model", "model", ""), ("layers", "layers", ""), ("shape", "shape", ""),
                       ("inductor_cold", "inductor cold", ".1f"), ("inductor_warm", "inductor warm", ".1f"),
                       ("fg_backend_cold", "fg.backend cold", ".1f"), ("fg_backend_warm", "fg.backend warm", ".1f"),
                       ("warm_extra", "fg.backend - inductor, warm", ".1f")])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "rows": rows}, f, indent=1)
    return 0
