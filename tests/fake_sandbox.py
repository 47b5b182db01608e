"""A stand-in for grader.sandbox on a machine without a GPU: the real request loop
(grader.sandbox.serve) and the real loading and calling of the learner's library, over a driver
that launches nothing. The tests of the checker's side of the protocol start it instead of
``python -m grader.sandbox``."""
import os
import sys

from grader.sandbox.serve import Server, serve


class NoGpu:
    """The driver's calls the request loop makes, doing nothing; every call "takes" a millisecond."""
    start = end = None

    def record(self, event: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_s(self) -> float:
        return 1e-3


replies = os.fdopen(int(os.environ["S2S_SANDBOX_REPLIES"]), "w", buffering=1)
server = Server(NoGpu(), replies)
server.reply(ready=True, arena=1 << 20, confinement="not confined (a test without a GPU)", applied=[])
sys.exit(serve(server, sys.stdin))
