"""python -m fusedgemm.bench moe --module: whole MoE blocks, transformers' sparse MoE block (experts_implementation
"eager": its Python loop over the experts that have tokens) against fg.nn.FusedMoE.from_module(block) (two grouped
GEMMs), at the real sizes of Qwen3-30B-A3B and Mixtral-8x7B, bf16, under torch.inference_mode().

Blocks come from a random-init transformers config (no checkpoint): every parameter drawn N(0, 1/fan_in) with a
fixed seed (the blocks' own init leaves the experts torch.empty and the Qwen router zero, which would tie every
top-k), so router logits and expert outputs are ~N(0, 1). Before timing, the FusedMoE output is compared with the
block's: max |fused - block| / max |block| past MODULE_SANITY is FAIL. On the CPU (--quick) FusedMoE.forward is the
block itself, so the check runs FusedMoE._fused_forward (the grouped ops' torch reference) and the times mean nothing.
"""
from __future__ import annotations

import importlib
import sys

import torch

# model -> (transformers kind, sizes); qwen3 normalizes the top-k weights (norm_topk_prob=True), mixtral does not;
# deepseek-v3: 8 groups of 32 experts, top-4 groups, routed_scaling_factor 2.5, one shared expert (22.5 GB of bf16
# experts: an 80 GB GPU holds it)
MODULE_MODELS = {
    "deepseek-v3": ("deepseek", dict(hidden=7168, inter=2048, experts=256, topk=8)),
    "qwen3-30b-a3b": ("qwen3", dict(hidden=2048, inter=768, experts=128, topk=8)),
    "mixtral-8x7b": ("mixtral", dict(hidden=4096, inter=14336, experts=8, topk=2)),
}
QUICK_MODULE_MODELS = {  # --quick: tiny blocks of both kinds, seconds on a CPU
    "quick-qwen3": ("qwen3", dict(hidden=64, inter=32, experts=8, topk=2)),
    "quick-mixtral": ("mixtral", dict(hidden=64, inter=32, experts=8, topk=2)),
}
SKIPPED: dict[str, str] = {}  # model -> why --module does not measure it
MODULE_SANITY = 5e-2  # bf16: the block rounds each expert's add, FusedMoE sums in float32; a bug lands far above
MODULE_SANITY_8BIT = 0.15  # 8-bit experts: x, the weights and the SwiGLU output each rounded to 8 bits


def build_block(kind: str, sizes: dict, device: str, seed: int = 0) -> torch.nn.Module:
    """A transformers Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock / DeepseekV3MoE of `sizes`, every parameter
    random (seeded),
    bf16 on `device`, in eval mode (as tests/test_moe_module.py's block(), at any size)."""
    import transformers

    mod, cfg_cls, cls, kw = {
        "mixtral": ("mixtral", "MixtralConfig", "MixtralSparseMoeBlock",
                    dict(intermediate_size=sizes["inter"], num_local_experts=sizes["experts"])),
        "qwen3": ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeSparseMoeBlock",
                  dict(moe_intermediate_size=sizes["inter"], num_experts=sizes["experts"], norm_topk_prob=True)),
        "deepseek": ("deepseek_v3", "DeepseekV3Config", "DeepseekV3MoE",
                     dict(moe_intermediate_size=sizes["inter"], n_routed_experts=sizes["experts"],
                          n_group=min(8, sizes["experts"] // 2), topk_group=max(1, min(8, sizes["experts"] // 2) // 2),
                          n_shared_experts=1,
                          norm_topk_prob=True, routed_scaling_factor=2.5)),
    }[kind]
    cfg = getattr(transformers, cfg_cls)(hidden_size=sizes["hidden"], num_experts_per_tok=sizes["topk"],
                                         experts_implementation="eager", **kw)
    block_cls = getattr(importlib.import_module(f"transformers.models.{mod}.modeling_{mod}"), cls)
    with torch.device(device):  # built where it runs: Mixtral's experts are 2.8 GB in bf16
        b = block_cls(cfg).to(torch.bfloat16)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in b.parameters():  # drawn in place, in bf16 on the device: no float32 copy of the experts
            p.normal_(0.0, p.shape[-1] ** -0.5, generator=gen)
    return b.eval()


def max_rel_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (NaN where the shapes differ)."""
    if got.shape != want.shape:
        return float("nan")
    scale = want.double().abs().max().item()
    return (got.double() - want.double()).abs().max().item() / (scale or 1.0)


def measure_module(fusedmoe_cls, timer, device: str, name: str, kind: str, sizes: dict, tokens: list[int],
                   seed: int, experts: str = "bf16") -> list[dict]:
    """One row per token count: the block's and FusedMoE's times (common.time_paths), speedup, max rel diff, check.
    experts 'fp8': FusedMoE.from_module(block, dtype='fp8') (8-bit expert GEMMs; the block stays bf16)."""
    from .common import error_line, time_paths

    base = dict(model=name, kind=kind, experts_dtype=experts, **sizes)
    sanity = MODULE_SANITY if experts == "bf16" else MODULE_SANITY_8BIT
    try:
        block = build_block(kind, sizes, device, seed)
        fused = fusedmoe_cls.from_module(block, dtype=None if experts == "bf16" else experts)
    except Exception as exc:  # noqa: BLE001 - report the model, go on with the next
        return [dict(base, tokens=t, check="ERROR", error=error_line(exc)) for t in tokens]
    rows = []
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    for t in tokens:
        row = dict(base, tokens=t)
        with torch.inference_mode():
            x = torch.randn(1, t, sizes["hidden"], generator=gen, device=device, dtype=torch.bfloat16)
            try:  # correctness first, as the grouped rows: FusedMoE against the block, before any timing
                on_gpu = not fused._use_module(x)
                row["path"] = "fused" if on_gpu else "block"  # what FusedMoE.forward runs here
                want = block(x)
                got = fused(x) if device == "cuda" else fused._fused_forward(x)  # CPU: forward IS the block
                row["rel_diff"] = max_rel_diff(got, want)
                row["check"] = "ok" if row["rel_diff"] <= sanity else "FAIL"  # NaN fails
                del got, want
            except Exception as exc:  # noqa: BLE001
                row.update(check="ERROR", error=error_line(exc))
                rows.append(row)
                continue
            times, errors = time_paths(timer, {"block": lambda: block(x), "fused": lambda: fused(x)}, device)
        row.update((f"{p}_us", us) for p, us in times.items())
        if errors:
            row.update(check="ERROR", error="; ".join(f"{p}: {error_line(e)}" for p, e in errors.items()))
        if row.get("block_us") and row.get("fused_us"):
            row["speedup"] = row["block_us"] / row["fused_us"]
        rows.append(row)
        del x
        if device == "cuda":
            torch.cuda.empty_cache()
    del fused, block
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def run_module_rows(args, device: str, timer, tokens: list[int], quick: bool) -> tuple[list[dict], list[dict]]:
    """--module: measures the selected models' blocks, prints one table -> (rows, rows that FAIL or ERROR)."""
    from .common import print_table, progress

    try:
        from fusedgemm.nn import FusedMoE
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"--module: needs transformers >= 5 and fusedgemm.nn.FusedMoE ({exc})", file=sys.stderr)
        row = dict(model="-", check="ERROR", error=str(exc))
        return [row], [row]
    models = QUICK_MODULE_MODELS if quick else {m: MODULE_MODELS[m] for m in args.models if m in MODULE_MODELS}
    skipped = [] if quick else [m for m in args.models if m in SKIPPED]
    rows = []
    runs = [(name, kind, sizes, experts) for name, (kind, sizes) in models.items()
            for experts in (["bf16"] if quick else getattr(args, "dtype", None) or ["bf16"])]
    for name, kind, sizes, experts in progress(runs, len(runs), "moe --module"):
        rows += measure_module(FusedMoE, timer, device, name, kind, sizes, tokens, args.seed, experts)
    table = rows + [dict(model=m, check="skipped") for m in skipped]
    print(f"\nmodule: transformers block (experts_implementation eager, bf16) vs fg.nn.FusedMoE.from_module(block, "
          f"dtype=experts), inference_mode; rel diff = max |fused - block| / max |block|, FAIL past "
          f"{MODULE_SANITY:g} (8-bit experts: {MODULE_SANITY_8BIT:g})")
    if device == "cpu":
        print("--quick on the CPU: FusedMoE.forward falls back to the block (speedup ~1, meaningless); rel diff "
              "checks FusedMoE._fused_forward")
    print_table(table, [("model", "model", "s"), ("experts_dtype", "experts", "s"), ("tokens", "tokens", "d"),
                        ("path", "path", "s"),
                        ("block_us", "block eager us", ".1f"), ("fused_us", "FusedMoE us", ".1f"),
                        ("speedup", "speedup", ".2f"), ("rel_diff", "rel diff", ".1e"), ("check", "check", "s")])
    for m in skipped:
        print(f"  {m}: skipped, {SKIPPED[m]}")
    failed = [r for r in rows if r["check"] not in ("ok", "skipped")]
    for r in failed:
        print(f"module {r['model']} tokens {r.get('tokens')}: {r['check']} {r.get('error', '')}"
              f"{r.get('rel_diff', '')}", file=sys.stderr)
    return rows, failed
