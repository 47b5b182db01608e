"""A stand-in for grader.worker in the runner's tests: it reads its job like the real one and
reports every task correct, with its own process id as the case label, so a test can tell which
process graded. It records when it was ready for its job in the file S2S_FAKE_READY names, and
its parent in S2S_FAKE_PARENT's; with S2S_FAKE_CRASH set it dies of SIGSEGV on its job."""
import os
import signal
import sys
import time

from grader.protocol import CaseResult, Done, Job, TaskDone, TaskOutcome, TaskStart

emit = open(sys.argv[1], "w", buffering=1)
if os.environ.get("S2S_FAKE_READY"):
    with open(os.environ["S2S_FAKE_READY"], "a") as f:
        f.write(f"{os.getpid()} {time.time()}\n")
if os.environ.get("S2S_FAKE_PARENT"):
    with open(os.environ["S2S_FAKE_PARENT"], "a") as f:
        f.write(f"{os.getpid()} {os.getppid()}\n")
job = Job.from_json(sys.stdin.read())
if os.environ.get("S2S_FAKE_CRASH"):
    os.kill(os.getpid(), signal.SIGSEGV)
for name in job.order:
    emit.write(TaskStart(name).to_line(job.key))
    emit.write(TaskDone(name, TaskOutcome(name, [CaseResult(str(os.getpid()), {}, True, 0.0)], correct=True))
               .to_line(job.key))
emit.write(Done().to_line(job.key))
