"""Former name of runtime/gemm_spec.py (GemmA8Kernel is GemmKernel there): kept only while callers outside runtime/
move to the new names (issue 39). Import from fusedgemm.runtime.gemm_spec."""
from .gemm_spec import MATMUL_IN, OUT_CODEGEN, GemmKernel, config_fits, preset_kernel, spec_for_activation  # noqa: F401

GemmA8Kernel = GemmKernel
