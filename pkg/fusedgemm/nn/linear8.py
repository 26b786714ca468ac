"""8-bit drop-in linear layers: Linear8 and quantize(model).

    lin8 = fg.nn.Linear8.from_linear(torch_linear, dtype="fp8", activation="silu")
    y = lin8(x)          # quantize_rows(x) -> one gemm_a8 with per-token and per-channel scales, bias, activation
    model = fg.quantize(model, dtype="int8", skip=["lm_head"])          # every eligible nn.Linear, in place

Weights are quantized once, per output channel (quant.quantize_weight: scale = absmax / qmax of each row of
W), and stored preshuffled. Activations are quantized per token at every call (quant.quantize_rows). The
forward is y = act((xq @ wq.T) * sx[:, None] * sw[None, :] + bias), rounded once to x's dtype.
"""
from __future__ import annotations

import torch

from ..epilogue.presets import ACTIVATIONS, activation_name
from ..gemm_a8 import gemm_a8
from ..preshuffle import PreshuffledWeight, preshuffle, unshuffle
from ..quant import quantize_rows, quantize_weight, resolve_dtype
from ..blockscale import BLOCK
from ..reference import gemm_a8_block_reference, gemm_a8_reference
from ..runtime.device import emulated_arch


def _epilogue_name(activation: str, has_bias: bool) -> str:
    if not has_bias:
        return activation
    return "bias" if activation == "none" else f"bias_{activation}"


class Linear8(torch.nn.Module):
    """y = act(x @ W.T + bias) with W quantized to 8 bits per output channel and x per token at each call:
    one quantize_rows kernel and one gemm_a8 kernel (fp32 accumulation, scales, bias and activation fused,
    rounded once to x's dtype). Leading dims of x [..., in_features] are kept.

    State (state_dict keys):
      weight        [out, in] float8 (the device's variant) or int8, stored PRESHUFFLED (the (16,16) layout
                    gemm_a8 reads): saving and loading are byte copies and nothing is re-laid out at load.
                    fusedgemm.unshuffle(fusedgemm.PreshuffledWeight(m.weight)) gives the nn.Linear layout;
                    Linear8.from_quantized takes a plain-layout one.
      weight_scale  [out] float32: W ~= unshuffled(weight) * weight_scale[:, None]; or, block-scaled (block=128,
                    DeepSeek-V3 / Qwen3 FP8 checkpoints' weight_scale_inv), [ceil(out/128), ceil(in/128)]: one
                    scale per 128 x 128 block of W, and x quantized per 1 x 128 group at each call
      bias          [out] float32 parameter (requires_grad=False), or None
    A dtype cast of the module (model.half(), .to(torch.bfloat16)) moves but never converts weight and
    weight_scale; a state_dict whose weight has another 8-bit dtype is refused rather than converted.
    Loading a state_dict copies into the same buffers, so the next forward uses it.

    GPU: x float32 / bfloat16 / float16; the weight's fp8 variant must be the device's (gemm_a8's check).
    CPU: the same math with torch (quantize_rows' CPU path, then the float64 GEMM oracle rounded to x's dtype),
    so the module can be checked without a GPU. in_features and out_features must be multiples of 16."""

    _version = 1

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, *, dtype="fp8",
                 activation: str | None = None, block: int | None = None):
        super().__init__()
        if in_features <= 0 or out_features <= 0 or in_features % 16 or out_features % 16:
            raise ValueError(f"Linear8: in_features (K) and out_features (N) must be positive multiples of 16 "
                             f"(gemm_a8's shapes), got in_features={in_features}, out_features={out_features}")
        activation = activation_name("Linear8", activation, ACTIVATIONS)
        device = torch.device(device) if device is not None else None
        qdtype = resolve_dtype(dtype, device, "Linear8")
        self.in_features, self.out_features, self.activation = in_features, out_features, activation
        self.register_buffer("weight", torch.zeros((out_features, in_features), dtype=qdtype, device=device))
        if block not in (None, BLOCK):
            raise ValueError(f"Linear8: block must be None (per-channel scales) or {BLOCK} (128 x 128 weight blocks, "
                             f"1 x 128 activation groups), got {block!r}")
        self.block = block
        scale_shape = (out_features,) if block is None else (-(-out_features // BLOCK), -(-in_features // BLOCK))
        self.register_buffer("weight_scale", torch.ones(scale_shape, dtype=torch.float32, device=device))
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=torch.float32, device=device),
                                           requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self._wq: PreshuffledWeight | None = None  # wraps `weight` (no copy); keeps gemm_a8's call plans

    # ---- construction ---------------------------------------------------------------------------------------
    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, dtype="fp8", activation: str | None = None,
                    block: int | None = None) -> "Linear8":
        """Quantize an nn.Linear (on its device; 'fp8' is that device's variant). activation: None/'none',
        'relu', 'silu', 'gelu' (tanh approximation), 'gelu_erf' (exact), fused after the bias. block=128: 128 x 128
        weight blocks and 1 x 128 activation groups (block-scaled gemm_a8: sm_90a fp8)."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"Linear8.from_linear: expected an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        qdtype = resolve_dtype(dtype, w.device, "Linear8.from_linear")
        wq, sw = quantize_weight(w, qdtype, block=block)
        return cls.from_quantized(wq, sw, None if linear.bias is None else linear.bias.detach(),
                                  activation=activation)

    @classmethod
    def from_quantized(cls, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
                       activation: str | None = None) -> "Linear8":
        """From an already quantized weight in the plain nn.Linear layout: weight_q [out, in] fp8 / int8,
        weight_scale [out] (W ~= weight_q * weight_scale[:, None]) or a checkpoint's block scales
        [ceil(out/128), ceil(in/128)] (DeepSeek-V3 / Qwen3 FP8's weight_scale_inv: W ~= weight_q times its 128 x 128
        block's scale; the module is then block-scaled), bias [out] or None."""
        if not isinstance(weight_q, torch.Tensor) or weight_q.dim() != 2:
            raise ValueError("Linear8.from_quantized: weight_q must be a 2-D [out, in] tensor")
        n, k = weight_q.shape
        blocks = (-(-n // BLOCK), -(-k // BLOCK))
        if not isinstance(weight_scale, torch.Tensor) or tuple(weight_scale.shape) not in ((n,), blocks):
            got = tuple(weight_scale.shape) if isinstance(weight_scale, torch.Tensor) else type(weight_scale).__name__
            raise ValueError(f"Linear8.from_quantized: weight_scale must be [{n}] (per output channel) or "
                             f"{list(blocks)} (128 x 128 blocks), got {got}")
        mod = cls(k, n, bias is not None, device=weight_q.device, dtype=weight_q.dtype,
                  activation=activation, block=BLOCK if weight_scale.dim() == 2 else None)
        with torch.no_grad():
            mod.weight.copy_(preshuffle(weight_q).data)
            mod.weight_scale.copy_(weight_scale)
            if bias is not None:
                mod.bias.copy_(bias)
        return mod

    # ---- forward --------------------------------------------------------------------------------------------
    def preshuffled_weight(self) -> PreshuffledWeight:
        """`weight` as gemm_a8's B (the same storage). Re-wrapped when the buffer is replaced (.to(), assignment);
        an in-place load keeps the wrapper and the launch plans cached on it."""
        wq = self._wq
        if wq is None or wq.data is not self.weight:
            wq = self._wq = PreshuffledWeight(self.weight)
        return wq

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Linear8: x must be [..., {self.in_features}], got {tuple(x.shape)}")
        return linear8_forward(x, self.weight, self.weight_scale, self.bias, self.activation,
                               self.preshuffled_weight())  # (block-scaled when weight_scale is [NB, KB])

    # ---- state ----------------------------------------------------------------------------------------------
    def _apply(self, fn, recurse=True):
        # The codes and their scales keep their dtypes whatever fn converts (model.half() would turn fp8 codes
        # into fp16 numbers and round the fp32 scales); only a device move applies to them.
        kept = {name: self._buffers.pop(name) for name in ("weight", "weight_scale")}
        try:
            super()._apply(fn, recurse)
        finally:
            for name, t in kept.items():
                moved = fn(t)
                self._buffers[name] = moved if moved.dtype == t.dtype else t.to(device=moved.device)
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        w = state_dict.get(prefix + "weight")
        if isinstance(w, torch.Tensor) and w.dtype != self.weight.dtype:
            error_msgs.append(f"Linear8 {prefix}weight: the state_dict holds {w.dtype} codes, this module "
                              f"{self.weight.dtype}; 8-bit codes are not converted (quantize again instead)")
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"dtype={self.weight.dtype}, activation={self.activation!r}"
                + ("" if self.block is None else f", block={self.block}"))


def linear8_forward(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, bias, activation: str,
                    wq: PreshuffledWeight | None = None) -> torch.Tensor:
    """Linear8's forward on its state tensors (weight: the preshuffled codes; wq: a PreshuffledWeight of them, made
    here when None): quantize_rows(x), then gemm_a8 on the GPU or the float64 oracle on the CPU. The fusion pass
    runs a Linear8 region's unfused meaning with it (fusedgemm.fusion.program_a8). A 2-D weight_scale [NB, KB]
    is block-scaled: x is quantized per 1 x 128 group and gemm_a8 takes both block scales."""
    lead = x.shape[:-1]
    block = weight_scale.dim() == 2
    xq, sx = quantize_rows(x, weight.dtype, group=BLOCK if block else None)
    epilogue = _epilogue_name(activation, bias is not None)
    if x.is_cuda or emulated_arch() is not None:  # (CPU tensors inside fusedgemm.testing.emulate: the kernels)
        if bias is not None and bias.dtype not in (torch.float32, x.dtype):
            bias = bias.float()  # a module cast to another 16-bit type than x's: gemm_a8 takes fp32 too
        y = gemm_a8(xq, PreshuffledWeight(weight) if wq is None else wq, bias, scale_a=sx, scale_b=weight_scale,
                    epilogue=epilogue, out_dtype=x.dtype)
    elif block:
        y = gemm_a8_block_reference(xq, unshuffle(PreshuffledWeight(weight)), bias, scale_a=sx, scale_b=weight_scale,
                                    epilogue=epilogue, out_dtype=x.dtype)
    else:
        y = gemm_a8_reference(xq, unshuffle(PreshuffledWeight(weight)), bias, scale_a=sx, scale_b=weight_scale,
                              epilogue=epilogue, out_dtype=x.dtype)
    return y.reshape(*lead, weight.shape[0])


# ---- whole models -------------------------------------------------------------------------------------------------
def _skipped(name: str, module: torch.nn.Module, skip) -> bool:
    if skip is None:
        return False
    if callable(skip):
        return bool(skip(name, module))
    if isinstance(skip, str):
        skip = [skip]
    return any(name == s or name.endswith("." + s) for s in skip)


def why_not_quantized(name: str, module: torch.nn.Module, skip=None) -> str | None:
    """None if quantize() swaps this nn.Linear for a Linear8, else the reason it does not."""
    if _skipped(name, module, skip):
        return "skipped (skip=)"
    if type(module) is not torch.nn.Linear:
        return f"{type(module).__name__} is a subclass of nn.Linear: its forward may differ, left as is"
    k, n = module.in_features, module.out_features
    if k % 16 or n % 16 or k == 0 or n == 0:
        return f"in_features={k}, out_features={n}: gemm_a8 needs both positive multiples of 16"
    if module.weight.device.type == "meta":
        return "weight on the meta device (nothing to quantize)"
    if not module.weight.dtype.is_floating_point:
        return f"weight dtype {module.weight.dtype} is not a float"
    return None


def quantize(model: torch.nn.Module, dtype="fp8", *, skip=None, report: bool = False, block: int | None = None):
    """Swap every eligible nn.Linear of `model` for a Linear8 (weights quantized per output channel on their
    device), IN PLACE: each full-precision weight is released as its layer is swapped, so memory never holds
    two copies of the model (copy.deepcopy(model) first to keep the original). Returns the model, or
    (model, rows) with report=True: one (qualified name, "swapped" or the reason not) per nn.Linear found.

    Eligible: exactly nn.Linear (subclasses may have their own forward), in_features and out_features
    multiples of 16, a float weight not on the meta device, and not matched by `skip`: a callable
    (name, module) -> bool, or names (a string or a list of them) matching a module's qualified name or its
    last components (skip=["lm_head"] matches "lm_head" and "model.lm_head"). A module shared by several
    parents becomes one shared Linear8. If `model` itself is an eligible nn.Linear, the new Linear8 is returned.
    block=128: block-scaled Linear8s (Linear8.from_linear's block)."""
    resolve_dtype(dtype, None, "quantize")  # a bad dtype is named before any layer is looked at
    rows: list[tuple[str, str]] = []
    done: dict[int, Linear8 | None] = {}  # id of an nn.Linear -> its Linear8 (None: left as is)

    def convert(name: str, module: torch.nn.Module):
        if id(module) not in done:
            why = why_not_quantized(name, module, skip)
            rows.append((name, "swapped" if why is None else why))
            done[id(module)] = None if why is not None else Linear8.from_linear(module, dtype, block=block)
        return done[id(module)]

    def visit(parent: torch.nn.Module, prefix: str):
        for child_name, child in list(parent.named_children()):
            name = f"{prefix}.{child_name}" if prefix else child_name
            if isinstance(child, torch.nn.Linear):
                new = convert(name, child)
                if new is not None:
                    setattr(parent, child_name, new)
            else:
                visit(child, name)

    if isinstance(model, torch.nn.Linear):
        new = convert("", model)
        result = model if new is None else new
    else:
        visit(model, "")
        result = model
    return (result, rows) if report else result
