#!/bin/bash
# Fill the folder benchmarks/device_node/run.sh reads on the GPU machine (default .devcheck in the
# repo root; keep it git-ignored), on any x86-64 machine with git, gcc, cmake, nvcc 13 and pip:
#   benchmarks/device_node/prepare.sh /path/to/HAMi-core-checkout [.devcheck]
# It holds: hami-core/ (HAMi-core's source at HEAD), include/nvml.h (the nvidia-nvml-dev wheel),
# stubs/ (empty libcuda.so / libnvidia-ml.so for the link: libvgpu.so dlopens the real ones),
# prebuilt/libvgpu.so (built here, Debug as HAMi-core's build.sh: used if the build there fails),
# smloop (sm_90), device_check.py, torch_check.py and plan.env (plan_env.py: device_plan's output).
# Then, on the GPU machine, from the repo root: OUT=<dir> bash .devcheck/run.sh
set -eu
HAMI=$1
mkdir -p "${2:-.devcheck}"
D=$(cd "${2:-.devcheck}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d)
mkdir -p "$D/hami-core" "$D/include" "$D/stubs" "$D/prebuilt"
git -C "$HAMI" archive HEAD | tar -x -C "$D/hami-core"
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 -d "$TMP" \
  'nvidia-nvml-dev==13.0.*'
unzip -j -o -q "$TMP"/nvidia_nvml_dev-*.whl 'nvidia/cu13/include/nvml.h' -d "$D/include"
echo 'void gpuledger_stub(void) {}' > "$TMP/stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$D/stubs/libcuda.so" "$TMP/stub.c"
gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o "$D/stubs/libnvidia-ml.so" "$TMP/stub.c"
mkdir -p "$TMP/build"
(cd "$TMP/build" && CPATH=$D/include LIBRARY_PATH=$D/stubs cmake "$D/hami-core" \
  -DDLSYM_HOOK_ENABLE=1 -DMULTIPROCESS_LIMIT_ENABLE=1 -DHOOK_MEMINFO_ENABLE=1 -DHOOK_NVML_ENABLE=1 \
  -DCMAKE_BUILD_TYPE=Debug -DTEST_DEVICE_ID=0 -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >/dev/null \
  && CPATH=$D/include LIBRARY_PATH=$D/stubs make -j"$(nproc)" vgpu >/dev/null)
cp "$TMP/build/libvgpu.so" "$D/prebuilt/libvgpu.so"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -o "$D/smloop" "$HERE/smloop.cu"
cp "$ROOT/benchmarks/device_check.py" "$HERE/torch_check.py" "$HERE/run.sh" "$D/"
PYTHONPATH=$ROOT python3 "$HERE/plan_env.py" > "$D/plan.env"
echo "exported cu* hooks of prebuilt/libvgpu.so: $(nm -D --defined-only "$D/prebuilt/libvgpu.so" | grep -c ' T cu')"
rm -rf "$TMP"
