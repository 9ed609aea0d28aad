#!/bin/bash
# gpuledger device check on a lent GPU machine without the container toolkit (BENCHMARKS.md, "Device
# check"). Fill .devcheck first (prepare.sh), then from the repo root: OUT=<dir> bash .devcheck/run.sh
# Never changes MIG mode, never resets the GPU.
set -u
D=$PWD/.devcheck
OUT=${OUT:?OUT must be set}
DRY=${DRY:-0}                # DRY=1: print the plan of commands, run nothing on a GPU
ONLY=${ONLY:-}               # e.g. ONLY=f,g: only those cases (the summary and the build always run)
exec > >(tee "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1
T0=$(date +%s)
say() { echo; echo "=== $* (t=$(( $(date +%s) - T0 ))s)"; }
run() { if [ "$DRY" = 1 ]; then echo "DRY: $*"; else "$@"; fi; }
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

say summary
date -u; uname -r; uptime
if [ "$DRY" = 1 ]; then UUID=GPU-11111111-2222-3333-4444-555555555555; else
  nvidia-smi -L
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,mig.mode.current,mig.mode.pending,compute_cap \
    --format=csv
  nvidia-smi -q | grep -E 'Driver Version|CUDA Version|Product Name|GPU UUID|MIG Mode|^ +Current +:|^ +Pending +:' \
    | head -12
  nvidia-smi -q -x > "$OUT/nvidia-smi-q.xml"; ls -la "$OUT/nvidia-smi-q.xml"
  UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
fi
echo "UUID=$UUID"
nvcc --version | tail -2
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so' | head -4
[ -n "$UUID" ] || { echo "no GPU UUID: stop"; exit 1; }

say build HAMi-core libvgpu.so
LIB=""
rm -rf /tmp/hb && mkdir -p /tmp/hb
if CPATH=$D/include LIBRARY_PATH=$D/stubs timeout 240 bash -c "cd /tmp/hb && cmake $D/hami-core \
    -DDLSYM_HOOK_ENABLE=1 -DMULTIPROCESS_LIMIT_ENABLE=1 -DHOOK_MEMINFO_ENABLE=1 -DHOOK_NVML_ENABLE=1 \
    -DCMAKE_BUILD_TYPE=Debug -DTEST_DEVICE_ID=0 -DCMAKE_POLICY_VERSION_MINIMUM=3.5 && make -j${J:-16} vgpu" > "$OUT/build.log" 2>&1 \
    && [ "$(nm -D --defined-only /tmp/hb/libvgpu.so | grep -c ' T cu')" -gt 0 ]; then
  LIB=/tmp/hb/libvgpu.so; echo "built here: $LIB"
else
  echo "build failed (rc $?; tail of build.log below): using the one built on the 2-core VM"; tail -15 "$OUT/build.log"
  LIB=$D/prebuilt/libvgpu.so
fi
VDIR=/usr/local/vgpu; [ "$DRY" = 1 ] && VDIR=/tmp/dry-vgpu  # the dry run leaves this machine's /usr alone
mkdir -p $VDIR /tmp/vgpulock /var/run/gpuledger-vgpu
cp "$LIB" $VDIR/libvgpu.so && ls -la $VDIR/libvgpu.so
echo "exported cu* hooks: $(nm -D --defined-only $VDIR/libvgpu.so | grep -c ' T cu') (a Release build exports none)"
VGPU=$VDIR/libvgpu.so
CHECK="python3 $D/device_check.py --emulate-toolkit"
declare -A RC
SECS=6
sed "s/GPU-00000000-0000-0000-0000-0000000000aa/$UUID/" "$D/plan.env" > /tmp/plan.env

if want a; then
say "case a: NVIDIA_VISIBLE_DEVICES=<UUID>, no HAMi-core: sees exactly that GPU"
run timeout 120 env NVIDIA_VISIBLE_DEVICES="$UUID" $CHECK --expect-devices "$UUID" > "$OUT/case_a.json"
RC[a]=$?; cat "$OUT/case_a.json"; echo "rc=${RC[a]}"
fi

if want b; then
say 'case b: NVIDIA_VISIBLE_DEVICES="" (and void): sees no GPU'
run timeout 60 env NVIDIA_VISIBLE_DEVICES="" $CHECK --expect-devices "" > "$OUT/case_b.json"
RC[b]=$?; cat "$OUT/case_b.json"; echo "rc=${RC[b]}"
run timeout 60 env NVIDIA_VISIBLE_DEVICES=void $CHECK --expect-devices ""; echo "void rc=$?"
fi

if want c; then
say "case c: HAMi-core, CUDA_DEVICE_MEMORY_LIMIT_0=10240m: total = 10 GiB, nothing beyond"
HC=(NVIDIA_VISIBLE_DEVICES="$UUID" LD_PRELOAD=$VGPU CUDA_DEVICE_MEMORY_LIMIT_0=10240m
    CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-c.cache)
run timeout 120 env "${HC[@]}" $CHECK --expect-devices "$UUID" --expect-limit 10737418240 > "$OUT/case_c.json"
RC[c]=$?; cat "$OUT/case_c.json"; echo "rc=${RC[c]}"
echo "-- torch under the same limit (mem_get_info; 8 GiB then 11 GiB):"
run timeout 120 env "${HC[@]}" CUDA_VISIBLE_DEVICES="$UUID" python3 $D/torch_check.py mem
fi

if want d; then
say "case d: HAMi-core CUDA_DEVICE_SM_LIMIT=25: compute throughput with and without"
{
  echo '{'
  echo '"smloop_none":';       run timeout 60 $D/smloop $SECS; echo ','
  echo '"smloop_sm25":';       run timeout 90 env LD_PRELOAD=$VGPU CUDA_DEVICE_SM_LIMIT=25 \
                                 CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-d1.cache $D/smloop $SECS; echo ','
  echo '"smloop_preload_no_limit":'; run timeout 60 env LD_PRELOAD=$VGPU \
                                 CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-d2.cache $D/smloop $SECS; echo ','
  echo '"torch_none":';        run timeout 90 python3 $D/torch_check.py rate $SECS; echo ','
  echo '"torch_sm25":';        run timeout 120 env LD_PRELOAD=$VGPU CUDA_DEVICE_SM_LIMIT=25 \
                                 CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-d3.cache python3 $D/torch_check.py rate $SECS
  echo '}'
} > "$OUT/case_d.json" 2> "$OUT/case_d.stderr"
cat "$OUT/case_d.json"; echo "-- stderr:"; tail -20 "$OUT/case_d.stderr"; rm -f "$OUT/case_d.stderr"
fi

if want e; then
say "case e: the exact environment of gpuledger's device_plan (1 GPU, 10 GiB / 25 %)"
cat /tmp/plan.env
(
  set -a; . /tmp/plan.env; set +a
  run timeout 120 $CHECK --expect-from-env > "$OUT/case_e.json"
  rc=$?; cat "$OUT/case_e.json"; echo "rc=$rc"
  echo "-- smloop under the plan's environment:"; run timeout 90 $D/smloop $SECS
  exit $rc
)
RC[e]=$?
fi

if want f; then
say "case f: what the plan's second round closes (per-device SM limit, CUDA_REDIRECT, per-limit cache file)"
LIBCUDA=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}'); echo "libcuda: $LIBCUDA"
OLD=(NVIDIA_VISIBLE_DEVICES="$UUID" LD_PRELOAD=$VGPU CUDA_DEVICE_MEMORY_LIMIT_0=10240m CUDA_DEVICE_SM_LIMIT=25)
echo "-- f1 the first plan (CUDA_DEVICE_SM_LIMIT only) and a pod's own CUDA_DEVICE_SM_LIMIT_0=100 (the escape):"
run timeout 90 env "${OLD[@]}" CUDA_DEVICE_SM_LIMIT_0=100 CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-f1.cache $D/smloop $SECS
echo "-- f2 the first plan and a pod's own CUDA_REDIRECT=<the real libcuda> (the escape): the VRAM total seen"
run timeout 120 env "${OLD[@]}" CUDA_REDIRECT="$LIBCUDA" CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-f2.cache \
  $CHECK --expect-devices "$UUID" --expect-limit 10737418240 > "$OUT/case_f2.json"; echo "rc=$? (non-zero: the limit was escaped)"; cat "$OUT/case_f2.json"
echo "-- f3 a resize under the current plan: 10 GiB then 20 GiB in the same cache folder (per-limit cache file names)"
sed "s/10240m/20480m/g" /tmp/plan.env > /tmp/plan20.env
(
  set -a; . /tmp/plan20.env; set +a
  run timeout 120 $CHECK --expect-from-env > "$OUT/case_f3.json"; rc=$?; cat "$OUT/case_f3.json"; echo "rc=$rc (0: the resized limit, 20 GiB, holds)"
  exit $rc
)
RC[f]=$?
echo "-- f4 control: the same cache file as the 10 GiB run, now asking 20 GiB (the first plan's single name)"
run timeout 120 env NVIDIA_VISIBLE_DEVICES="$UUID" LD_PRELOAD=$VGPU CUDA_DEVICE_MEMORY_LIMIT_0=20480m \
  CUDA_DEVICE_MEMORY_SHARED_CACHE=/var/run/gpuledger-vgpu/pod-10240m-25.cache \
  $CHECK --expect-devices "$UUID" --expect-limit 21474836480 > "$OUT/case_f4.json"; echo "rc=$? (non-zero: a stale cache kept 10 GiB)"; cat "$OUT/case_f4.json"
fi

if want g; then
say "case g: HAMi-core through /etc/ld.so.preload, as gpuledger mounts it, for a process that clears LD_PRELOAD"
PRELOAD=$VDIR/ld.so.preload; echo "$VGPU" > "$PRELOAD"; cat "$PRELOAD"
MADE=0  # an empty /etc/ld.so.preload to bind over (it preloads nothing), removed after
if [ "$DRY" != 1 ] && [ ! -e /etc/ld.so.preload ]; then : > /etc/ld.so.preload; MADE=1; fi
echo "-- g1 control: the plan's environment less LD_PRELOAD, no preload file (the escape): the VRAM total seen"
(
  set -a; . /tmp/plan.env; set +a; unset LD_PRELOAD
  run timeout 120 $CHECK --expect-devices "$UUID" --expect-limit 10737418240 > "$OUT/case_g1.json"
  echo "rc=$? (non-zero: no HAMi-core, no limit)"
  cat "$OUT/case_g1.json"
)
echo "-- g2 the same with $PRELOAD bound on /etc/ld.so.preload in a private mount namespace (the pod's mount)"
(
  set -a; . /tmp/plan.env; set +a; unset LD_PRELOAD
  run timeout 120 unshare -m sh -c "mount --bind '$PRELOAD' /etc/ld.so.preload && exec $CHECK --expect-from-env" \
    > "$OUT/case_g2.json"; rc=$?; cat "$OUT/case_g2.json"; echo "rc=$rc (0: the limit holds without LD_PRELOAD)"
  echo "-- smloop the same way (the SM limit through the preload file):"
  run timeout 90 unshare -m sh -c "mount --bind '$PRELOAD' /etc/ld.so.preload && exec $D/smloop $SECS"
  exit $rc
)
RC[g]=$?
[ "$MADE" = 1 ] && rm -f /etc/ld.so.preload
fi

say "done"
for k in a b c e f g; do want $k && echo "case $k: rc=${RC[$k]:-}"; done
ls -la "$OUT"
sleep 1
# at most 8 files come back from the device tool: everything but the log in one archive
(cd "$OUT" && tar czf results.tgz --exclude results.tgz --exclude run.log -- * && find . -maxdepth 1 -type f ! -name results.tgz ! -name run.log -delete)
