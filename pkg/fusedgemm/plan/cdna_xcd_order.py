"""The order in which the CDNA LDS template's plain calls compute their output tiles (cdna_gemm.hpp
cdna_workgroup_tile), for the model's MALL term (cdna_model._fabric_bytes) and the tests: workgroup ids, dealt
round-robin over the XCDs by the dispatcher, are mapped so that each XCD's ids are a run of consecutive tile numbers,
and tile numbers are laid out in groups of rows of tiles, down the rows first."""
from __future__ import annotations


# cdna_gemm.hpp's kCdnaXcds (the XCDs ids are dealt over) and kCdnaGroupRows (rows of tiles in a group);
# tests/test_cdna_model.py checks them against the header.
XCD_ORDER_XCDS = 8
XCD_ORDER_GROUP_ROWS = 8


def xcd_order_tile(wg_id: int, gx: int, gy: int) -> tuple[int, int]:
    """The (column, row) tile that workgroup `wg_id` (launch order, x fastest) computes under cdna_workgroup_tile."""
    if gy == 1:
        return wg_id % gx, wg_id // gx
    total = gx * gy
    xcd = wg_id % XCD_ORDER_XCDS
    q, r = divmod(total, XCD_ORDER_XCDS)
    return group_raster(xcd * q + min(xcd, r) + wg_id // XCD_ORDER_XCDS, gx, gy)


def group_raster(t: int, gx: int, gy: int) -> tuple[int, int]:
    """The (column, row) of tile number t: groups of XCD_ORDER_GROUP_ROWS rows, each column of a group in turn."""
    per_group = XCD_ORDER_GROUP_ROWS * gx
    first = t // per_group * XCD_ORDER_GROUP_ROWS
    rows = min(gy - first, XCD_ORDER_GROUP_ROWS)
    return t % per_group // rows, first + t % per_group % rows


def run_extent(t0: int, t1: int, gx: int, gy: int) -> tuple[int, int]:
    """Distinct (columns, rows) of tiles that tile numbers t0..t1 cover in the grouped raster."""
    per_group = XCD_ORDER_GROUP_ROWS * gx
    rows_seen, cols = 0, []
    for grp in range(t0 // per_group, t1 // per_group + 1):
        rows = min(gy - grp * XCD_ORDER_GROUP_ROWS, XCD_ORDER_GROUP_ROWS)
        a, b = max(t0, grp * per_group) - grp * per_group, min(t1, grp * per_group + per_group - 1) - grp * per_group
        rows_seen += min(rows, b - a + 1)
        cols.append((a // rows, b // rows))
    if len(cols) == 1:
        return cols[0][1] - cols[0][0] + 1, rows_seen
    # the first group's part ends at the last column, the last group's starts at column 0; any group between: all
    return (gx if len(cols) > 2 else min(gx, sum(hi - lo + 1 for lo, hi in cols))), rows_seen
