#!/usr/bin/env python3
"""tools/probes/ncu_l2.sh's helper: the counter list (those of WANTED the installed ncu knows), and a table of one raw
CSV (one row per profiled kernel) with the L2 sectors split by where they come from and go.

    python3 tools/probes/ncu_l2_table.py --metrics NAMES.txt     # NAMES.txt: `ncu --query-metrics --chip gh100`
    python3 tools/probes/ncu_l2_table.py REPORT.csv TITLE
"""
import csv
import io
import re
import sys

WANTED = [
    "gpu__time_duration.sum", "sm__cycles_elapsed.avg", "smsp__cycles_active.avg",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sectors.sum", "lts__t_sectors_op_read.sum", "lts__t_sectors_op_write.sum",
    "lts__t_sectors_op_atom.sum", "lts__t_sectors_op_red.sum",
    "lts__t_sectors_srcunit_tex.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_write.sum", "lts__t_sectors_srcunit_ltcfabric.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum", "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum",
    "lts__t_sectors_srcunit_ltcfabric_op_read.sum",
    "lts__t_requests_srcunit_tex_op_read.sum", "lts__t_requests_srcunit_tex_op_write.sum",
    "lts__t_sector_hit_rate.pct", "lts__t_sector_op_read_hit_rate.pct",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "l1tex__m_xbar2l1tex_read_sectors.sum", "l1tex__m_l1tex2xbar_write_sectors.sum",
    "smsp__inst_executed_op_global_ld.sum", "smsp__inst_executed_op_global_st.sum",
    "smsp__inst_executed.sum",
]


def known(names_file: str) -> str:
    text = open(names_file).read()
    bases = set(re.findall(r"^\s*([a-z0-9_]+__[a-z0-9_]+)", text, re.M))
    return ",".join(m for m in WANTED if m.split(".")[0] in bases)


def table(path: str, title: str) -> None:
    text = open(path).read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    rows = [r for r in rows if r.get("Kernel Name")]
    if not rows:
        print(f"{title}: no kernels in {path}")
        return
    cols = [m for m in WANTED if m in rows[0]]
    print(f"\n{title}")
    names = [re.sub(r"^fg_gemm_a8_\w+?_(bf16|f16|f32)_", "", r["Kernel Name"])[:20] for r in rows]
    print(f"{'counter':58s}" + "".join(f"{n:>22s}" for n in names))
    for c in cols:
        vals = []
        for r in rows:
            v = r[c].replace(",", "")
            try:
                f = float(v)
                vals.append(f"{f:22.4g}" if abs(f) < 1e4 else f"{f:22,.0f}")
            except ValueError:
                vals.append(f"{v:>22s}")
        print(f"{c:58s}" + "".join(vals))


if __name__ == "__main__":
    if sys.argv[1] == "--metrics":
        print(known(sys.argv[2]))
    else:
        table(sys.argv[1], sys.argv[2])
