"""``python -m attn_oracle.stacks list [--env ENV]``: the stack modules and their check targets."""

from __future__ import annotations

import argparse
import sys

from .registry import STACKS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_oracle.stacks")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="one line per check target: ENV NAME TARGET NEEDS CHECK-ARGS")
    listing.add_argument("--env")
    args = parser.parse_args(argv)
    for s in STACKS:
        if args.env in (None, s.env):
            for target in s.backends:
                print("\t".join((s.env, s.name, f"attn_oracle.stacks.{s.name}:{target}", " ".join(s.needs) or "-",
                                 " ".join(s.check_args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
