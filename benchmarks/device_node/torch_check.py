"""torch under HAMi-core: `rate SECONDS` (bf16 4096^3 matmul throughput) or `mem` (what torch sees and may
allocate). Prints one JSON line."""
import json
import sys
import time

import torch

if sys.argv[1] == "rate":
    seconds = float(sys.argv[2])
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        n += 20
    dt = time.perf_counter() - t0
    print(json.dumps({"matmuls": n, "seconds": round(dt, 3), "tflops": round(n * 2 * 4096**3 / dt / 1e12, 1)}))
else:
    free, total = torch.cuda.mem_get_info()
    out = {"device": torch.cuda.get_device_name(0), "mem_get_info_total": total, "mem_get_info_free": free}
    for gib in (8, 11):
        try:
            x = torch.empty(gib * 2**30, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            out[f"alloc_{gib}gib"] = "ok"
            del x
            torch.cuda.empty_cache()
        except torch.OutOfMemoryError as exc:
            out[f"alloc_{gib}gib"] = "refused: " + str(exc).splitlines()[0][:160]
    print(json.dumps(out))
