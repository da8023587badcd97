"""``python -m attn_oracle.stacks list [--env ENV] [--gpu | --cpu]``: the stack modules and their
check targets (``--gpu``: only those that need a CUDA device, ``--cpu``: only the others);
``report DIR``: report/stacks.md from scripts/stacks' runs; ``device --out DIR``: every GPU
target on this machine's CUDA device (attn_oracle.stacks.device)."""

from __future__ import annotations

import argparse
import sys

from .registry import STACKS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_oracle.stacks")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="one line per check target: ENV NAME TARGET NEEDS CHECK-ARGS")
    listing.add_argument("--env")
    side = listing.add_mutually_exclusive_group()
    side.add_argument("--gpu", action="store_true", help="only the targets that need a CUDA device")
    side.add_argument("--cpu", action="store_true", help="only the targets that run without one")
    report = sub.add_parser("report", help="report/stacks.md's Markdown from scripts/stacks' run directory")
    report.add_argument("directory")
    sub.add_parser("device", help="every GPU target on this machine's CUDA device (--help for its options)",
                   add_help=False)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["device"]:
        from .device import main as device_main

        return device_main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "report":
        from pathlib import Path

        from .report import render

        sys.stdout.write(render(Path(args.directory)))
        return 0
    for s in STACKS:
        if args.env in (None, s.env) and not (args.gpu and not s.gpu) and not (args.cpu and s.gpu):
            for target in s.backends:
                print("\t".join((s.env, s.name, f"attn_oracle.stacks.{s.name}:{target}", " ".join(s.needs) or "-",
                                 " ".join(s.check_args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
