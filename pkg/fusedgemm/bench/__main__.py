import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("gemm_a8", "bmm_tiny"):
        print("usage: python -m fusedgemm.bench {gemm_a8,bmm_tiny} [--help]", file=sys.stderr)
        return 2
    if argv[0] == "gemm_a8":
        from .gemm_a8 import run
    else:
        from .bmm_tiny import run
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
