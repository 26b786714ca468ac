"""A paper model of the CDNA GEMM kernels (gfx942 / gfx950): PREDICTED times, never measured ones.

Written before any AMD GPU ran these kernels (issue 41, first step). It combines
  * the datasheet constants of each chip (HARDWARE: CUs, clock, dense MFMA peaks, HBM) and a few stated
    assumptions about the CU's memory pipes (L1, LDS, L2, latency; docs/perf-notes.md lists each one's source),
  * each kernel's hot loop as compiled: per K-loop iteration, one wave's counts of MFMAs (and their cycles),
    vector-memory loads and bytes, LDS ops and bytes, SALU / VALU, waits and branches (HOT_LOOPS, read from the
    code object's listing by tools/probes/cdna_hot_loop.py into cdna_hot_loops.txt; tests/test_cdna_model.py checks
    the table against the listing where the AMD build runs), and its registers / LDS (occupancy). The block-scaled
    fp8 kernels are the kind "fp8block" (BLOCK_KINDS): fp8's MFMAs and bytes, their own hot loops.
Per problem and tile config it predicts each limit of one CU's K loop, the L2 / fabric / HBM limits of the
whole grid, and takes the largest: `predict(...)` -> Prediction (time, the binding term, every term).

The model is a roofline over the CU's pipes, with per-wave latency; it does not capture L1 / L2 hit rates
beyond the unique-bytes rules below, bank conflicts, MFMA dependency stalls inside a chain, the epilogue's own
time beyond its HBM bytes, clock throttling under MFMA load, launch overhead, or TLB effects.

Imports nothing from the rest of the package but the tile-config table (plan/cdna.py uses it per call).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import re

from ..runtime import tile_configs
from .cdna_xcd_order import XCD_ORDER_XCDS, run_extent


# ---- the chips -----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Hardware:
    name: str
    cus: int
    clock_hz: float  # peak engine clock
    xcds: int
    peak: dict  # dense MFMA peak, FLOP/s (OP/s for int8), per input kind
    hbm_bytes_s: float
    lds_bytes: int  # per CU
    l1_bytes_clk: float  # vector L1 -> VGPR per CU (assumed, see docs/perf-notes.md)
    lds_bytes_clk: float  # LDS bandwidth per CU
    l2_bytes_clk_xcd: float  # L2 -> L1 per XCD
    mall_bytes_s: float  # Infinity Cache (MALL) -> L2, whole chip
    lat_l2: int  # cycles, a vector load served by L2 / MALL, under load (assumed)
    lat_hbm: int  # cycles, a vector load served by HBM (assumed)
    vgprs_per_simd_lane: int = 512  # unified VGPR + AGPR file per SIMD lane
    max_waves_per_simd: int = 8
    simds: int = 4
    valu_cycles: int = 4  # a wave64 VALU / MFMA issue occupies its SIMD's VALU port this long

    @property
    def cus_per_xcd(self) -> int:
        return self.cus // self.xcds


HARDWARE = {
    # MI300X datasheet: 304 CUs, 2100 MHz, fp8 2614.9 / bf16 1307.4 / tf32 653.7 TFLOP/s dense, 5.3 TB/s, 8 XCDs,
    # 64 KB LDS per CU.
    "gfx942": Hardware("MI300X", 304, 2.1e9, 8,
                       {"fp8": 2614.9e12, "int8": 2614.9e12, "bf16": 1307.4e12, "fp16": 1307.4e12, "tf32": 653.7e12},
                       5.3e12, 64 * 1024, 64.0, 128.0, 16 * 128.0, 17.2e12, 500, 900),
    # MI355X datasheet: 256 CUs, 2400 MHz, fp8 5033.2 / bf16 2516.6 TFLOP/s dense ("5.0 / 2.5 PFLOP/s"), fp32 matrix
    # 157.3 TFLOP/s (the tf32 kind runs exact fp32 MFMAs there), 8 TB/s, 8 XCDs, 160 KB LDS per CU.
    "gfx950": Hardware("MI355X", 256, 2.4e9, 8,
                       {"fp8": 5033.2e12, "int8": 5033.2e12, "bf16": 2516.6e12, "fp16": 2516.6e12,
                        "tf32": 157.3e12},
                       8.0e12, 160 * 1024, 64.0, 128.0, 16 * 128.0, 17.2e12, 500, 900),
}

# Cycles one MFMA occupies its SIMD's matrix pipe (back-to-back issue rate).
#  gfx942: AMD Matrix Instruction Calculator (ROCm/amd_matrix_instruction_calculator, --architecture cdna3,
#          "Cycles"); they agree with the datasheet peaks (16 cycles x 4 SIMDs x 304 CUs x 2.1 GHz).
#  gfx950: the calculator has no CDNA4 table and LLVM's gfx950 scheduling model gives every f8f6f4 MFMA the same
#          count whatever the format (its own FIXME), so these are derived from the MI355X datasheet peaks:
#          FLOP per instruction / (peak / (CUs x 4 SIMDs x clock)).
MFMA_CYCLES = {
    "gfx942": {"v_mfma_f32_16x16x32_fp8_fp8": 16, "v_mfma_f32_32x32x16_fp8_fp8": 32, "v_mfma_i32_16x16x32_i8": 16,
               "v_mfma_i32_32x32x16_i8": 32, "v_mfma_f32_16x16x16_bf16": 16, "v_mfma_f32_32x32x8_bf16": 32,
               "v_mfma_f32_16x16x16_f16": 16, "v_mfma_f32_32x32x8_f16": 32, "v_mfma_f32_16x16x8_xf32": 16,
               "v_mfma_f32_16x16x4_f32": 32},
    "gfx950": {"v_mfma_f32_16x16x128_f8f6f4": 32, "v_mfma_scale_f32_16x16x128_f8f6f4": 32,
               "v_mfma_f32_32x32x64_f8f6f4": 64, "v_mfma_scale_f32_32x32x64_f8f6f4": 64,
               "v_mfma_i32_16x16x64_i8": 16, "v_mfma_i32_32x32x32_i8": 32, "v_mfma_f32_16x16x32_bf16": 16,
               "v_mfma_f32_32x32x16_bf16": 32, "v_mfma_f32_16x16x32_f16": 16, "v_mfma_f32_32x32x16_f16": 32,
               "v_mfma_f32_16x16x4_f32": 32},
}


def mfma_flops(mnemonic: str) -> int:
    """2 * M * N * K of an MFMA mnemonic (v_mfma_f32_16x16x32_fp8_fp8 -> 16384)."""
    m = re.search(r"_(\d+)x(\d+)x(\d+)", mnemonic)
    if not m:
        raise ValueError(f"not an MFMA mnemonic: {mnemonic}")
    a, b, c = map(int, m.groups())
    return 2 * a * b * c


IN_BYTES = {"fp8": 1, "int8": 1, "bf16": 2, "fp16": 2, "tf32": 4}
KINDS = tuple(IN_BYTES)
# Kinds of the model that are another kind's kernels with block scales (gemm_a8's DeepSeek-style fp8, blockscale.py):
# the same MFMAs and the same A / B bytes per K step; the scale loads and the partial tiles' scaled adds are in their
# hot loops' counts, and the scales' own bytes in the grid's HBM / MALL terms (scale_bytes).
BLOCK_KINDS = {"fp8block": "fp8"}
SCALE_BLOCK = 128  # values of K per scale block (1 x 128 for A, 128 x 128 for B)


def base_kind(kind: str) -> str:
    """The input kind whose MFMAs, bytes per element and peak a model kind has (fp8block -> fp8)."""
    return BLOCK_KINDS.get(kind, kind)


def scale_bytes(kind: str, m: int, n: int, k: int) -> int:
    """Bytes of block scales a call reads once (0 for a kind without them): scale_a [M, ceil(K/128)] and scale_b
    [ceil(N/128), ceil(K/128)], float32."""
    if kind not in BLOCK_KINDS:
        return 0
    kb = -(-k // SCALE_BLOCK)
    return 4 * (m + -(-n // SCALE_BLOCK)) * kb


# ---- the hot loop of a code object -----------------------------------------------------------------------------
_LOAD_BYTES = {"ubyte": 1, "sbyte": 1, "ushort": 2, "sshort": 2, "short_d16": 2, "dword": 4, "dwordx2": 8,
               "dwordx3": 12, "dwordx4": 16, "b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1,
               "u16": 2, "i16": 2}


def _lane_bytes(mnemonic: str) -> int:
    suffix = mnemonic.rsplit("_", 1)[-1]
    per = _LOAD_BYTES.get(suffix, 4)
    return 2 * per if re.search(r"_(read|write|load|store)2(st64)?_", mnemonic) else per


def classify(mnemonic: str) -> str:
    """The issue class of an instruction: mfma, vmem_load, vmem_store, lds_load (global -> LDS), lds, smem,
    waitcnt, barrier, branch, nop, salu, valu."""
    if mnemonic.startswith(("v_mfma", "v_smfmac")):
        return "mfma"
    if mnemonic.startswith(("global_load", "buffer_load", "flat_load")):
        return "lds_load" if mnemonic.endswith("_lds") or "_lds_" in mnemonic else "vmem_load"
    if mnemonic.startswith(("global_store", "buffer_store", "flat_store", "global_atomic", "buffer_atomic")):
        return "vmem_store"
    if mnemonic.startswith("ds_"):
        return "lds"
    if mnemonic.startswith(("s_load", "s_buffer_load", "s_store")):
        return "smem"
    if mnemonic == "s_waitcnt" or mnemonic.startswith("s_waitcnt"):
        return "waitcnt"
    if mnemonic == "s_barrier":
        return "barrier"
    if mnemonic.startswith(("s_branch", "s_cbranch", "s_setpc", "s_swappc")):
        return "branch"
    if mnemonic.startswith(("s_nop", "s_sleep")):
        return "nop"
    if mnemonic.startswith("s_"):
        return "salu"
    return "valu"


@dataclasses.dataclass(frozen=True)
class HotLoop:
    """One wave's K loop, one iteration (which covers `steps` K steps of the config), as compiled; plus what
    the kernel descriptor says about registers and LDS. Counts are static: an instruction inside the loop
    counts once whether or not a branch skips it (the masked loads' branches do not skip on full tiles)."""
    mfma: tuple  # ((mnemonic, count), ...)
    vmem_loads: int
    vmem_load_bytes: int  # per wave (64 lanes)
    lds_loads: int = 0  # global -> LDS loads (gfx950 global_load_lds_dwordx4, gfx942 buffer_load_dword lds)
    lds_load_bytes: int = 0
    lds_ops: int = 0
    lds_bytes: int = 0
    salu: int = 0
    valu: int = 0
    smem: int = 0
    waitcnt: int = 0
    barrier: int = 0
    branch: int = 0
    nop: int = 0
    steps: int = 1  # K steps per iteration (the config's kStepsInFlight)
    prefetch: int = 0  # K steps whose loads are in flight under this iteration's MFMAs (0: the loop waits on its own)
    vgprs: int = 0  # arch VGPRs (accum_offset when AGPRs are used)
    agprs: int = 0
    lds_kernel_bytes: int = 0  # the kernel descriptor's group segment size

    @property
    def mfma_count(self) -> int:
        return sum(c for _m, c in self.mfma)

    @property
    def instructions(self) -> int:
        return (self.mfma_count + self.vmem_loads + self.lds_loads + self.lds_ops + self.salu + self.valu
                + self.smem + self.waitcnt + self.barrier + self.branch + self.nop)

    def mfma_cycles(self, arch: str) -> int:
        table = MFMA_CYCLES[arch]
        return sum(table[m] * c for m, c in self.mfma)

    def mfma_flops(self) -> int:
        return sum(mfma_flops(m) * c for m, c in self.mfma)

    def vgpr_alloc(self) -> int:
        """VGPRs + AGPRs one wave allocates in the unified file (granule 8)."""
        return register_alloc(self.vgprs + self.agprs)


def loop_range(instrs) -> tuple[int, int]:
    """(first, last) index of the K loop: the natural loop (a backward branch's target .. the last backward branch
    to it) that holds the most MFMAs. `instrs`: objects with .mnemonic, .index and .target_index (loader.Instr)."""
    best = None
    ends: dict[int, int] = {}
    for ins in instrs:
        t = getattr(ins, "target_index", None)
        if t is not None and t <= ins.index:
            ends[t] = max(ends.get(t, t), ins.index)
    for start, end in ends.items():
        n = sum(1 for i in instrs[start:end + 1] if classify(i.mnemonic) == "mfma")
        if n and (best is None or n > best[0]):
            best = (n, start, end)
    if best is None:
        raise ValueError("no loop with MFMAs in this kernel")
    return best[1], best[2]


def analyse(instrs, *, steps: int = 1, prefetch: int = 0, vgprs: int = 0, agprs: int = 0,
            lds_kernel_bytes: int = 0) -> HotLoop:
    """The HotLoop of a decoded kernel (the emulator loader's instruction list)."""
    start, end = loop_range(instrs)
    counts: dict[str, int] = {}
    mfma: dict[str, int] = {}
    vmem_bytes = lds_load_bytes = lds_bytes = 0
    for ins in instrs[start:end + 1]:
        cls = classify(ins.mnemonic)
        if cls == "vmem_load" and "lds" in str(getattr(ins, "text", "")).split()[1:]:
            cls = "lds_load"  # gfx942's buffer_load_dword ... lds: to LDS, not to VGPRs
        counts[cls] = counts.get(cls, 0) + 1
        if cls == "mfma":
            mfma[ins.mnemonic] = mfma.get(ins.mnemonic, 0) + 1
        elif cls == "vmem_load":
            vmem_bytes += 64 * _lane_bytes(ins.mnemonic)
        elif cls == "lds_load":
            lds_load_bytes += 64 * _lane_bytes(ins.mnemonic.removesuffix("_lds").replace("_lds_", "_"))
        elif cls == "lds":
            lds_bytes += 64 * _lane_bytes(ins.mnemonic)
    return HotLoop(tuple(sorted(mfma.items())), counts.get("vmem_load", 0), vmem_bytes,
                   counts.get("lds_load", 0), lds_load_bytes, counts.get("lds", 0), lds_bytes,
                   counts.get("salu", 0), counts.get("valu", 0) + counts.get("vmem_store", 0), counts.get("smem", 0),
                   counts.get("waitcnt", 0), counts.get("barrier", 0), counts.get("branch", 0), counts.get("nop", 0),
                   steps, prefetch, vgprs, agprs, lds_kernel_bytes)


# The hot loops of the register-direct template (portable_gemm.hpp) and of the LDS-staged one (cdna_gemm.hpp; the
# 8-bit kinds and bf16 / fp16), and of their block-scaled kernels (kind "fp8block": PortableBlockScaled<Config>,
# block_scales.hpp), one wave, one iteration, read from the code objects into plan/cdna_hot_loops.txt by
# `python tools/probes/cdna_hot_loop.py --table` (clang 22.1.8, the package's AMD build; epilogue `none` / `acc`,
# block-scaled bias + SiLU: the loop does not depend on it). tests/test_cdna_model.py re-reads them where the build
# runs.
# fmt: (arch, kernel, kind) -> HotLoop; kernel: the config's name, or for a CDNA LDS config's kernel for K filling
# whole K blocks (no K-edge test in its loads) the name with tile_configs.WHOLE_K_PREFIX
HOT_LOOPS: dict[tuple[str, str, str], HotLoop] = {}  # filled below from cdna_hot_loops.txt
HOT_LOOPS_FILE = pathlib.Path(__file__).with_name("cdna_hot_loops.txt")


def config_of(kernel: str) -> str:
    """The tile config of a HOT_LOOPS kernel name."""
    return kernel.removeprefix(tile_configs.WHOLE_K_PREFIX)


def kernel_of(arch: str, config: str, kind: str, k: int) -> str:
    """The HOT_LOOPS kernel a call with K = `k` runs on `config`: the whole-K-block kernel where K fills whole K
    blocks and its loop is in the table (the host launches it then, block-scaled or not: runtime/gemm_spec.py
    whole_k_blocks), else the config's."""
    whole = tile_configs.WHOLE_K_PREFIX + config
    if tile_configs.fills_k_blocks(config, k * IN_BYTES[base_kind(kind)]) and (arch, whole, kind) in HOT_LOOPS:
        return whole
    return config


# Table columns: arch, kernel, kind, mfma mnemonic, mfma count, vmem loads, vmem bytes, global -> LDS loads, their
# bytes, lds ops, lds bytes, salu, valu, smem, waitcnt, barrier, branch, nop, steps, vgprs, agprs, kernel LDS bytes.
# Lines starting with # are notes.
def _load_rows(text: str) -> None:
    for line in text.splitlines():
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        arch, kernel, kind, mnem = f[:4]
        (n_mfma, loads, lbytes, lds_loads, lds_load_b, lds_ops, lds_b, salu, valu, smem, wait, bar, br, nop, steps,
         vg, ag, lds_k) = map(int, f[4:])
        prefetch = loop_shape(arch, config_of(kernel), kind)[1]
        HOT_LOOPS[(arch, kernel, kind)] = HotLoop(((mnem, n_mfma),), loads, lbytes, lds_loads, lds_load_b, lds_ops,
                                                  lds_b, salu, valu, smem, wait, bar, br, nop, steps, prefetch, vg,
                                                  ag, lds_k)


def table_row(arch: str, config: str, kind: str, h: HotLoop) -> str:
    (mnem, n), = h.mfma
    return " ".join(map(str, (arch, config, kind, mnem, n, h.vmem_loads, h.vmem_load_bytes, h.lds_loads,
                              h.lds_load_bytes, h.lds_ops, h.lds_bytes, h.salu, h.valu, h.smem, h.waitcnt,
                              h.barrier, h.branch, h.nop, h.steps, h.vgprs, h.agprs, h.lds_kernel_bytes)))


# ---- geometry of a kernel's tile ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Geometry:
    name: str
    warps_m: int
    warps_n: int
    warps_k: int
    tiles_m: int  # 16 x 16 tiles per wave
    tiles_n: int

    @property
    def block_m(self) -> int:
        return 16 * self.warps_m * self.tiles_m

    @property
    def block_n(self) -> int:
        return 16 * self.warps_n * self.tiles_n

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n * self.warps_k


def geometry(config: str) -> Geometry:
    t = tile_configs.CONFIGS[config]
    if isinstance(t, tile_configs.CdnaTile):
        return Geometry(config, t.warps_m, t.warps_n, t.warps_k, t.tiles_m, t.tiles_n)
    if not isinstance(t, tile_configs.PortableTile):
        raise ValueError(f"{config} is not a CDNA (portable or cdna_lds) config")
    return Geometry(config, t.warps_m, t.warps_n, t.warps_k, t.tiles_m, t.tiles_n)


def step_bytes(arch: str, kind: str) -> int:
    """Bytes of K one wave's K step covers (the MFMA atom's kChunksPerStep x 16): arch/gfx9*_mfma.hpp."""
    return 128 if (arch, base_kind(kind)) == ("gfx950", "fp8") else 64


def loop_shape(arch: str, config: str, kind: str) -> tuple[int, int]:
    """(K steps one iteration of the config's K loop covers, K steps whose loads are in flight under its MFMAs).
    The register-direct template: kStepsInFlight steps, each iteration waiting on its own loads (prefetch 0). The
    LDS-staged one (cdna_gemm.hpp): its loop is unrolled twice (two B register sets), so an iteration is two K blocks
    of block_k_bytes, and the loads of K block k + 1 run under block k's MFMAs: one K block of prefetch."""
    t = tile_configs.CONFIGS[config]
    if isinstance(t, tile_configs.CdnaTile):
        per_block = t.block_k_bytes // step_bytes(arch, kind)
        return 2 * per_block, per_block
    return t.steps_in_flight, 0


# ---- the model ---------------------------------------------------------------------------------------------------
TERMS = ("MFMA pipe", "VALU issue", "latency", "L1 (VMEM)", "LDS", "L2", "MALL", "HBM")


@dataclasses.dataclass(frozen=True)
class Prediction:
    arch: str
    kind: str
    config: str
    m: int
    n: int
    k: int
    seconds: float  # PREDICTED
    bound: str  # the term that sets `seconds`
    terms: tuple  # ((name, seconds), ...) every term, for the table
    occupancy: int  # workgroups resident per CU
    waves_per_simd: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12

    @property
    def fraction_of_peak(self) -> float:
        return self.flops / self.seconds / HARDWARE[self.arch].peak[base_kind(self.kind)]


def register_alloc(regs: int) -> int:
    """VGPRs + AGPRs a wave using `regs` of them per lane allocates in the unified file (granule 8)."""
    return max(8, -(-regs // 8) * 8)


def workgroups_per_cu(hw: Hardware, warps: int, regs: int, lds_bytes: int) -> int:
    """Workgroups of `warps` waves, each lane `regs` VGPRs + AGPRs, `lds_bytes` of LDS, resident on one CU: the
    register file, waves per SIMD, LDS."""
    waves_per_simd = min(hw.max_waves_per_simd, hw.vgprs_per_simd_lane // register_alloc(regs))
    by_vgpr = waves_per_simd // -(-warps // hw.simds)
    by_lds = hw.lds_bytes // lds_bytes if lds_bytes else by_vgpr
    return max(0, min(by_vgpr, by_lds))


def occupancy(hw: Hardware, g: Geometry, h: HotLoop) -> int:
    """Workgroups of `g` resident on one CU (workgroups_per_cu with the hot loop's kernel's registers and LDS)."""
    return workgroups_per_cu(hw, g.warps, h.vgprs + h.agprs, h.lds_kernel_bytes)


def _fabric_bytes(hw: Hardware, g: Geometry, m: int, n: int, k_bytes: int, conc: int, xcd_order: bool) -> float:
    """Bytes the L2s read from the MALL / HBM: workgroup ids are dealt round-robin over the XCDs (id % xcds);
    the workgroups resident together on one XCD share what they read through its L2, so each such set reads its
    distinct A row blocks and B column blocks once. Launch order (xcd_order False: the register-direct template,
    grouped calls): a set of ids xcd, xcd + 8, ... spans consecutive rows of the grid (x fastest); its distinct
    columns are as many as its ids, up to the columns that id % 8 == xcd reaches. xcd_order (the LDS template's
    plain calls on its tiles without split-K, cdna_workgroup_tile): a set is a run of consecutive tile numbers in a
    raster of 8-row groups."""
    gx, gy = -(-n // g.block_n), -(-m // g.block_m)
    total_tiles = gx * gy
    per_set = hw.cus_per_xcd * conc
    ordered = xcd_order and gy > 1 and hw.xcds == XCD_ORDER_XCDS
    q, r = divmod(total_tiles, hw.xcds)
    total = 0
    for xcd in range(min(hw.xcds, total_tiles)):
        count = len(range(xcd, total_tiles, hw.xcds))
        reach = gx // math.gcd(hw.xcds, gx)
        for s in range(0, count, per_set):
            if ordered:
                t0 = xcd * q + min(xcd, r) + s
                xs, ys = run_extent(t0, t0 + min(count, s + per_set) - s - 1, gx, gy)
            else:
                first, last = xcd + hw.xcds * s, xcd + hw.xcds * (min(count, s + per_set) - 1)
                ys = last // gx - first // gx + 1
                xs = min(min(count, s + per_set) - s, reach)
            total += (min(ys * g.block_m, m) + min(xs * g.block_n, n)) * k_bytes
    return float(total)


@functools.lru_cache(maxsize=4096)
def predict(arch: str, kind: str, config: str, m: int, n: int, k: int, *, hot: HotLoop | None = None,
            geom: Geometry | None = None, l1_bytes_clk: float | None = None,
            from_hbm: bool | None = None, rows_per_block: int | None = None, grouped: bool = False) -> Prediction:
    """PREDICTED time of C[M, N] = A[M, K] . B[N, K]^T on `config` (or a hypothetical kernel: `hot` + `geom`).
    from_hbm: whether the loads wait out HBM latency (default: decode, M <= 64; a grouped call says so itself).
    rows_per_block: the rows of A a workgroup really reads (a grouped call's blocks hold one group's rows, the rest
    range-checked to zeros without a memory access); default min(M, block rows). grouped: tiles in launch order
    (a grouped call's blocks are not reordered per XCD; the LDS template's plain calls on tiles without split-K
    are)."""
    hw = HARDWARE[arch]
    if l1_bytes_clk is not None:
        hw = dataclasses.replace(hw, l1_bytes_clk=l1_bytes_clk)
    g = geom or geometry(config)
    h = hot or HOT_LOOPS[(arch, kernel_of(arch, config, kind, k), kind)]
    kb = IN_BYTES[base_kind(kind)]
    k_bytes = k * kb
    clk = hw.clock_hz

    # Work: output tiles (one workgroup each), K iterations per wave.
    gm, gn = -(-m // g.block_m), -(-n // g.block_n)
    tiles = gm * gn
    step = step_bytes(arch, kind)
    steps_per_wave = -(-k_bytes // (step * g.warps_k))
    iters = -(-steps_per_wave // h.steps)
    # Waves that have work in a full-height workgroup: a wave whose rows (columns) all lie past M (N) returns.
    act_m = min(g.warps_m, -(-min(m, g.block_m) // (16 * g.tiles_m)))
    act_n = min(g.warps_n, -(-min(n, g.block_n) // (16 * g.tiles_n)))
    waves = act_m * act_n * g.warps_k

    occ = occupancy(hw, g, h)
    if occ == 0:
        raise ValueError(f"{config}: does not fit a CU")
    wg_per_cu = -(-tiles // hw.cus)
    conc = min(occ, wg_per_cu)
    rounds = -(-wg_per_cu // conc)
    w = conc * waves / hw.simds  # waves per SIMD at once
    if from_hbm is None:
        from_hbm = m <= 64  # decode: the weight streams from HBM once; prefill: mostly L2 / MALL hits
    lat = hw.lat_hbm if from_hbm else hw.lat_l2

    # One iteration of the K loop on one CU, cycles, each limit alone.
    mfma_wave = h.mfma_cycles(arch)
    other = h.instructions - h.mfma_count
    # The loads a wave waits on in one iteration: the register-direct loop's once (its own, prefetch 0); the
    # LDS-staged loop's once per K block (its A stage is stored to LDS at the end of the block that loaded it), each
    # covered by one block's MFMAs of the SIMD's waves.
    waits = h.steps // h.prefetch if h.prefetch else 1
    covered = h.prefetch * max(w, 1.0) * mfma_wave / max(h.steps, 1)
    per_iter = {
        "MFMA pipe": max(w, 1.0) * mfma_wave,
        "VALU issue": max(w, 1.0) * (h.valu + h.mfma_count) * hw.valu_cycles,
        # one wave's chain: its MFMAs at the pipe's rate, every other instruction one issue slot (4 cycles), and
        # the load latency it waits out at each wait (less what the prefetched steps cover)
        "latency": mfma_wave + hw.valu_cycles * other + waits * max(0.0, lat - covered),
        "L1 (VMEM)": conc * waves * (h.vmem_load_bytes + h.lds_load_bytes) / hw.l1_bytes_clk,
        "LDS": conc * waves * (h.lds_bytes + h.lds_load_bytes) / hw.lds_bytes_clk,
        # unique bytes per workgroup per iteration: its rows of A and columns of B over the iteration's K
        "L2": conc * (min(m, g.block_m, rows_per_block or g.block_m) + min(n, g.block_n)) * h.steps * step * g.warps_k
              / (hw.l2_bytes_clk_xcd / hw.cus_per_xcd),
    }
    fixed = 2 * lat  # per workgroup: the first loads and the epilogue's stores
    terms = {name: rounds * (iters * c + fixed) / clk for name, c in per_iter.items()}
    once = 2 * m * n + scale_bytes(kind, m, n, k)  # C written once; a block-scaled call's scales read once
    t = tile_configs.CONFIGS.get(config)
    xcd_order = geom is None and isinstance(t, tile_configs.CdnaTile) and t.warps_k == 1 and not grouped
    terms["MALL"] = (_fabric_bytes(hw, g, m, n, k_bytes, conc, xcd_order) + once) / hw.mall_bytes_s
    terms["HBM"] = (m * k_bytes + n * k_bytes + once) / hw.hbm_bytes_s
    bound = max(terms, key=terms.get)
    return Prediction(arch, kind, config, m, n, k, terms[bound], bound, tuple((t, terms[t]) for t in TERMS), occ, w)


def predict_grouped(arch: str, kind: str, config: str, sizes: tuple, n: int, k: int) -> Prediction:
    """PREDICTED time of a grouped GEMM (gemm_groups.hpp): groups of `sizes` rows, each times its own [N, K] weight.
    The tiles are those of one GEMM whose rows are the groups' row blocks; its HBM bytes are every row of A and each
    non-empty group's weight once (a group of a few rows streams its weight from HBM, as decode does); each
    workgroup first walks the sizes, a round trip per 32 groups, before its first load."""
    g = geometry(config)
    blocks = sum(-(-s // g.block_m) for s in sizes if s)
    m, active = sum(sizes), sum(1 for s in sizes if s)
    if blocks == 0:
        raise ValueError("predict_grouped: every group is empty")
    small = max(sizes) <= 64
    base = predict(arch, kind, config, blocks * g.block_m, n, k, from_hbm=small, rows_per_block=-(-m // blocks),
                   grouped=True)
    hw = HARDWARE[arch]
    kb = IN_BYTES[base_kind(kind)]
    tiles = blocks * -(-n // g.block_n)
    rounds = -(-tiles // (hw.cus * max(base.occupancy, 1)))
    walk = rounds * -(-len(sizes) // 32) * hw.lat_l2 / hw.clock_hz
    hbm_bytes = (m * k + active * n * k) * kb + 2 * m * n
    terms = {t: v + (walk if t not in ("MALL", "HBM") else 0.0) for t, v in base.terms}  # the walk: per workgroup
    terms["HBM"] = hbm_bytes / hw.hbm_bytes_s
    terms["MALL"] = max(terms["MALL"], hbm_bytes / hw.mall_bytes_s)
    bound = max(terms, key=terms.get)
    return Prediction(arch, kind, config, m, n, k, terms[bound], bound, tuple((t, terms[t]) for t in TERMS),
                      base.occupancy, base.waves_per_simd)


def hbm_floor(arch: str, kind: str, m: int, n: int, k: int, out_bytes: int = 2) -> float:
    """Seconds to move A, B and C (and a block-scaled call's scales) through HBM once at the datasheet bandwidth."""
    kb = IN_BYTES[base_kind(kind)]
    return (m * k * kb + n * k * kb + m * n * out_bytes + scale_bytes(kind, m, n, k)) / HARDWARE[arch].hbm_bytes_s


def mfma_floor(arch: str, kind: str, m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k / HARDWARE[arch].peak[base_kind(kind)]


# ---- a hypothetical redesigned kernel (issue 41's target), for predictions only ---------------------------------
def redesign(arch: str, kind: str, block: str = "256x256", warps: tuple = (2, 4)) -> tuple[Geometry, HotLoop]:
    """The per-K-step counts the redesign would have, written by hand (no such kernel exists): 8 waves; A staged
    through LDS by global->LDS loads (gfx950 global_load_lds_dwordx4: 16 B a lane; gfx942 buffer_load_dword lds:
    4 B a lane), B preshuffled straight to registers, each wave reading its A rows from LDS with ds_read_b128,
    3 K steps of loads in flight (prefetch 2), one barrier and two waits per step, 8 SALU and 8 VALU (addresses,
    loop). Per wave, per K step of the arch's atom (step_bytes). `warps`: waves along M x along N."""
    if kind not in ("fp8", "int8", "bf16", "fp16"):
        raise ValueError(f"no redesign counts for {kind}")
    bm, bn = map(int, block.split("x"))
    wm, wn = warps
    g = Geometry(f"redesign_{block}_w{wm}x{wn}", wm, wn, 1, bm // (16 * wm), bn // (16 * wn))
    step = step_bytes(arch, kind)
    per_tile = {("gfx942", "fp8"): 2, ("gfx942", "int8"): 2, ("gfx942", "bf16"): 2, ("gfx942", "fp16"): 2,
                ("gfx950", "fp8"): 1, ("gfx950", "int8"): 1, ("gfx950", "bf16"): 1, ("gfx950", "fp16"): 1}[(arch, kind)]
    mnem = next(mn for mn in MFMA_CYCLES[arch] if "16x16" in mn and (
        {"fp8": "fp8" if arch == "gfx942" else "f8f6f4", "int8": "i8", "bf16": "bf16", "fp16": "f16"}[kind] in mn)
        and not mn.startswith("v_mfma_scale"))
    n_mfma = g.tiles_m * g.tiles_n * per_tile
    a_bytes_wave = bm * step // g.warps  # this wave's share of the workgroup's A slice, global -> LDS
    lds_lane = 16 if arch == "gfx950" else 4
    b_bytes_wave = 16 * g.tiles_n * step  # its B columns, preshuffled, to registers
    lds_read = 16 * g.tiles_m * step  # its A rows from LDS
    hot = HotLoop(((mnem, n_mfma),), vmem_loads=b_bytes_wave // 1024, vmem_load_bytes=b_bytes_wave,
                  lds_loads=a_bytes_wave // (64 * lds_lane), lds_load_bytes=a_bytes_wave,
                  lds_ops=lds_read // 1024, lds_bytes=lds_read, salu=8, valu=8, waitcnt=2, barrier=1, branch=1,
                  steps=1, prefetch=2, vgprs=128, agprs=4 * g.tiles_m * g.tiles_n,
                  lds_kernel_bytes=3 * bm * step)
    return g, hot


_load_rows(HOT_LOOPS_FILE.read_text())
