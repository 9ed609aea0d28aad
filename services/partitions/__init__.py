"""GPU partition templates (NVIDIA MIG profiles): the shipped table and pure placement arithmetic.

Shared by the allocator, discovery and admission; depends on nothing of ours but :mod:`events`.
"""
