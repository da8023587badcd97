"""``python -m attn_oracle.stacks list [--env ENV]``: the stack modules and their check targets;
``report DIR``: report/stacks.md from scripts/stacks' runs."""

from __future__ import annotations

import argparse
import sys

from .registry import STACKS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_oracle.stacks")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="one line per check target: ENV NAME TARGET NEEDS CHECK-ARGS")
    listing.add_argument("--env")
    report = sub.add_parser("report", help="report/stacks.md's Markdown from scripts/stacks' run directory")
    report.add_argument("directory")
    args = parser.parse_args(argv)
    if args.command == "report":
        from pathlib import Path

        from .report import render

        sys.stdout.write(render(Path(args.directory)))
        return 0
    for s in STACKS:
        if args.env in (None, s.env):
            for target in s.backends:
                print("\t".join((s.env, s.name, f"attn_oracle.stacks.{s.name}:{target}", " ".join(s.needs) or "-",
                                 " ".join(s.check_args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
