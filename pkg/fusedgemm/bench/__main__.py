"""python -m fusedgemm.bench SUBCOMMAND [options] (see USAGE below; --help works without a GPU)."""
import importlib
import sys

# Subcommand -> what it measures (the modules import torch, so they load only when a subcommand runs).
SUBCOMMANDS = {
    "gemm_a8": "fused fp8/int8 GEMM + epilogue on LLM shapes vs torch._scaled_mm/_int_mm + epilogue, "
               "torch.compile of that, and the memory/compute floor",
    "bmm_tiny": "tiny batched GEMM (m, n, k <= 64) vs torch.bmm, the memory floor and a same-bytes device copy",
    "matmul_fused": "bf16/fp16/tf32 GEMM + bias + activation (+ residual) in one kernel on LLM and square shapes "
                    "vs torch.mm alone, F.linear + act, addmm, cuBLASLt GELU, torch.compile, quack and the floor",
    "models": "Llama / GPT-2 / ViT forwards (prefill and single-token) under eager, torch.compile, fg.fuse and "
              "torch.compile(backend=fg.backend), and each model's MLP block eager vs fused",
    "quantize_rows": "per-token fp8/int8 quantization kernel vs its memory floor, the eager torch chain and "
                     "torch.compile of it",
    "train_step": "forward + backward of one Linear + activation: fg.nn.FusedLinear vs nn.Linear then the "
                  "activation, on LLM shapes",
    "fp32_exact": "fp32 matmul_fused at precision 'ieee' (three TF32 products) vs torch's fp32 F.linear + GELU: "
                  "time and error against float64",
    "fusion_mlp": "the fusion decision on the Llama MLP: eager vs fg.fuse under FUSEDGEMM_FUSION=auto / never / "
                  "always, and the host's issue time per call",
    "host_overhead": "host (CPU) time per eager call of gemm_a8 / matmul_fused / bmm_tiny beside torch's, with "
                     "launch-path checks",
    "matmul_plans": "matmul_fused under every sm_90a plan (tile config, split-K) beside torch.mm, rep by rep; "
                    "optionally clocks and energy per call",
    "moe": "mixture-of-experts grouped GEMMs (gate_up + SwiGLU, down; bf16 and fp8) on DeepSeek-V3 / Qwen3-30B-A3B / "
           "Mixtral-8x7B experts with uniform and skewed routing vs torch._grouped_mm, a per-expert loop and the floor",
    "out_group": "gemm_a8(out_group=128), the output as the next layer's 1x128 block-quantised fp8 input, vs the same "
                 "GEMM writing bf16 and vs the GEMM + quantize_rows(group=128)",
    "predict": "PREDICTED (never measured) time, TFLOP/s, fraction of MFMA peak and bound of the AMD kernels on the "
               "LLM grid and square sizes, from the datasheets and each kernel's compiled hot loop (no GPU needed)",
}

USAGE = "usage: python -m fusedgemm.bench {" + ",".join(SUBCOMMANDS) + "} [options]"


def _help() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [USAGE, "",
             "Benchmarks of fusedgemm's kernels on a GPU, each beside baselines timed in the same process",
             "(medians of CUDA-event pairs, L2 flushed before each run).", "",
             "subcommands:"]
    lines += [f"  {name.ljust(width)}  {what}" for name, what in SUBCOMMANDS.items()]
    lines += ["", "python -m fusedgemm.bench SUBCOMMAND --help lists that subcommand's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_help())
        return 0
    if argv[0] not in SUBCOMMANDS:
        print(f"fusedgemm.bench: unknown subcommand {argv[0]!r}\n\n{_help()}", file=sys.stderr)
        return 2
    # Each subcommand is the module of its name, with run(argv) -> exit code.
    return importlib.import_module(f".{argv[0]}", __package__).run(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
