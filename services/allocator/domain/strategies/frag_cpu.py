"""frag-cpu: gpuledger's own placement strategy — fragmentation gradient descent that also sees
GPU stranded by CPU ("CPU-aware fragmentation descent").

FGD (strategies/fgd.py) counts a node's free GPU as usable by a task class as soon as one pod of
the class fits, even when the node's free CPU admits only one such pod while several GPUs are
free: those GPUs are stranded, yet FGD sees no fragmentation and happily drains the CPU of nodes
whose GPUs are still idle. frag-cpu measures each class's fragment with
``class_fragment_cpu``: of the GPU milli big enough for the class, only the fraction that the
free CPU can actually fill (pods by CPU ÷ pods by GPU, capped at 1) counts as usable. Everything
else — the score ⌊100·sigmoid(−Δ/1000)⌋, ties to node order, GPU choice — is FGD's, so where
CPU never binds it decides exactly like FGD. Rationale and numbers: docs/placement.md.
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.strategies.fgd import Fgd


class FragCpu(Fgd):
    """FGD over the CPU-aware fragmentation measure."""

    name: ClassVar[str] = "frag-cpu"
    cpu_aware: ClassVar[bool] = True
