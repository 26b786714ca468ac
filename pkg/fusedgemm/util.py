"""Small helpers shared by the op modules and the fusion pass (imports torch only)."""
from __future__ import annotations

import warnings

import torch
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor

_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """warnings.warn(message) the first time `key` is seen in this process."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, stacklevel=3)


def is_fake(t: torch.Tensor) -> bool:
    """A tensor without memory (torch.compile's fake tensors, meta): checks skip its addresses."""
    return isinstance(t, _FakeTensor) or t.device.type == "meta"


def cached_on(owner: torch.Tensor, attr: str, key, make):
    """make(), cached on the tensor `owner` under `attr` while `key` stays the same: the copy lives and dies with
    the weight it was made from (a tensor subclass that takes no attributes gets a fresh one per call)."""
    hit = getattr(owner, attr, None)
    if hit is not None and hit[0] == key:
        return hit[1]
    with torch.no_grad():
        value = make()
    try:
        setattr(owner, attr, (key, value))
    except (AttributeError, RuntimeError):
        pass
    return value


def split_operands(operands: dict | None) -> tuple[dict, dict]:
    """An epilogue's operands -> (tensors, Python scalars as floats), the two lists a torch.library op takes."""
    ops = dict(operands or {})
    tensors = {k: v for k, v in ops.items() if isinstance(v, torch.Tensor)}
    return tensors, {k: float(v) for k, v in ops.items() if not isinstance(v, torch.Tensor)}


def join_operands(tensor_names: str, tensors, scalar_names: str, scalar_values) -> dict:
    """The inverse of split_operands on a torch.library op's side: names come comma-separated (operand names are
    identifiers; a schema has no list of strings)."""
    operands = dict(zip(tensor_names.split(",") if tensor_names else [], tensors))
    operands.update(zip(scalar_names.split(",") if scalar_names else [], scalar_values))
    return operands


class PlanCache(dict):
    """The eager fast paths' launch plans by call signature (a key of dtypes, shapes, strides, devices and
    options), at most `limit`, the oldest dropped first: one implementation for gemm_a8 (a cache per weight,
    PreshuffledWeight.call_plans) and matmul_fused (one per process). A plain dict underneath, so a lookup costs
    one hash; remember() tolerates another thread filling the same cache. Callers remember nothing while a
    config is forced (plan.forced): a forced plan must not outlive the override."""

    __slots__ = ("limit",)

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def remember(self, key, entry) -> None:
        try:
            while len(self) >= self.limit:
                del self[next(iter(self))]  # the oldest
        except (KeyError, RuntimeError, StopIteration):  # another thread got there first
            pass
        self[key] = entry

    def __reduce__(self):  # a copy starts empty: plans hold device handles
        return (PlanCache, (self.limit,))
