"""Benchmarks: python -m fusedgemm.bench {gemm_a8,bmm_tiny} [options]; --help lists what each measures."""
