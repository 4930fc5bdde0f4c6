"""Inductor graph passes of the compiled blocks (``lowprec.linear.compile_blocks``).

``realize_shared_operands``: one buffer for a tensor that several fixed-layout consumers take.

Inductor hands a user Triton kernel (the suite's ``triton_op``s: MoR's BF16 fix-up, the INT8 and
block-FP8 quantize passes, the layer-buffer kernels), a custom operator or ``_scaled_mm`` its inputs
at the strides of the eager trace. An input that is still an unstored expression (the E4M3 codes
of an operand, the BF16 operand itself, both computed by fused pointwise code) is then *copied*
for that consumer (``ExternKernel.require_exact_strides`` on an unrealized node), and the next
consumer makes a copy of its own: the fused quantization kernel stores the same codes once per
consumer. On the 1 B step (H200, profile ``llama_1b_mor_tensor_0cb35a5``) tensor-level MoR wrote
every operand's codes three times (the FP8 GEMM and the two BF16 fix-ups of the GEMMs that share
the operand) and its BF16 values twice: about 0.5 GB of extra stores for one 16384 x 5632 operand.

The pass marks each such tensor (``inductor_realize_to_strides``, the flag Inductor's own passes
set for the same purpose) so that it is stored once, where it is computed and at its eager strides;
every consumer then reads that buffer, and a consumer that wants other strides still copies (the
transposed codes a backward GEMM takes are such a copy, and stay one). It marks only tensors with a
fixed-layout consumer and at least two consumers in all (through views): a tensor with one consumer
is stored once either way, and pointwise chains that Inductor fuses without storing are left alone.
Measured at 1 B (H200, ``results/bench/e2e_h200.csv``): MoR per tensor 0.87x to 1.045x of compiled
BF16, FP8 current scaling 1.155x to 1.185x (torchao's float8, under the same settings, 1.163x to
1.197x); a tensor now kept for the backward instead of recomputed there raised the FP8 arms' peak
memory from 24.0 to 27.1 GiB.
"""

from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

_FIXED_LAYOUT_HOPS = ("triton_kernel_wrapper_mutation", "triton_kernel_wrapper_functional")
_FUNCTIONALIZED_HOPS = ("auto_functionalized", "auto_functionalized_v2")


def _fixed_layout(node: torch.fx.Node) -> bool:
    """Whether ``node`` takes its tensor inputs at fixed strides: a user Triton kernel, one of the
    suite's custom operators (also as the functionalized call of one that mutates, which Inductor
    turns back into the operator after this pass), or cuBLAS's FP8 GEMM."""
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        if target.name() in _FUNCTIONALIZED_HOPS:
            target = node.args[0]
        else:
            return target.name() in _FIXED_LAYOUT_HOPS
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace == "lowprec" or target is torch.ops.aten._scaled_mm.default
    return False


def _is_view(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return node.op == "call_function" and isinstance(val, torch.Tensor) and val._is_view()


def _consumers(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read ``node``'s storage, looking through views of it."""
    out = []
    for user in node.users:
        out.extend(_consumers(user) if _is_view(user) else [user])
    return out


def _dense(val) -> bool:
    return isinstance(val, torch.Tensor) and torch._prims_common.is_non_overlapping_and_dense_or_false(val)


class RealizeSharedOperands(CustomGraphPass):
    """See the module docstring."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if node.op != "call_function" or _is_view(node) or not _dense(node.meta.get("val")):
                continue
            consumers = _consumers(node)
            if len(consumers) >= 2 and any(_fixed_layout(c) for c in consumers):
                node.meta["inductor_realize_to_strides"] = True

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))


realize_shared_operands = RealizeSharedOperands()
