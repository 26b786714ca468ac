"""FusedMoE: transformers' sparse mixture-of-experts blocks (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3) with every
expert's gate/up projection as ONE grouped swiglu GEMM and every expert's down projection, scaled by the routing weight,
as ONE grouped GEMM, instead of a Python loop over the experts.

    layer.mlp = fg.nn.FusedMoE.from_module(layer.mlp)    # MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / ...
    y = layer.mlp(x)                                      # what the block returned, same parameters and keys
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..grouped import grouped_gemm_a8, grouped_matmul, grouped_swiglu
from ..preshuffle import PreshuffledWeight, preshuffle
from ..quant import quantize_rows, quantize_weight
from .gated_mlp import activation_name

_KERNEL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

# The transformers classes whose forward this module reproduces, read in transformers 5.x: block -> its router
# class, its experts class, and whether it adds a sigmoid-gated shared expert. Matched by exact class name (and a
# transformers module), so a subclass or a look-alike from another model -- whose routing may differ (grouped
# top-k, sigmoid scores, bias correction) -- is refused rather than silently routed the wrong way.
# The shared expert: None, "gated" (Qwen2-MoE: sigmoid(shared_expert_gate(x)) * shared_expert(x)) or "plain"
# (DeepSeek-V3: shared_experts(x), added as is).
_BLOCKS = {
    "MixtralSparseMoeBlock": ("MixtralTopKRouter", "MixtralExperts", None),
    "Qwen2MoeSparseMoeBlock": ("Qwen2MoeTopKRouter", "Qwen2MoeExperts", "gated"),
    "Qwen3MoeSparseMoeBlock": ("Qwen3MoeTopKRouter", "Qwen3MoeExperts", None),
    # sigmoid scores, grouped top-k with the score-correction bias, routed_scaling_factor: all inside its router,
    # whose (logits, weights, indices) FusedMoE uses as the block does
    "DeepseekV3MoE": ("DeepseekV3TopkRouter", "DeepseekV3Experts", "plain"),
}
_SHARED_MODULES = {"gated": ("shared_expert", "shared_expert_gate"), "plain": ("shared_experts",)}
# The layout flags transformers' @use_experts_implementation sets on an experts module; the grouped ops take the
# default layout only ([E, 2I, H] gate rows then up rows, [E, H, I], no bias).
_LAYOUT = {"is_transposed": False, "is_concatenated": True, "has_bias": False, "has_gate": True,
           "has_post_expert_norm": False}


def _refuse(name: str, why: str) -> TypeError:
    return TypeError(f"FusedMoE.from_module: {name} is not supported: {why}. Supported: transformers' "
                     f"{', '.join(_BLOCKS)} as transformers >= 5 builds them (router module `gate` returning "
                     f"(logits, scores, indices); experts module `experts` with 3-D parameters gate_up_proj "
                     f"[E, 2I, H] and down_proj [E, H, I])")


class FusedMoE(torch.nn.Module):
    """A transformers sparse MoE block whose experts run as two grouped GEMMs.

    State: the block's own submodules and parameters, registered under the block's names (gate.weight,
    experts.gate_up_proj, experts.down_proj, and for Qwen2-MoE shared_expert.* and shared_expert_gate.weight):
    the SAME Parameter objects, not copies, so state_dict keys are the block's, load_state_dict / in-place updates
    reach both. gate_up_proj [E, 2I, H] is already the stacked gate-then-up layout fg.grouped_swiglu takes, so
    FusedMoE stacks nothing; grouped_swiglu keeps ONE interleaved copy of it (the size of gate_up_proj, i.e. 2/3 of
    the experts' weights) cached on the parameter, keyed by its address, shape, dtype, device and _version, so
    load_state_dict and in-place updates re-interleave on the next call (an inference tensor, made under
    torch.inference_mode, cannot carry the cache: it is re-interleaved on every call).

    Forward (hidden_states [batch, seq, hidden] -> the tensor the block returns):
      * fused path, on a GPU: the block's own router module (so its hooks, e.g. transformers' router_logits
        recorder, still fire) gives top-k indices and weights; the token-expert pairs are sorted by expert with one
        stable sort, group ends come from a searchsorted on the sorted ids (int32, on the device, no host sync),
        the rows are gathered, fg.grouped_swiglu computes act(x Wg^T) * (x Wu^T), fg.grouped_matmul the down
        projection with the routing weight applied in its epilogue (float32 out), and the k contributions of each
        token are summed in float32 and rounded once (the block adds them in its own dtype, one rounding per add).
        Qwen2-MoE's shared expert runs through its own submodule (replace it with fg.nn.GatedMLP to fuse it too),
        scaled by sigmoid(shared_expert_gate(x)) and added in float32; DeepSeek-V3's shared_experts likewise,
        unscaled.
      * the block's own forward, unchanged: tensors not on a GPU, dtypes other than bf16 / fp16 / fp32 or not the
        experts' dtype, under torch.autocast, when grad mode is on and the input or any parameter requires grad
        (the grouped ops are not differentiable -- so run inference under torch.no_grad() / inference_mode()),
        Mixtral in training mode with router_jitter_noise > 0 (random, and it scales the input in place), empty
        inputs, and hidden or intermediate sizes that are not multiples of 8 (the kernels' alignment).
        On the CPU, `_fused_forward(x)` runs the fused path through the grouped ops' torch reference, for tests.
    float32 input runs the kernels with TF32 products (as fg.matmul_fused), not the block's full float32 F.linear."""

    def __init__(self, block: torch.nn.Module, dtype: str | None = None):
        super().__init__()
        self._check(block)
        if dtype not in (None, "fp8", "int8"):
            raise ValueError(f"FusedMoE: dtype must be None (the experts' own), 'fp8' or 'int8', got {dtype!r}")
        # Not registered as a submodule (its keys would gain a "block." prefix): kept to run its own forward.
        object.__setattr__(self, "_block", block)
        for name, child in block.named_children():
            self.add_module(name, child)
        for name, p in block.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in block.named_buffers(recurse=False):
            self.register_buffer(name, b, persistent=name not in block._non_persistent_buffers_set)
        experts = block.experts
        self.num_experts, two_i, self.hidden = experts.gate_up_proj.shape
        self.intermediate = two_i // 2
        self.top_k = block.gate.top_k
        self.activation = activation_name(experts.act_fn)
        self.shared = _BLOCKS[type(block).__name__][2]
        self.has_shared_expert = self.shared is not None
        self.training = block.training
        self.dtype8 = dtype
        if dtype is not None:
            self._quantize_experts(dtype)

    @classmethod
    def from_module(cls, block: torch.nn.Module, dtype: str | None = None) -> "FusedMoE":
        """A FusedMoE sharing `block`'s parameters (not copies). TypeError naming the class for anything but the
        transformers >= 5 MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock and DeepseekV3MoE.
        dtype 'fp8' / 'int8': the experts run as 8-bit GEMMs (see _quantize_experts); None: in their own dtype."""
        return cls(block, dtype)

    def _quantize_experts(self, dtype: str) -> None:
        """8-bit experts: each expert's weights quantized per output channel (fg.quantize_weight's rule), kept as
        non-persistent buffers beside the block's parameters (state_dict keeps the block's keys and its 16-bit
        weights: this is a runtime copy, about half their size more; requantize_experts() after the weights
        change). Per call the sorted rows are quantized per row (fg.quantize_rows), gate/up run as one 8-bit
        grouped SwiGLU GEMM (bf16 out), its output is quantized per row again, and the down GEMM applies both
        scales and the routing weight in its epilogue."""
        e, two_i, h = self.experts.gate_up_proj.shape
        gu8, gu_s = quantize_weight(self.experts.gate_up_proj.reshape(e * two_i, h), dtype)
        dn8, dn_s = quantize_weight(self.experts.down_proj.reshape(e * h, two_i // 2), dtype)
        self.register_buffer("gate_up_q", gu8.reshape(e, two_i, h), persistent=False)
        self.register_buffer("gate_up_scale", gu_s.reshape(e, two_i), persistent=False)
        self.register_buffer("down_q", preshuffle(dn8.reshape(e, h, two_i // 2)).data, persistent=False)
        self.register_buffer("down_scale", dn_s.reshape(e, h), persistent=False)
        self._down_wq = None

    _QUANTIZED = ("gate_up_q", "gate_up_scale", "down_q", "down_scale")

    def _down_weight(self) -> PreshuffledWeight:
        """The down_q buffer as grouped_gemm_a8's weight (the same storage), re-wrapped when the buffer is replaced."""
        if self._down_wq is None or self._down_wq.data is not self.down_q:
            self._down_wq = PreshuffledWeight(self.down_q)
        return self._down_wq

    def _apply(self, fn, recurse=True):
        # The 8-bit codes and their fp32 scales keep their dtypes whatever fn converts (model.half() would turn
        # fp8 codes into fp16 numbers); only a device move applies to them (as Linear8 does).
        kept = {name: self._buffers.pop(name) for name in self._QUANTIZED if name in self._buffers}
        try:
            super()._apply(fn, recurse)
        finally:
            for name, t in kept.items():
                moved = fn(t)
                self._buffers[name] = moved if moved.dtype == t.dtype else t.to(device=moved.device)
        return self

    def requantize_experts(self) -> None:
        """Quantize the experts' weights again (after load_state_dict or an in-place update, for dtype fp8 / int8)."""
        if self.dtype8 is not None:
            self._quantize_experts(self.dtype8)

    @staticmethod
    def _check(block) -> None:
        if not isinstance(block, torch.nn.Module):
            raise TypeError(f"FusedMoE.from_module: expected an nn.Module, got {type(block).__name__}")
        cls = type(block)
        name = f"{cls.__module__}.{cls.__qualname__}"
        if cls.__name__ not in _BLOCKS or not cls.__module__.startswith("transformers."):
            raise _refuse(name, "not a known mixture-of-experts block")
        router_cls, experts_cls, shared = _BLOCKS[cls.__name__]
        gate, experts = getattr(block, "gate", None), getattr(block, "experts", None)
        if isinstance(experts, torch.nn.ModuleList) or type(gate) is torch.nn.Linear:
            raise _refuse(name, "this is the transformers 4.x layout (router an nn.Linear, experts an "
                                "nn.ModuleList of MLPs, routing inside the block's forward), which FusedMoE does "
                                "not reproduce yet; use transformers >= 5")
        for what, mod, want in (("gate", gate, router_cls), ("experts", experts, experts_cls)):
            if type(mod).__name__ != want:
                found = "nothing" if mod is None else f"{type(mod).__module__}.{type(mod).__qualname__}"
                raise _refuse(name, f"its `{what}` must be transformers' {want} (whose forward FusedMoE "
                                    f"reproduces), found {found}")
        for flag, want in _LAYOUT.items():
            if getattr(experts, flag, want) != want:
                raise _refuse(name, f"its experts have {flag}={getattr(experts, flag)!r}; the grouped ops take "
                                    f"{', '.join(f'{k}={v}' for k, v in _LAYOUT.items())} only")
        if getattr(experts, "_is_expert_parallel", False):
            raise _refuse(name, "its experts are sharded for expert parallelism (each rank holds a slice and the "
                                "routing indices are remapped), which FusedMoE does not handle")
        gu, down = getattr(experts, "gate_up_proj", None), getattr(experts, "down_proj", None)
        if not (isinstance(gu, torch.Tensor) and isinstance(down, torch.Tensor) and gu.dim() == down.dim() == 3):
            raise _refuse(name, "its experts must hold 3-D tensors gate_up_proj and down_proj (a quantized or "
                                "otherwise replaced experts module is not)")
        e, two_i, h = gu.shape
        if two_i % 2 or tuple(down.shape) != (e, h, two_i // 2):
            raise _refuse(name, f"experts.gate_up_proj {list(gu.shape)} and down_proj {list(down.shape)} must be "
                                f"[E, 2I, H] and [E, H, I]")
        if gu.dtype != down.dtype or gu.device != down.device:
            raise _refuse(name, f"experts.gate_up_proj ({gu.dtype}, {gu.device}) and down_proj ({down.dtype}, "
                                f"{down.device}) must share one dtype and device")
        if getattr(gate, "num_experts", e) != e or not isinstance(getattr(gate, "top_k", None), int):
            raise _refuse(name, f"its router must have an int top_k and num_experts == E = {e}")
        if shared and not all(isinstance(getattr(block, a, None), torch.nn.Module) for a in _SHARED_MODULES[shared]):
            raise _refuse(name, f"it has no {' / '.join(_SHARED_MODULES[shared])} module")
        try:
            activation_name(experts.act_fn)
        except (AttributeError, ValueError) as err:
            raise _refuse(name, f"its experts' activation has no grouped_swiglu equivalent ({err})") from None

    def train(self, mode: bool = True) -> "FusedMoE":
        super().train(mode)  # the shared submodules follow; the block's own flag (its forward reads it) too
        self._block.training = mode
        return self

    # ---- forward ----------------------------------------------------------------------------------------------
    def _use_module(self, x: torch.Tensor) -> bool:
        """True where the fused path must not run: the block's own forward gives the answer there."""
        w = self.experts.gate_up_proj
        if x.device.type != "cuda" or x.dtype not in _KERNEL_DTYPES or x.dtype != w.dtype or x.numel() == 0:
            return True
        if self.hidden % (16 if self.dtype8 else 8) or self.intermediate % (16 if self.dtype8 else 8):
            return True  # the grouped kernels' alignment: N % 8 (16 for 8-bit) and 16-byte rows of K
        if torch.is_autocast_enabled(x.device.type):
            return True  # autocast would cast the block's F.linear inputs; the grouped ops would not
        if self.training and getattr(self._block, "jitter_noise", 0) > 0:
            return True
        return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters()))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """hidden_states [batch, seq, hidden] -> [batch, seq, hidden], as the block's forward."""
        if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() != 3 \
                or hidden_states.shape[-1] != self.hidden:
            got = tuple(hidden_states.shape) if isinstance(hidden_states, torch.Tensor) else type(hidden_states)
            raise ValueError(f"FusedMoE({type(self._block).__name__}): hidden_states must be [batch, seq, "
                             f"hidden={self.hidden}], got {got}")
        if self._use_module(hidden_states):
            return self._block(hidden_states)
        return self._fused_forward(hidden_states)

    def _fused_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The grouped-GEMM path, on any device the grouped ops take (on the CPU: their torch reference).
        No autograd, no jitter: forward decides when this may run."""
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, self.hidden)
        _, scores, indices = self.gate(x)  # [T, k] each; a module call, so hooks on the router see the logits
        t, k = indices.shape
        # One stable sort groups the T*k (token, slot) pairs by expert, keeping token order inside an expert.
        # Group ends by searchsorted, not bincount: CUDA's bincount reads max() back to the host.
        sorted_e, order = torch.sort(indices.reshape(-1), stable=True)
        experts = torch.arange(self.num_experts, device=x.device, dtype=sorted_e.dtype)
        offs = torch.searchsorted(sorted_e, experts, right=True, out_int32=True)
        rows = x.index_select(0, order // k)
        rw = scores.reshape(-1).index_select(0, order).float()  # the weights the block multiplies by, exactly
        if self.dtype8 is None:
            h = grouped_swiglu(rows, self.experts.gate_up_proj, offs=offs, activation=self.activation)
            y = grouped_matmul(h, self.experts.down_proj, offs=offs, epilogue="acc * m_vec(rw)", operands={"rw": rw},
                               out_dtype=torch.float32)
        else:
            x8, sx = quantize_rows(rows, self.dtype8)
            h = grouped_swiglu(x8, self.gate_up_q, offs=offs, activation=self.activation, scale_a=sx,
                               scale_b=self.gate_up_scale, out_dtype=torch.bfloat16)
            h8, sh = quantize_rows(h, self.dtype8)
            y = grouped_gemm_a8(h8, self._down_weight(), offs=offs, epilogue="acc * m_vec(s) * n_vec(sb)",
                                operands={"s": sh * rw, "sb": self.down_scale}, out_dtype=torch.float32)
        # Undo the sort (order holds each pair once: a deterministic copy, no atomics), then add each token's k
        # contributions in float32 in slot order.
        out = torch.empty_like(y).index_copy_(0, order, y).view(t, k, self.hidden).sum(dim=1)
        if self.shared == "gated":
            out = out + (F.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)).float()
        elif self.shared == "plain":
            out = out + self.shared_experts(x).float()
        return out.to(hidden_states.dtype).reshape(shape)

    def extra_repr(self) -> str:
        return (f"block={type(self._block).__name__}, experts={self.num_experts}, top_k={self.top_k}, "
                f"hidden={self.hidden}, intermediate={self.intermediate}, activation={self.activation!r}, "
                f"shared_expert={self.has_shared_expert}" + (f", experts in {self.dtype8}" if self.dtype8 else ""))


__all__ = ["FusedMoE"]
