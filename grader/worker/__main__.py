"""``python -m grader.worker EVENTS``: see :mod:`grader.worker`."""
import os
import sys

from grader.worker.loop import main

if os.environ.get("S2S_WORKER_PROFILE"):   # performance work on the grader itself
    import cProfile
    profiler = cProfile.Profile()
    code = profiler.runcall(main, sys.argv)
    profiler.dump_stats(os.environ["S2S_WORKER_PROFILE"])
    sys.exit(code)
sys.exit(main(sys.argv))
