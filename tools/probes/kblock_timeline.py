"""Per-K-block timeline of a persistent sm_90a kernel (probe_sm90.py --kstamps; the kernel built with
FG_PROBE_KSTAMPS from sm90_probes.patch): where each K block's time goes on each consumer warpgroup and on the
copy thread, in SM cycles.

Stamps, per CTA and K block g (the CTA's count over its tiles, kKStampFirst .. + kKStampBlocks - 1):
consumer warpgroup w in {0, 1}: before the full-barrier wait, after it, MMAs committed, MMAs seen complete;
copy thread: before the empty-barrier wait, after it, copies issued.

Derived per block (medians and 10th / 90th percentiles over CTAs and blocks, and one CTA's blocks in full):
  data wait     cycles a consumer waited on the full barrier (> 0: the block's data came late)
  issue         full barrier passed -> the block's MMAs committed (descriptors + 4 wgmma)
  retire step   this block's completion seen - the previous block's, per warpgroup (the warpgroup's block
                period; both warpgroups share the tensor core, so 2 x 256 = 512 cycles is the datasheet rate of
                a 128 x 128 x 128 fp8 tile block)
  queue         the block's completion seen - the next block's MMAs committed, where the wait follows that issue
                (the slack the warpgroup keeps queued; about 0: the tensor core drained before the next block was
                there)
  drain         a group's last block (its wait<0>): completion seen - its commit
  ring wait     cycles the copy thread waited for a free stage (> 0: the ring was full, the copies ahead)
  copy          copies issued -> the data seen by warpgroup 0 where it waited longer than LATE (the copy latency
                under load)
  late blocks % the share of blocks whose full-barrier wait took longer than LATE
  wg skew       warpgroup 1's commit - warpgroup 0's, same block
"""
import statistics

FIRST, BLOCKS = 128, 96  # kKStampFirst, kKStampBlocks
# A full-barrier wait longer than this (cycles) means the block's data came late: a try_wait on a barrier whose
# phase has completed already takes ~70-140 cycles with the stamps around it (H100).
LATE = 300


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(q * (len(xs) - 1) + 0.5)))] if xs else float("nan")


def _unwrap(cta):
    """A CTA's 32-bit stamps as cycles from its first (0 stays 0: not recorded); a wrap of the counter within the
    CTA's (sub-millisecond) window is undone."""
    vals = [x & 0xFFFFFFFF for role in cta for blk in role for x in blk if x]
    if not vals:
        return cta
    lo = min(vals)
    if max(vals) - lo > 1 << 31:  # wrapped: the small values come after the large ones
        lo = min(v for v in vals if v >= 1 << 31)
    return [[[((x & 0xFFFFFFFF) - lo) % (1 << 32) + 1 if x else 0 for x in blk] for blk in role] for role in cta]


def run(mod, name: str, signature, cfg, grid, cluster, stream, args, k: int, dump=None) -> dict:
    """Run persistent kernel `name` of the kstamps build (after a warm-up), summarise its K-block stamps and, with
    dump (a path), write CTA 0's blocks in full there. Returns {metric: (median, p10, p90)}."""
    import torch

    from fusedgemm.runtime.kernels import Signature

    ctas = grid[0]
    buf = torch.zeros(ctas * 3 * BLOCKS * 4, dtype=torch.int32, device="cuda")  # the SM clock's low 32 bits
    mod.kernel("probe_set_kstamps", Signature((("p", "ptr"),)))((1, 1, 1), 1, 0, stream, buf.data_ptr())
    kern = mod.kernel(name, signature)
    kern.set_max_dynamic_smem(cfg.smem)
    times = []
    for _ in range(5):  # the last run's stamps are read; the times show what the stamps cost (against the probe's)
        buf.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        kern.launch_cluster(grid, cluster, cfg.warps * 32, cfg.smem, stream, *args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    s = [_unwrap(cta) for cta in buf.view(ctas, 3, BLOCKS, 4).cpu().tolist()]
    kb = -(-k // 128)  # K blocks per tile (128 bytes of 8-bit K each)
    cols = {c: [] for c in ("data wait", "issue", "retire step", "queue", "drain", "ring wait", "copy",
                            "wg skew", "tile hand-over")}
    for cta in s:
        c0, c1, p = cta
        for j in range(BLOCKS):
            g = FIRST + j
            for c in (c0, c1):
                t = c[j]
                if not all(t):
                    continue
                cols["data wait"].append(t[1] - t[0])
                cols["issue"].append(t[2] - t[1])
                if j > 0 and all(c[j - 1]) and g % kb:
                    cols["retire step"].append(t[3] - c[j - 1][3])
                if j + 1 < BLOCKS and all(c[j + 1]) and (g + 1) % kb and t[3] > c[j + 1][2]:
                    cols["queue"].append(t[3] - c[j + 1][2])
                elif t[3] >= t[2]:
                    cols["drain"].append(t[3] - t[2])
                if j > 0 and g % kb == 0 and all(c[j - 1]):  # first block of a tile: last retire -> this issue
                    cols["tile hand-over"].append(t[2] - c[j - 1][3])
            if all(p[j][:3]):
                cols["ring wait"].append(p[j][1] - p[j][0])
                if all(c0[j]) and c0[j][1] - c0[j][0] > LATE:
                    cols["copy"].append(c0[j][1] - p[j][2])
            if all(c0[j]) and all(c1[j]):
                cols["wg skew"].append(c1[j][2] - c0[j][2])
    out = {c: (statistics.median(v), _pct(v, 0.1), _pct(v, 0.9)) if v else (float("nan"),) * 3
           for c, v in cols.items()}
    out["kernel us"] = (statistics.median(times), min(times), max(times))
    n = sum(1 for cta in s for j in range(BLOCKS) if all(cta[0][j]))
    out["late blocks %"] = (100.0 * sum(1 for x in cols["data wait"] if x > LATE) / max(1, 2 * n),) * 3
    if dump is not None:
        c0, c1, p = s[0]
        rel = lambda x: x - 1 if x else -1  # _unwrap's values start at 1
        lines = [f"{name}: CTA 0, K blocks {FIRST}..{FIRST + BLOCKS - 1} ({kb} per tile), SM cycles from the first "
                 "stamp; per warpgroup: wait-start, data-in, committed, complete; copy thread: wait-start, "
                 "stage-free, issued"]
        for j in range(BLOCKS):
            mark = "*" if (FIRST + j) % kb == 0 else " "
            lines.append(f"{FIRST + j:4d}{mark} wg0 " + " ".join(f"{rel(x):8d}" for x in c0[j])
                         + "  wg1 " + " ".join(f"{rel(x):8d}" for x in c1[j])
                         + "  copy " + " ".join(f"{rel(x):8d}" for x in p[j][:3]))
        dump.write_text("\n".join(lines) + "\n")
    return out


def print_table(rows) -> None:
    """rows: [(label, run()'s dict)]: one line per label, each metric as median (p10 / p90)."""
    if not rows:
        return
    print("\nper-K-block timeline (SM cycles; median (p10-p90) over CTAs and blocks; see tools/probes/kblock_timeline.py)")
    for label, t in rows:
        print(label)
        for c, (med, lo, hi) in t.items():
            print(f"  {c:16} {med:9.0f}   ({lo:.0f} - {hi:.0f})")
