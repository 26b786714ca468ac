#!/usr/bin/env python3
"""Filter `cuobjdump -sass` output on stdin: print the first kernel whose name starts with argv[1] (reading a
library's kernel, e.g. cuBLAS's, for its structure), and the names of the other matches."""
import sys


def main() -> None:
    prefix, cur, done, others = sys.argv[1], None, False, []
    for line in sys.stdin:
        s = line.strip()
        if s.startswith("Function : "):
            name = s[len("Function : "):]
            if cur is not None:
                done = True
            cur = name if name.startswith(prefix) and not done else None
            if name.startswith(prefix):
                others.append(name)
            if cur:
                print(line, end="")
            continue
        if cur:
            print(line, end="")
    print("matches:", *others[:40], sep="\n", file=sys.stderr)


if __name__ == "__main__":
    main()
