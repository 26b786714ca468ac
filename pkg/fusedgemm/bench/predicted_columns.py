"""bench gemm_a8 / matmul_fused --predict: the paper model's PREDICTED time beside each measured row on an AMD GPU,
and the ratio measured / predicted -- what the first AMD machine checks plan/cdna_model.py with (docs/perf-notes.md,
"predicted, never measured"). `python -m fusedgemm.bench predict` prints the predictions alone, on any machine."""
from __future__ import annotations

from ..plan import cdna_model

PREDICT_COLUMNS = [("pred_us", "PREDICTED us", ".1f"), ("meas_over_pred", "measured/predicted", ".2f"),
                   ("pred_bound", "predicted bound", "s")]


def predict_problem(arch: str) -> str | None:
    """Why --predict cannot run on this GPU, or None."""
    if arch in cdna_model.HARDWARE:
        return None
    return (f"--predict: the paper model (plan/cdna_model.py) is of the AMD kernels (gfx942 / gfx950); this GPU is "
            f"{arch}. `python -m fusedgemm.bench predict` prints the predictions on any machine")


def predicted_beside(arch: str, kind: str, config: str, m: int, n: int, k: int, measured_us: float | None) -> dict:
    """The model's PREDICTED time for the config a measured row ran and the ratio measured / predicted: what the
    first AMD machine checks the model with (docs/perf-notes.md, "predicted, never measured")."""
    p = cdna_model.predict(arch, kind, config, m, n, k)
    pred = p.seconds * 1e6
    return {"pred_us": pred, "pred_bound": p.bound, "pred_config": config,
            "meas_over_pred": measured_us / pred if measured_us else None}
