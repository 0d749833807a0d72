"""Round 23: bench e2e with the decode kernel's L2 prefetch-size hint on (the default) or off: python notes/results/round23/e2e_ab.py on|off ARGS..."""
import runpy
import sys

import quantkit.kernels.wo_decode_sm90 as d

if sys.argv[1] == "off":
    d.l2_prefetch = lambda cfg: 0
sys.argv = ["quantkit", "bench", "e2e"] + sys.argv[2:]
runpy.run_module("quantkit", run_name="__main__")
