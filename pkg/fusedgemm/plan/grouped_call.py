"""The launch of a grouped GEMM (grouped.py): which tile config serves it, the grid of virtual row blocks, and the
kernel argument with the groups' fields (gemm_groups.hpp).

Group sizes stay on the device, so the grid is sized for the worst case: the contiguous layout's G groups of M
rows in all have at most (M + min(G, M) (BM - 1)) / BM row blocks of BM rows; the masked layout's G x ceil(rows / BM).
Blocks past the last group's rows exit at once. The sm_90a persistent configs run grouped calls too (one wave of CTAs
over every group's row blocks times the column tiles, the group table built in each CTA: gemm_groups.hpp), for the
contiguous and masked layouts, at most PERSISTENT_MAX_GROUPS groups, no block scales or out_group: pinned only
while that path waits for its first GPU run (pending.py 'sm90_grouped_persistent').
"""
from __future__ import annotations

from . import forced, sm_count
from .. import pending
from .call import _tensor_map_a, _tensor_map_b, _tensor_map_k_major, _TMAP_L2_256B, kernel_for
from . import cdna, sm90
from ..runtime.arch import vendor_of
from ..runtime.device import current_raw_stream
from ..runtime.gemm_spec import MATMUL_IN, OUT_CODEGEN, GemmKernel, config_fits, whole_k_blocks
from ..runtime.kernels import GEMM_CONFIGS, GROUP_TABLE_MAX, IN_BYTES

_MAX_GRID_Y = 65535
# sm_90a: the CTA-per-tile wgmma configs a grouped kernel runs on (gemm_groups.hpp; no swapped, paired or
# persistent tiles yet), by the rows a group has on average.
SM90_GROUPED_CONFIGS = ("tile_64x128", "tile_128x128")
PERSISTENT_MAX_GROUPS = GROUP_TABLE_MAX  # groups a persistent grouped kernel's table holds (gemm_groups.hpp)


def grouped_config_ok(name: str) -> bool:
    """Whether config `name` has grouped kernels: CTA-per-tile, unswapped, unpaired (any portable / CDNA config),
    or an sm_90a persistent one without B-multicast pairs (persistent_ok says for which calls)."""
    cfg = GEMM_CONFIGS[name]
    return not (cfg.swap_ab or cfg.pair_b or cfg.tile_loop)


def persistent_refusal(config: str, layout, block_scaled: bool, epi) -> str | None:
    """Why a grouped call cannot run on persistent config `config` (None: it can)."""
    if layout.rows < 0:
        return "the m_indices layout (no group table: use offs or masked_m)"
    if layout.groups > PERSISTENT_MAX_GROUPS:
        return f"{layout.groups} groups (its group table holds {PERSISTENT_MAX_GROUPS})"
    if block_scaled:
        return "block scales"
    if epi.out_group:
        return "out_group"
    if not config_fits(config, epi):
        return "an epilogue with more than 3 hoisted row and column values"
    return None



def choose_grouped(arch: str, rows_per_group: int, n: int, k: int, in_kind: str, rows: int = 0, groups: int = 1,
                   block_scaled: bool = False):
    """-> the tile config of a grouped call whose groups have about `rows_per_group` rows each (`rows` in all over
    `groups` groups: the CDNA plan predicts the grouped kernel on them; block-scaled: of the configs with such
    kernels)."""
    pinned = forced()
    if pinned is not None:
        name, splits = pinned
        if not grouped_config_ok(name) or splits != 1:
            raise ValueError(f"grouped GEMM: config {name} (split-K {splits}) has no grouped kernels; they run on "
                             "CTA-per-tile configs without split-K (tile_64x128, tile_128x128 on sm_90a; any portable "
                             "or CDNA config) and on the sm_90a persistent configs without pairs")
        return GEMM_CONFIGS[name]
    if arch == "sm_90a":
        return GEMM_CONFIGS["tile_64x128" if rows_per_group <= 64 else "tile_128x128"]
    configs = cdna.BLOCK_SCALED_CONFIGS if block_scaled else cdna.CONFIGS
    return GEMM_CONFIGS[cdna.choose_grouped_name(rows, groups, n, k, arch, in_kind, configs)]


def sm90_persistent(dev: int, in_kind: str, layout, rows: int, n: int, k: int, block_scaled: bool, epi):
    """The persistent config an sm_90a grouped call of `rows` rows in all takes instead of tile_128x128, or None: the
    dense plan's rule on the whole call's rows (plan/sm90.py), where the persistent grouped kernels take the call
    and have run on a GPU (pending.py)."""
    if pending.pending("sm90_grouped_persistent"):
        return None
    cfg = sm90.persistent_choice(rows, n, k * IN_BYTES[in_kind], sm_count(dev), in_kind)
    if cfg is None or persistent_refusal(cfg.name, layout, block_scaled, epi) is not None:
        return None
    return cfg


def row_blocks(layout, block_m: int) -> int:
    """The grid's virtual row blocks: an upper bound of the groups' row blocks whatever the sizes are. Contiguous:
    a group of r > 0 rows takes ceil(r / BM) <= (r + BM - 1) / BM blocks, and at most min(G, M) groups have rows,
    so all take at most (M + min(G, M) (BM - 1)) / BM. (The min matters at decode: 8 rows over 128 experts need 8
    blocks, not 126 -- every block past the last group still walks the sizes before it exits.)"""
    if layout.rows < 0:  # m_indices: the rows in blocks (M and every group's first row are aligned to 128)
        return -(-layout.m // block_m)
    if layout.rows:
        return layout.groups * -(-layout.rows // block_m)
    return (layout.m + min(layout.groups, layout.m) * (block_m - 1)) // block_m


class GroupedCallPlan:
    """Kernel, grid and packed arguments of one grouped call. run() takes A's, B's and the index's addresses, then
    the values of the Params fields named by `pointers` (outputs, then tensor operands)."""

    def __init__(self, dev: int, arch: str, in_kind: str, layout, n: int, k: int, out_dtype, epi, values: dict,
                 pointers: tuple[str, ...], n_out: int, op: str, block_scaled: bool = False, config: str | None = None):
        rows = layout.rows_hint * layout.groups if layout.rows > 0 else layout.m  # masked: the hint's, not Mmax's
        # config: the caller's (a group-quantised output's, out_groups.group_config), else the plan's
        cfg = GEMM_CONFIGS[config] if config else choose_grouped(arch, layout.rows_hint, n, k, in_kind, rows,
                                                                 layout.groups, block_scaled)
        if block_scaled and not cfg.sm90 and not cdna.has_block_scaled_kernel(cfg.name):
            raise ValueError(f"{op}: config {cfg.name} has no block-scaled kernel; on AMD block scales run on "
                             f"{', '.join(cdna.BLOCK_SCALED_CONFIGS)}")
        if cfg.persistent:  # pinned (the plan's own persistent choice below is checked by sm90_persistent)
            why = persistent_refusal(cfg.name, layout, block_scaled, epi)
            if why is not None:
                raise ValueError(f"{op}: the persistent grouped kernels ({cfg.name}) do not take {why}; the "
                                 "CTA-per-tile configs (tile_64x128, tile_128x128) do")
            pending.refuse(op, "sm90_grouped_persistent", f"a grouped GEMM on {cfg.name}")
        elif not config and forced() is None and cfg.name == "tile_128x128":
            cfg = sm90_persistent(dev, in_kind, layout, rows, n, k, block_scaled, epi) or cfg
        if not cfg.serves(in_kind) or (in_kind in MATMUL_IN and arch == "sm_90a" and not cfg.sm90):
            raise ValueError(f"{op}: config {cfg.name} has no {in_kind} grouped kernel on {arch}")
        self.dev, self.m, self.n, self.k, self.kind, self.groups = dev, layout.m, n, k, in_kind, layout.groups
        blocks = row_blocks(layout, cfg.block_m)
        if blocks > _MAX_GRID_Y:
            raise ValueError(f"{op}: {layout.m} rows in {layout.groups} groups need {blocks} row blocks of "
                             f"{cfg.block_m}, more than one launch has ({_MAX_GRID_Y})")
        spec = GemmKernel(arch, cfg.name, in_kind, OUT_CODEGEN[str(out_dtype).split(".")[-1]], epi, grouped=True,
                          block_scaled=block_scaled, whole_k_blocks=whole_k_blocks(cfg.name, in_kind, k))
        kernel = kernel_for(dev, spec)
        names = [f.split(".", 1)[-1] for f in kernel.signature.flat_names[2:]]
        self.template = kernel.signature.values_in_order(
            dict(values, M=layout.m, N=n, K=k, ld_out=n_out, ld_saved=n_out, grp_index=0, grp_count=layout.groups,
                 grp_rows=layout.rows, **{p: 0 for p in pointers}), skip=2)
        self.slots = tuple(names.index(p) for p in ("grp_index", *pointers))
        self.tma = cfg.sm90
        self.block_m, self.block_n = cfg.block_m, cfg.block_n
        self.config = cfg.name
        warp = 64 if vendor_of(arch) == "amd" else 32
        self.a_map = self.b_map = (None, None)  # (address, encoded tensor map): the last one used
        grid = (-(-n // cfg.block_n), blocks, 1)
        if cfg.persistent:  # one wave of CTAs over the units (at most `blocks` row blocks x the column tiles)
            grid = (max(1, min(grid[0] * blocks, sm_count(dev))), 1, 1)
        self.launch = kernel.bind(grid, (1, 1, 1), cfg.warps * warp, spec.smem)

    def run(self, a_ptr: int, b_ptr: int, index_ptr: int, *pointers: int) -> None:
        args = self.template.copy()
        for slot, ptr in zip(self.slots, (index_ptr, *pointers)):
            args[slot] = ptr
        stream = current_raw_stream(self.dev)
        if not self.tma:
            self.launch(stream, a_ptr, b_ptr, *args)
            return
        # Tensor maps hold the address: the last one per operand is kept (the weights' never changes)
        a_last, a_map = self.a_map
        if a_last != a_ptr:
            a_map = _tensor_map_a(a_ptr, self.m, self.k, self.block_m, _TMAP_L2_256B, self.kind)
            self.a_map = (a_ptr, a_map)
        b_last, b_map = self.b_map
        if b_last != b_ptr:
            rows_b = self.groups * self.n  # B: the groups' weights stacked, [G * N, K]
            if self.kind in MATMUL_IN:
                b_map = _tensor_map_k_major(b_ptr, rows_b, self.k, self.block_n, _TMAP_L2_256B, self.kind, self.k)
            else:
                b_map = _tensor_map_b(b_ptr, rows_b, self.k, self.block_n, _TMAP_L2_256B)
            self.b_map = (b_ptr, b_map)
        self.launch(stream, a_map, b_map, *args)
