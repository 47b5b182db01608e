"""Float64 references for exercise 03: the optimizer steps exactly as PyTorch defines them (AdamW is
torch.optim.AdamW itself, run in float64).

The grader calls each function with every argument but the outputs, in the order of the C
signature: tensors as float64 copies of their values before the call (a list of tensors as a
Python list), the element counts of a list as an int64 tensor, scalars as numbers (float32 ones
rounded to what your kernel receives). It returns the new value of every `inout` and `out`
argument, in signature order, and compares your kernel's values with them after each call.

The `*_torch` functions are different: they run PyTorch's own fused kernels in float32, and the
grader times them only so you can see how your kernel compares with a production implementation.
"""

import torch


def sgd_momentum(p, g, buf, n, lr, momentum, weight_decay):
    """torch.optim.SGD(momentum, weight_decay, dampening=0, nesterov=False), one step."""
    d = g + weight_decay * p
    buf = momentum * buf + d
    return p - lr * buf, buf


def _adamw(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step):
    """torch.optim.AdamW, one step from the state (m, v) at the given step, in the inputs' dtype:
    decoupled weight decay, then Adam with its bias corrections (sections 1 and 2 of the notebook
    derive them)."""
    with torch.enable_grad():       # the grader calls references under torch.no_grad()
        param = p.detach().clone().requires_grad_(True)
        optimizer = torch.optim.AdamW([param], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                                      foreach=False)
        param.grad = g.detach().clone()
        optimizer.state[param] = {"step": torch.tensor(float(step - 1)), "exp_avg": m.detach().clone(),
                                  "exp_avg_sq": v.detach().clone()}
        optimizer.step()
    state = optimizer.state[param]
    return param.detach(), state["exp_avg"], state["exp_avg_sq"]


def adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step):
    return _adamw(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step)


def adamw_multi(p, g, m, v, sizes, count, lr, beta1, beta2, eps, weight_decay, step):
    """The same step on every tensor of the lists."""
    steps = [_adamw(*t, lr, beta1, beta2, eps, weight_decay, step) for t in zip(p, g, m, v)]
    return [s[0] for s in steps], [s[1] for s in steps], [s[2] for s in steps]


def clip_grad_norm(g, n, max_norm):
    """torch.nn.utils.clip_grad_norm_ on one tensor: g scaled to a norm of at most max_norm."""
    total = torch.linalg.vector_norm(g)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    return g * scale, total.reshape(1)


# ----------------------------------------------------------------------------- PyTorch's own

_STEPS: dict[int, torch.Tensor] = {}


def _step_tensor(step: int, device: torch.device) -> torch.Tensor:
    """PyTorch's fused optimizers read the step from a device tensor; made once per value."""
    key = (step, str(device))
    if key not in _STEPS:
        _STEPS[key] = torch.tensor(float(step), device=device)
    return _STEPS[key]


def sgd_momentum_torch(p, g, buf, n, lr, momentum, weight_decay):
    """PyTorch's fused SGD kernel (what torch.optim.SGD(fused=True) launches), in place."""
    torch._fused_sgd_([p], [g], [buf], weight_decay=weight_decay, momentum=momentum, lr=lr, dampening=0.0,
                      nesterov=False, maximize=False, is_first_step=False)
    return p, buf


def _fused_adamw(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step):
    steps = [_step_tensor(step, t.device) for t in p]
    torch._fused_adamw_(p, g, m, v, [], steps, lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay,
                        eps=eps, amsgrad=False, maximize=False)


def adamw_torch(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step):
    """PyTorch's fused AdamW kernel (what torch.optim.AdamW(fused=True) launches), in place."""
    _fused_adamw([p], [g], [m], [v], lr, beta1, beta2, eps, weight_decay, step)
    return p, m, v


def adamw_multi_torch(p, g, m, v, sizes, count, lr, beta1, beta2, eps, weight_decay, step):
    """The same over the whole list, as PyTorch does it: its multi-tensor fused kernel."""
    _fused_adamw(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step)
    return p, m, v


_HOLDERS: dict[tuple, torch.Tensor] = {}


def clip_grad_norm_torch(g, n, max_norm):
    """torch.nn.utils.clip_grad_norm_, in place. It clips the .grad of the parameters it is given,
    so g becomes the gradient of a stand-in parameter of its shape (made once per shape)."""
    key = (tuple(g.shape), g.dtype, str(g.device))
    if key not in _HOLDERS:
        _HOLDERS[key] = torch.empty_like(g, requires_grad=True)
    holder = _HOLDERS[key]
    holder.grad = g
    total = torch.nn.utils.clip_grad_norm_([holder], max_norm)
    holder.grad = None
    return g, total.reshape(1)
