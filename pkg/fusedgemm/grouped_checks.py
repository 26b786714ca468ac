"""The checks of the grouped ops (grouped.py): where each group's rows are (GroupLayout: the contiguous and the
masked layouts), the group sizes' values (a host sync: CPU tensors always, a GPU under FUSEDGEMM_CHECK_GROUPS=1),
the experts' weights, and a grouped call's epilogue operands in the kernel's form (per-expert [G, N] column
operands flattened to [G * N], per-row ones to [M]) and in each group's (the reference's)."""
from __future__ import annotations

import dataclasses
import os

import torch

from . import epilogue as _epi

CHECK_GROUPS = os.environ.get("FUSEDGEMM_CHECK_GROUPS", "") not in ("", "0")
M_INDICES_ALIGN = 128  # kMIndicesAlign (gemm_groups.hpp): m_indices' groups start at multiples of it


@dataclasses.dataclass(frozen=True)
class GroupLayout:
    """Where each group's rows are: contiguous (rows == 0: index = offs), masked (rows = Mmax: index = masked_m) or
    DeepGEMM's m_indices (rows == -1: index = each row's group, -1 for padding)."""
    groups: int
    m: int  # rows of x as the kernel sees it ([M, K] or [G * Mmax, K])
    rows: int  # masked: Mmax; contiguous: 0; m_indices: -1
    index: torch.Tensor  # offs or masked_m, int32 [G]; m_indices int32 [M]
    lead: tuple  # the output's leading dims: (M,) or (G, Mmax)
    rows_hint: int  # rows a group has about (the plan's M)

    def spans(self) -> list:
        """Each group's rows of the [m, K] view: (r0, r1) bounds, or (m_indices) a tensor of row numbers (host
        values: syncs; the reference and the checks)."""
        if self.rows < 0:
            return [(self.index == g).nonzero().flatten().cpu() for g in range(self.groups)]
        idx = self.index.tolist()
        if self.rows:
            return [(g * self.rows, g * self.rows + v) for g, v in enumerate(idx)]
        return [(0 if g == 0 else idx[g - 1], v) for g, v in enumerate(idx)]


def group_layout(op: str, x: torch.Tensor, offs, masked_m, expected_m, groups: int, m_indices=None) -> GroupLayout:
    given = [name for name, v in (("offs", offs), ("masked_m", masked_m), ("m_indices", m_indices)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"{op}: give exactly one of offs (x [M, K], rows grouped by expert), masked_m (x [G, Mmax, "
                         f"K]) and m_indices (x [M, K], each row's expert), got {' and '.join(given) or 'none'}")
    what = given[0]
    index = {"offs": offs, "masked_m": masked_m, "m_indices": m_indices}[what]
    length = x.shape[0] if what == "m_indices" and x.dim() == 2 else groups
    if not isinstance(index, torch.Tensor):
        raise TypeError(f"{op}: {what} must be an int32 tensor on x's device, got {type(index).__name__}")
    if index.dtype != torch.int32 or tuple(index.shape) != (length,):
        axis = "M" if what == "m_indices" else "G"
        raise ValueError(f"{op}: {what} must be int32 of shape [{axis}={length}]"
                         f"{'' if what == 'm_indices' else ' (the weight experts)'}, got {index.dtype} of shape "
                         f"{list(index.shape)}")
    if index.device != x.device:
        raise ValueError(f"{op}: {what} is on {index.device}, expected {x.device} (the device of x)")
    if not index.is_contiguous():
        index = index.contiguous()
    if expected_m is not None and (isinstance(expected_m, bool) or not isinstance(expected_m, int) or expected_m < 0):
        raise ValueError(f"{op}: expected_m must be a non-negative int (rows per group, a plan hint), got "
                         f"{expected_m!r}")
    if m_indices is not None:
        if x.dim() != 2 or x.shape[0] % M_INDICES_ALIGN:
            raise ValueError(f"{op}: with m_indices, x must be [M, K] with M a multiple of {M_INDICES_ALIGN} (each "
                             f"expert's rows start at a multiple of {M_INDICES_ALIGN}, padded with -1 rows), got "
                             f"shape {list(x.shape)}")
        m = x.shape[0]
        layout = GroupLayout(groups, m, -1, index, (m,), expected_m if expected_m is not None else -(-m // groups))
    elif offs is not None:
        if x.dim() != 2:
            raise ValueError(f"{op}: with offs, x must be [M, K] (rows grouped by expert), got shape {list(x.shape)}")
        m = x.shape[0]
        layout = GroupLayout(groups, m, 0, index, (m,), expected_m if expected_m is not None else -(-m // groups))
    else:
        if x.dim() != 3 or x.shape[0] != groups:
            raise ValueError(f"{op}: with masked_m, x must be [G={groups}, Mmax, K], got shape {list(x.shape)}")
        rows = x.shape[1]
        layout = GroupLayout(groups, groups * rows, rows, index, (groups, rows),
                             min(expected_m, rows) if expected_m is not None else rows)
    if x.device.type == "cpu" or CHECK_GROUPS:
        check_sizes(op, layout)
    return layout


def check_sizes(op: str, layout: GroupLayout) -> None:
    """The checks that read the group sizes (a host sync on a GPU: FUSEDGEMM_CHECK_GROUPS=1 only)."""
    v = layout.index.tolist()
    if layout.rows < 0:
        for r0 in range(0, layout.m, M_INDICES_ALIGN):
            run = v[r0:r0 + M_INDICES_ALIGN]
            bad = [r0 + i for i, e in enumerate(run) if not -1 <= e < layout.groups]
            if bad:
                raise ValueError(f"{op}: m_indices[{bad[0]}] = {v[bad[0]]} is outside [-1, G={layout.groups})")
            real = [e for e in run if e >= 0]
            pad_at = run.index(-1) if -1 in run else len(run)
            if len(set(real)) > 1 or any(e >= 0 for e in run[pad_at:]):
                raise ValueError(f"{op}: m_indices rows {r0}..{r0 + M_INDICES_ALIGN - 1} must hold one expert's rows "
                                 f"and then -1 padding (each expert's rows start at a multiple of "
                                 f"{M_INDICES_ALIGN}), got experts {sorted(set(real))} with padding at row "
                                 f"{r0 + pad_at}")
        return
    if layout.rows:
        bad = [g for g, s in enumerate(v) if not 0 <= s <= layout.rows]
        if bad:
            raise ValueError(f"{op}: masked_m[{bad[0]}] = {v[bad[0]]} is outside [0, Mmax={layout.rows}]")
        return
    bad = [g for g in range(len(v)) if v[g] < (0 if g == 0 else v[g - 1])]
    if bad:
        raise ValueError(f"{op}: offs must be non-decreasing and >= 0 (cumulative group ends), but offs[{bad[0]}] = "
                         f"{v[bad[0]]} < {0 if bad[0] == 0 else v[bad[0] - 1]}")
    if v and v[-1] != layout.m:
        raise ValueError(f"{op}: offs must end at M={layout.m} (offs[-1] = {v[-1]}); every row of x belongs to a group")


# ---- operands ------------------------------------------------------------------------------------------------
def flat_operands(op: str, expr, operands: dict, layout: GroupLayout, n_out: int) -> dict:
    """A grouped call's operands -> the kernel's: n_vec [G, n_out] (or [n_out], expanded) -> [G * n_out]; m_vec [M]
    (masked: [G, Mmax]) -> [m]; aux [M, n_out] ([G, Mmax, n_out]) -> [m, n_out]; scalars as given."""
    kinds = {name: o.kind for name, o in _epi.operands(expr).items()}
    out = {}
    g = layout.groups
    for name, v in operands.items():
        kind = kinds.get(name)
        if not isinstance(v, torch.Tensor) or kind == "scalar" or v.numel() == 1:
            out[name] = v
            continue
        shape = tuple(v.shape)
        if kind == "n_vec":
            if shape in ((g, n_out), (g * n_out,)):
                out[name] = v.reshape(g * n_out)
            elif shape in ((n_out,), (1, n_out)):  # one vector for every expert
                out[name] = v.reshape(1, n_out).expand(g, n_out).reshape(g * n_out)
            else:
                raise ValueError(f"{op}: n_vec({name}) must be [G={g}, N={n_out}] (per expert) or [N={n_out}], got "
                                 f"{list(shape)}")
        elif kind == "m_vec":
            # (a trailing 1: a K <= 128 call's 1 x 128 scale_a, one block per row, is this per-row scale)
            if v.numel() != layout.m or not (v.dim() == 1 or shape in (layout.lead, (layout.m, 1), (*layout.lead, 1))):
                raise ValueError(f"{op}: m_vec({name}) must be {list(layout.lead)} (one value per row of x), got "
                                 f"{list(shape)}")
            out[name] = v.reshape(layout.m)
        elif kind == "aux":
            if shape not in ((*layout.lead, n_out), (layout.m, n_out)):
                raise ValueError(f"{op}: aux({name}) must be {[*layout.lead, n_out]}, got {list(shape)}")
            out[name] = v.reshape(layout.m, n_out)
        else:
            out[name] = v  # not used by the expression: bind names it
    return out


def group_operands(expr, flat: dict, g: int, rows, n_out: int) -> dict:
    """Group g's slice of the kernel's operands (the reference evaluates each group on its own)."""
    kinds = {name: o.kind for name, o in _epi.operands(expr).items()}
    out = {}
    for name, v in flat.items():
        kind = kinds.get(name)
        if not isinstance(v, torch.Tensor) or v.numel() == 1 or kind == "scalar":
            out[name] = v
        elif kind == "n_vec":
            out[name] = v[g * n_out:(g + 1) * n_out]
        else:  # m_vec, aux: by row (rows: a slice or the row numbers)
            out[name] = v[rows]
    return out


def check_weight(op: str, w, dtype, k: int) -> tuple[int, int]:
    if not isinstance(w, torch.Tensor) or w.dim() != 3:
        raise ValueError(f"{op}: w must be the experts' weights [G, N, K] (nn.Linear weights stacked), got "
                         f"{list(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__}")
    if w.dtype != dtype:
        raise TypeError(f"{op}: w is {w.dtype} but x is {dtype}; they must match")
    g, n, kw = w.shape
    if kw != k:
        raise ValueError(f"{op}: x has K={k} but w is [G={g}, N={n}, K={kw}]; K must agree")
    return g, n


def x_tensor(op: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: x must be a tensor, got {type(x).__name__}")
    if torch.is_grad_enabled() and x.requires_grad:
        raise NotImplementedError(f"{op} is not differentiable yet: call it under torch.no_grad() / inference_mode()")
    return x


def swiglu_block_scales(op: str, x: torch.Tensor, scale_a, scale_b, groups: int, n2: int, k: int):
    """grouped_swiglu's DeepSeek-style block scales, for the main loop: -> (scale_a or None, scale_b or None).
    scale_a [M, ceil(K/128)] ([G, Mmax, ceil(K/128)] masked): 1 x 128 per row, passed on as it is. scale_b
    [G, 2I/128, ceil(K/128)]: each expert's gate blocks then up blocks (merged order, the checkpoint's), I % 128 == 0;
    returned pair-ordered for the interleaved weight (rows 2q, 2q + 1: the gate's and the up's block q; the kernels'
    scale_b_row). Scales that are not block tables come back as None (they stay the epilogue's)."""
    kb = -(-k // 128)
    a_block = isinstance(scale_a, torch.Tensor) and kb > 1 and scale_a.dim() == x.dim() and scale_a.shape[-1] == kb
    if not (isinstance(scale_b, torch.Tensor) and scale_b.dim() == 3):
        return (scale_a if a_block else None), None
    inter = n2 // 2
    if inter % 128 or tuple(scale_b.shape) != (groups, n2 // 128, kb):
        raise ValueError(f"{op}: a block scale_b is [G={groups}, 2I/128, ceil(K/128)={kb}] (each expert's gate blocks, "
                         f"then its up blocks) with I a multiple of 128; got {list(scale_b.shape)} for 2I={n2}")
    nbi = inter // 128
    paired = torch.stack((scale_b[:, :nbi], scale_b[:, nbi:]), dim=2).reshape(groups, 2 * nbi, kb)
    return (scale_a if a_block else None), paired.contiguous()
