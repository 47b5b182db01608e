"""The child process that runs learner code: check, time and (under ncu) profile.

Started by :mod:`grader.runner`, never by hand (``python -m grader.worker EVENTS``). It reads one
:class:`grader.protocol.Job` (JSON) from stdin, writes events as JSON lines to the path named on
its command line, and leaves stdout and stderr to the learner's printf. A crash, hang or sticky
CUDA error here costs the parent one task, never the whole grading.

Division of labour: CuPy owns raw device memory (every buffer its own cudaMalloc, with guard
regions), CUDA events, device attributes and the copy-bandwidth measurement; PyTorch does the
numerics on views of that memory (random inputs, the float64 reference, the comparison).

    memory      the device arguments of a case: allocation, guards, fills, snapshots
    entry       loading and calling an entry point; CUDA errors
    checking    the float64 reference of a call and the comparison
    timing      learner, baseline and vendor interleaved at every benchmark size
    profiling   one call per task for Nsight Compute
    loop        the job, the tasks, the events
"""
