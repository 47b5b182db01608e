"""The only process that runs learner code when a grade is decided.

Started by the checker (:mod:`grader.worker`) for each grading and never by hand
(``python -m grader.sandbox``). It imports no PyTorch or CuPy, reaches the GPU through the CUDA
driver alone (:mod:`grader.sandbox.driver`), confines itself before it loads the learner's
library (:mod:`grader.sandbox.confine`), and does nothing but call the learner's function on
buffers the checker allocated and shares with it (CUDA IPC) and say when it is done
(:mod:`grader.sandbox.serve`). Everything that decides the grade happens in the checker.
"""
