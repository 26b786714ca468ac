"""Run a loaded kernel: workgroup by workgroup, its waves round-robin between s_barriers.

    launch(kernel, grid, block, kernarg_bytes, memory)   -> Stats

Initial state per the AMDGPU ABI ("Initial Kernel Execution State"): the user SGPRs the descriptor enables
(kernarg segment pointer, dispatch pointer, ...) from s0, then the workgroup ids x / y / z it enables; VGPR v0
holds the packed workitem ids (x | y << 10 | z << 20, gfx90a and later); EXEC holds the wave's live lanes;
every other register is poison. LDS is the descriptor's size plus the launch's dynamic bytes, poisoned.
"""
from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from .errors import EmulatorError, HazardError, LaunchError, UnknownInstruction
from .isa_mem import compile_memory_or_mfma
from .isa_regs import Ctx
from .isa_scalar import compile_misc_scalar, compile_salu, compile_sopp
from .isa_valu import compile_valu
from .loader import Kernel
from .memory import Memory
from .wave import Wave

def _nothing():
    pass


LDS_LIMIT = {"gfx942": 64 * 1024, "gfx950": 160 * 1024}
MAX_INSTRUCTIONS = 200_000_000

SOPP = {"s_endpgm", "s_nop", "s_waitcnt", "s_barrier", "s_branch", "s_setprio", "s_sleep", "s_sethalt",
        "s_icache_inv", "s_dcache_wb", "s_dcache_inv", "s_code_end", "s_set_gpr_idx_off", "s_ttracedata",
        "buffer_wbl2", "buffer_inv"}


@dataclasses.dataclass
class Stats:
    instructions: int = 0
    seconds: float = 0.0
    workgroups: int = 0
    waves: int = 0
    opcodes: dict = dataclasses.field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.instructions / self.seconds if self.seconds else 0.0


def default_mfma():
    try:
        from . import mfma
    except ImportError as e:  # the MFMA module is written separately
        raise UnknownInstruction(f"MFMA semantics are not available ({e})") from None
    return mfma.execute


class Program:
    """A kernel's instructions compiled to closures (per machine, since closures bind its services)."""

    def __init__(self, kernel: Kernel, machine: "Machine"):
        self.ctx = ctx = Ctx(kernel.arch, kernel.name, machine)
        self.fns = []
        for ins in kernel.instructions:
            self.fns.append(compile_one(ins, ctx))
        self.texts = [i.text for i in kernel.instructions]
        self.mnemonics = [i.mnemonic for i in kernel.instructions]
        # None where an instruction touches no register: the in-flight check has nothing to look at
        self.touches = [touched_registers(i) or None for i in kernel.instructions]


def touched_registers(ins) -> tuple[tuple[int, ...], tuple[int, ...]] | tuple[()]:
    """(VGPR rows, SGPR indices) an instruction reads or writes: none of them may have a load in flight; () when
    it touches none."""
    from .operands import parse_reg, strip_modifiers

    vs, ss = [], []
    if ins.mnemonic in ("s_waitcnt", "s_endpgm", "s_barrier", "s_nop") or ins.target is not None:
        return ()
    for tok in ins.operands:
        r = parse_reg(strip_modifiers(tok)[0])
        if r is None:
            continue
        (vs if r.kind == "v" else ss).extend(range(r.index, r.index + r.count))
    return (tuple(vs), tuple(ss)) if vs or ss else ()


def check_in_flight(w, touch, text) -> None:
    """HazardError if the instruction touches a register (in an active lane) a load has not yet written."""
    vrows, srows = touch
    pend = w.pend_v
    for r in (vrows if pend else ()):
        p = pend.get(r)
        if p is not None and (p.lanes is None or (p.lanes & w.exec_mask).any()):
            raise HazardError(f"`{text}` touches v{r} while `{p.what}` is in flight (no s_waitcnt retired it: "
                              f"the register's value is undefined)")
    pend = w.pend_s
    for r in (srows if pend else ()):
        p = pend.get(r)
        if p is not None:
            raise HazardError(f"`{text}` touches s{r} while `{p.what}` is in flight (no s_waitcnt retired it)")


def compile_one(ins, ctx):
    mn = ins.mnemonic
    try:
        if mn in SOPP or mn.startswith("s_cbranch") or mn == "s_branch":
            return compile_sopp(ins, ctx)
        fn = compile_memory_or_mfma(ins, ctx)
        if fn is not None:
            return fn
        if mn.startswith("s_"):
            fn = compile_misc_scalar(ins, ctx)
            return fn if fn is not None else compile_salu(ins, ctx)
        if mn.startswith("v_"):
            return compile_valu(ins, ctx)
    except UnknownInstruction as e:
        msg = str(e)
        if ctx.kernel not in msg:
            msg = f"{ctx.kernel}: {msg}"
        raise UnknownInstruction(msg) from None
    raise UnknownInstruction(f"{ctx.kernel}: instruction {mn} ({ins.text!r}) is not modelled by the emulator")


def coverage(kernel: Kernel) -> dict[str, int]:
    """Mnemonic -> static count in the kernel."""
    out: dict[str, int] = {}
    for i in kernel.instructions:
        out[i.mnemonic] = out.get(i.mnemonic, 0) + 1
    return out


def unsupported(kernel: Kernel) -> dict[str, str]:
    """Mnemonic -> the first message of every instruction form of the kernel the emulator does not model."""
    ctx = Ctx(kernel.arch, kernel.name, Machine(Memory()))
    out: dict[str, str] = {}
    for ins in kernel.instructions:
        try:
            compile_one(ins, ctx)
        except UnknownInstruction as e:
            out.setdefault(ins.mnemonic, str(e))
    return out


def check_supported(kernel: Kernel, machine: "Machine | None" = None) -> None:
    """Compile every instruction: UnknownInstruction for the first the emulator does not model."""
    Program(kernel, machine or Machine(Memory()))


class Machine:
    def __init__(self, memory: Memory, mfma=None, race_check: bool = True, strict_hazards: bool = True,
                 lds_fence_check: bool = True):
        """race_check: LDS races between waves (no s_barrier between the accesses) are errors. strict_hazards:
        touching a register a load has not written yet (no s_waitcnt retired it) is an error; off, such reads see
        poison instead. lds_fence_check: another wave's access to LDS bytes whose ds_write no s_waitcnt lgkmcnt
        has retired is an error (an s_barrier alone does not complete LDS writes)."""
        self.memory = memory
        self.lds_fence_check = lds_fence_check
        self.strict_hazards = strict_hazards
        self._mfma = mfma
        self.race_check = race_check
        self.code_base = 0x7F00_0000_0000
        self._programs: dict[int, Program] = {}

    def mfma(self, name, a, b, c, **kw):
        if self._mfma is None:
            self._mfma = default_mfma()
        return self._mfma(name, a, b, c, **kw)

    def program(self, kernel: Kernel) -> Program:
        """The kernel's compiled program (compiled once per kernel; its closures reach this machine through
        their context, which launch points at the running machine)."""
        p = getattr(kernel, "_program", None)
        if p is None:
            p = Program(kernel, self)
            try:
                kernel._program = p
            except AttributeError:
                pass
        p.ctx.m = self
        return p

    # ---- LDS with race detection ----
    def _lds_check(self, addrs, nbytes, what, wave):
        if len(addrs) and (addrs.min() < 0 or addrs.max() + nbytes > self.lds.size):
            bad = int(addrs[(addrs < 0) | (addrs + nbytes > self.lds.size)][0])
            raise EmulatorError(f"{what}: LDS address 0x{bad:x} ({nbytes} bytes) is outside the workgroup's "
                                f"{self.lds.size} bytes of LDS (wave {wave.id})")

    def _lds_incomplete(self, wave, idx, what, verb):
        """HazardError if another wave's ds_write to these bytes has not been retired by its s_waitcnt (a barrier
        alone does not complete it: LDS requests of different waves may be reordered, CDNA3 memory model)."""
        pw = self.lds_pend_wave[idx]
        bad = (pw >= 0) & (pw != wave.id)
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            op = self.lds_pend_what.get(int(self.lds_pend_tok[idx][i]), "a ds_write")
            raise HazardError(f"{what}: wave {wave.id} {verb} LDS byte 0x{int(idx[i]):x} that wave {int(pw[i])}'s "
                              f"`{op}` has not completed: no s_waitcnt lgkmcnt(0) retired it before the s_barrier "
                              "(a barrier does not wait for LDS writes)")

    def lds_write_pending(self, wave, written, text):
        """Mark the bytes of a ds_write as incomplete for the other waves; -> its retirement (clears them)."""
        if not self.lds_fence_check:
            return _nothing
        self._tok += 1
        tok = self._tok
        idx = np.concatenate([x.reshape(-1) for x in written]) if written else np.zeros(0, np.int64)
        self.lds_pend_wave[idx] = wave.id
        self.lds_pend_tok[idx] = tok
        self.lds_pend_what[tok] = text
        pend_wave, pend_tok, whats = self.lds_pend_wave, self.lds_pend_tok, self.lds_pend_what

        def retire():
            mine = pend_tok[idx] == tok
            pend_wave[idx[mine]] = -1
            whats.pop(tok, None)
        return retire

    def reset_lds(self, lds_bytes: int, fill: int) -> None:
        """A workgroup's LDS (`lds_bytes`, filled with `fill`) and its hazard bookkeeping, empty."""
        self.lds = np.full(max(lds_bytes, 4), fill, np.uint8)
        n = self.lds.size
        if self.race_check:
            self.lds_w_wave = np.full(n, -1, np.int16)
            self.lds_w_epoch = np.full(n, -1, np.int32)
            self.lds_r_mask = np.zeros(n, np.uint64)
            self.lds_r_epoch = np.full(n, -1, np.int32)
        self.epoch = 0
        self.lds_pend_wave = np.full(n, -1, np.int16)
        self.lds_pend_tok = np.zeros(n, np.int64)
        self.lds_pend_what = {}
        self._tok = 0
        self.lds_dma_tok = np.zeros(n, np.int64)  # a load to LDS (isa_mem's compile_lds_dma) not yet retired
        self.lds_dma_what = {}  # token -> its instruction, while outstanding

    def _lds_dma_check(self, wave, idx, what, verb):
        """HazardError if a load to LDS (isa_mem's compile_lds_dma) that writes these bytes has not been retired by an
        s_waitcnt vmcnt: its data lands only then."""
        if not self.lds_dma_what:  # none outstanding: no cost
            return
        t = self.lds_dma_tok[idx]
        if t.any():
            i = tuple(np.argwhere(t != 0)[0])
            raise HazardError(f"{what}: wave {wave.id} {verb} LDS byte 0x{int(idx[i]):x} that "
                              f"`{self.lds_dma_what.get(int(t[i]), 'a load to LDS')}` has not written yet: no "
                              "s_waitcnt vmcnt retired it")

    def lds_dma_pending(self, wave, addrs, nbytes, data, what):
        """A load to LDS issued by `wave`: lane row i of `data` goes to LDS at addrs[i] once retired; until then its
        bytes are pending. -> the retirement (writes them, as the issuing wave, and clears them)."""
        addrs = np.asarray(addrs, np.int64)
        self._lds_check(addrs, nbytes, what, wave)
        idx = addrs[:, None] + np.arange(nbytes)
        self._lds_dma_check(wave, idx, what, "loads into")
        self._tok += 1
        tok = self._tok
        self.lds_dma_tok[idx] = tok
        self.lds_dma_what[tok] = what.split(": ", 1)[-1]

        def retire():
            self.lds_dma_tok[idx] = 0
            self.lds_dma_what.pop(tok, None)
            if len(addrs):
                self.lds_write(wave, addrs, data, what)
        return retire

    def lds_read(self, wave, addrs, nbytes, what):
        addrs = np.asarray(addrs, np.int64)
        self._lds_check(addrs, nbytes, what, wave)
        idx = addrs[:, None] + np.arange(nbytes)
        self._lds_dma_check(wave, idx, what, "reads")
        if self.race_check:
            ww, we = self.lds_w_wave[idx], self.lds_w_epoch[idx]
            bad = (we == self.epoch) & (ww != wave.id) & (ww >= 0)
            if bad.any():
                i = np.argwhere(bad)[0]
                raise HazardError(f"{what}: LDS race: wave {wave.id} reads byte 0x{int(idx[tuple(i)]):x} that wave "
                                  f"{int(ww[tuple(i)])} wrote with no s_barrier between them")
            self.lds_r_mask[idx] |= np.uint64(1 << wave.id)
            self.lds_r_epoch[idx] = self.epoch
        if self.lds_fence_check:
            self._lds_incomplete(wave, idx, what, "reads")
        return self.lds[idx]

    def lds_write(self, wave, addrs, data, what):
        addrs = np.asarray(addrs, np.int64)
        nbytes = data.shape[1]
        self._lds_check(addrs, nbytes, what, wave)
        idx = addrs[:, None] + np.arange(nbytes)
        self._lds_dma_check(wave, idx, what, "writes")
        if self.race_check:
            ww, we = self.lds_w_wave[idx], self.lds_w_epoch[idx]
            bad = (we == self.epoch) & (ww != wave.id) & (ww >= 0)
            other_readers = (self.lds_r_epoch[idx] == self.epoch) & \
                ((self.lds_r_mask[idx] & ~np.uint64(1 << wave.id)) != 0)
            bad |= other_readers
            if bad.any():
                i = np.argwhere(bad)[0]
                raise HazardError(f"{what}: LDS race: wave {wave.id} writes byte 0x{int(idx[tuple(i)]):x} that "
                                  "another wave accessed with no s_barrier between them")
            self.lds_w_wave[idx] = wave.id
            self.lds_w_epoch[idx] = self.epoch
        if self.lds_fence_check:
            self._lds_incomplete(wave, idx, what, "writes")
        self.lds[idx] = data
        return idx

    # ---- launch ----
    def launch(self, kernel: Kernel, grid, block, kernarg: bytes, *, dynamic_lds: int = 0,
               stats: Stats | None = None, max_instructions: int = MAX_INSTRUCTIONS, arch: str | None = None) -> Stats:
        """arch: the emulated device's arch; a kernel of another arch is an error."""
        stats = stats or Stats()
        if arch is not None and kernel.arch != arch:
            raise LaunchError(f"{kernel.name}: the code object is for {kernel.arch}, the emulated device is {arch}")
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        bx, by, bz = (tuple(block) + (1, 1))[:3] if not isinstance(block, int) else (block, 1, 1)
        name = kernel.name
        if min(gx, gy, gz) <= 0:
            raise LaunchError(f"{name}: grid {(gx, gy, gz)} has no blocks")
        if min(bx, by, bz) <= 0:
            raise LaunchError(f"{name}: block {(bx, by, bz)} has no threads")
        threads = bx * by * bz
        maxwg = int(kernel.metadata.get(".max_flat_workgroup_size", 1024))
        if threads > maxwg:
            raise LaunchError(f"{name}: block of {threads} threads exceeds the kernel's max_flat_workgroup_size "
                              f"{maxwg}")
        lds_bytes = kernel.lds_bytes + dynamic_lds
        if lds_bytes > LDS_LIMIT[kernel.arch]:
            raise LaunchError(f"{name}: {lds_bytes} bytes of LDS exceed {kernel.arch}'s {LDS_LIMIT[kernel.arch]}")
        seg = self._kernarg_segment(kernel, kernarg, (gx, gy, gz), (bx, by, bz), dynamic_lds)
        kd = kernel.descriptor
        if kd.private_segment or kernel.metadata.get(".private_segment_fixed_size", 0):
            raise LaunchError(f"{name}: uses scratch (private segment): not modelled")
        kernarg_addr = self.memory.register(seg, f"kernarg segment of {name}", readonly=True)
        prog = self.program(kernel)
        t0 = time.perf_counter()
        nwaves = -(-threads // 64)
        hits = [0] * len(prog.fns)  # executions per instruction, added to stats.opcodes per mnemonic at the end
        try:
            for z in range(gz):
                for y in range(gy):
                    for x in range(gx):
                        self._run_workgroup(kernel, prog, (x, y, z), (bx, by, bz), nwaves, lds_bytes, kernarg_addr,
                                            stats, max_instructions, hits)
        finally:
            counts = stats.opcodes
            for mn, c in zip(prog.mnemonics, hits):
                if c:
                    counts[mn] = counts.get(mn, 0) + c
        dt = time.perf_counter() - t0
        stats.seconds += dt
        stats.workgroups += gx * gy * gz
        stats.waves += gx * gy * gz * nwaves
        log = os.environ.get("FUSEDGEMM_EMULATOR_LOG")
        if log:  # one line per launch: arch, kernel, grid, block, seconds (for coverage tables)
            with open(log, "a") as f:
                f.write(f"{kernel.arch}\t{kernel.name}\t{gx}x{gy}x{gz}\t{bx}x{by}x{bz}\t{dt:.4f}\n")
        return stats

    def _kernarg_segment(self, kernel, kernarg: bytes, grid, block, dynamic_lds) -> np.ndarray:
        meta = kernel.metadata
        size = int(meta.get(".kernarg_segment_size", 0))
        explicit_end = 0
        for a in meta.get(".args", []):
            if not a[".value_kind"].startswith("hidden_"):
                explicit_end = max(explicit_end, a[".offset"] + a[".size"])
        if len(kernarg) < explicit_end:
            raise LaunchError(f"{kernel.name}: kernarg buffer of {len(kernarg)} bytes is shorter than its explicit "
                              f"arguments ({explicit_end} bytes of the metadata's {size}-byte segment)")
        seg = np.zeros(max(size, len(kernarg), 8) + 256, np.uint8)  # slack: s_load_dwordx8 may read past the end
        seg[:len(kernarg)] = np.frombuffer(bytes(kernarg), np.uint8)
        hidden = {
            "hidden_block_count_x": (grid[0], 4), "hidden_block_count_y": (grid[1], 4),
            "hidden_block_count_z": (grid[2], 4), "hidden_group_size_x": (block[0], 2),
            "hidden_group_size_y": (block[1], 2), "hidden_group_size_z": (block[2], 2),
            "hidden_remainder_x": (0, 2), "hidden_remainder_y": (0, 2), "hidden_remainder_z": (0, 2),
            "hidden_grid_dims": (3 if grid[2] > 1 else 2 if grid[1] > 1 else 1, 2),
            "hidden_dynamic_lds_size": (dynamic_lds, 4),
        }
        for a in meta.get(".args", []):
            vk = a[".value_kind"]
            if vk.startswith("hidden_"):
                val, nb = hidden.get(vk, (0, a[".size"]))
                seg[a[".offset"]:a[".offset"] + a[".size"]] = 0
                seg[a[".offset"]:a[".offset"] + nb] = np.frombuffer(int(val).to_bytes(nb, "little"), np.uint8)
        return seg

    def _run_workgroup(self, kernel, prog, wg, block, nwaves, lds_bytes, kernarg_addr, stats, max_instructions,
                       hits):
        kd = kernel.descriptor
        self.reset_lds(lds_bytes, 0xAD)
        bx, by, bz = block
        threads = bx * by * bz
        waves = []
        tid = np.arange(threads)
        tx, ty, tz = tid % bx, (tid // bx) % by, tid // (bx * by)
        packed = (tx | (ty << 10) | (tz << 20)).astype(np.uint32)
        for wi in range(nwaves):
            w = Wave(wi)
            s = 0
            for uname, count in kd.user_sgprs:
                if uname == "kernarg_segment_ptr":
                    w.s[s], w.s[s + 1] = kernarg_addr & 0xFFFFFFFF, kernarg_addr >> 32
                elif uname in ("dispatch_ptr", "queue_ptr", "private_segment_buffer", "flat_scratch_init",
                               "dispatch_id", "private_segment_size"):
                    raise LaunchError(f"{kernel.name}: user SGPR {uname} is not modelled")
                s += count
            if s != kd.user_sgpr_count:
                # kernarg preloading (user SGPRs beyond the pointers) is not modelled
                raise LaunchError(f"{kernel.name}: {kd.user_sgpr_count} user SGPRs, the emulator set {s}")
            for axis, on in enumerate(kd.workgroup_ids):
                if on:
                    w.s[s] = wg[axis]
                    s += 1
            if kd.workgroup_info:
                raise LaunchError(f"{kernel.name}: workgroup info SGPR is not modelled")
            lanes = packed[wi * 64:(wi + 1) * 64]
            v0 = np.zeros(64, np.uint32)
            v0[:len(lanes)] = lanes
            if kd.vgpr_workitem_id == 0:
                v0 &= np.uint32(0x3FF)
            elif kd.vgpr_workitem_id == 1:
                v0 &= np.uint32(0xFFFFF)
            w.v[0] = v0
            w.set_exec((1 << len(lanes)) - 1)
            waves.append(w)
        fns, texts = prog.fns, prog.texts
        touches = prog.touches
        strict = self.strict_hazards
        while True:
            live = [w for w in waves if not w.done]
            if not live:
                break
            for w in live:
                w.at_barrier = False
                pc = w.pc
                n = 0
                try:
                    while True:
                        if strict and (w.pend_v or w.pend_s):
                            touch = touches[pc]
                            if touch is not None:
                                check_in_flight(w, touch, texts[pc])
                        r = fns[pc](w)
                        n += 1
                        hits[pc] += 1
                        if r is None:
                            pc += 1
                        elif r < 0:
                            break
                        else:
                            pc = r
                            if w.at_barrier:  # only s_barrier sets it, and it returns where to go on
                                break
                        if n > max_instructions:
                            raise EmulatorError("instruction limit reached (an endless loop?)")
                except EmulatorError as e:
                    raise type(e)(f"{kernel.name} ({kernel.arch}), workgroup {wg}, wave {w.id}, instruction "
                                  f"{pc} `{texts[pc]}`: {e}") from None
                except IndexError:
                    if pc >= len(fns):
                        raise EmulatorError(f"{kernel.name}: wave {w.id} ran past the end of the kernel") from None
                    raise
                w.pc = pc
                w.executed += n
                stats.instructions += n
                if w.done:
                    w.vmq.clear()
                    w.lgkmq.clear()
            # every live wave is at the barrier (or done): release it
            self.epoch += 1
