"""A stand-in for xprof on the device machine, where the image has no xprof and its 32 MB wheel would take
half of what a device call carries.

tokamax (which MaxText's attention op imports) imports
``xprof.cli.tools.get_kernel_stats_tool`` at import time for its benchmarking
timers, which the attention op never calls. scripts/stacks-device puts this
folder on the path only when ``import xprof`` fails; calling it raises.
"""
