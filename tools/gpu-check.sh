#!/bin/bash
# gpu-check.sh — issue 18's run on a real GPU, in one go and in at most 8
# minutes: build with --with-cuda (or use a tree built elsewhere), run the
# GPU test suites, the CPU-against-CUDA parity checks of the examples and
# the debugger, the profiler's device time (issue 19), time travel's
# rewind and exact resume (issue 20), then bench/gpu.sh;
# everything it prints is also written under OUTDIR.
#
#   tools/gpu-check.sh facts            what this machine has (one short call)
#   tools/gpu-check.sh pack             on a development machine: build here
#                                       and pack the tree into gpu-pack.tar.xz,
#                                       for a GPU machine without the -dev
#                                       packages (carry the file there)
#   tools/gpu-check.sh run [OUTDIR]     on the GPU machine, at the repository
#                                       root ($OUT, else ./gpu-out)
#
# A packed tree is built at /tmp/tdbg-gpu/src, a path the tests and libtool
# wrappers know by heart; `run` links that path to this checkout. The pack
# carries the non-CUDA libraries the binaries need (HDF5, OpenBLAS, ncurses,
# readline, Check's subunit) and `run` offers them only where this machine
# lacks them. The CUDA libraries come from the GPU machine's toolkit.
#
# Environment: JOBS (all cores), BENCH_SECONDS (bench/gpu.sh's budget, 240),
# NVCC_ARCH (configure's; default sm_80, sm_90 and PTX of compute_90).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
jobs=${JOBS:-$(nproc)}
packdir=/tmp/tdbg-gpu/src
cuda_home=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda_home/bin:$PATH"

facts() {
    echo "== machine"
    uname -srm
    grep -m1 "model name" /proc/cpuinfo | sed 's/.*: //'
    echo "cores: $(nproc), memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    [ -r /etc/os-release ] && . /etc/os-release && echo "os: $PRETTY_NAME"
    ldd --version 2>/dev/null | head -1
    echo "== GPU"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -4
    echo "== CUDA toolkit"
    command -v nvcc >/dev/null && nvcc --version | tail -2 || echo "no nvcc (looked in PATH and $cuda_home/bin)"
    for l in cudart cublas cublasLt cudnn nccl; do
        f=$(ls "$cuda_home"/lib64/lib$l.so 2>/dev/null || ldconfig -p 2>/dev/null | grep -m1 " lib$l\.so" | sed 's/.*=> //')
        printf "  lib%-9s %s\n" "$l" "${f:-missing}"
    done
    echo "== build tools and libraries"
    for t in gcc make autoreconf pkg-config python3; do printf "  %-11s %s\n" "$t" "$(command -v $t || echo missing)"; done
    for h in hdf5.h ncursesw/curses.h readline/readline.h check.h cblas.h dnnl.h; do
        f=$(ls /usr/include/$h /usr/include/*/$h /usr/include/*/*/$h /usr/local/include/$h 2>/dev/null | grep -v lzma | head -1)
        printf "  %-22s %s\n" "$h" "${f:-missing}"
    done
    python3 -c 'import torch; print("  torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1
    [ -f "$here/gpu-pack.tar.xz" ] && echo "  gpu-pack.tar.xz: $(du -h "$here/gpu-pack.tar.xz" | cut -f1)"
}

pack() {
    rm -rf /tmp/tdbg-gpu && mkdir -p /tmp/tdbg-gpu
    git -C "$here" archive --prefix=src/ HEAD | tar -x -C /tmp/tdbg-gpu || return 1
    (cd "$packdir" && autoreconf -fi >/dev/null 2>&1 && ./configure --quiet --with-cuda --with-dnnl=no &&
        make -j"$jobs" >/dev/null && make -j"$jobs" check TESTS= >/dev/null) || { echo "pack: build failed" >&2; return 1; }
    mkdir -p "$packdir/gpu-libs"
    # the libraries outside glibc and CUDA that the binaries load
    for b in "$packdir"/tests/run_tests "$packdir"/engine/.libs/libtdbg-engine.so "$packdir"/debugger/.libs/tdbg \
        "$packdir"/dump/.libs/tdbg-dump; do
        [ -e "$b" ] && ldd "$b"
    done | awk '$3 ~ /^\// { print $3 }' | sort -u |
        grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux|libgcc_s|libstdc\+\+)[.-]|/libcu|/libnv|/cuda' |
        while read -r lib; do cp -L "$lib" "$packdir/gpu-libs/"; done
    # what the build made, without objects, static archives and the fuzz
    # replays; debug sections stripped (symbols kept, for crash reports)
    (cd "$packdir" && git -C "$here" ls-files > /tmp/tdbg-gpu/tracked &&
        find . \( -type f -o -type l \) ! -path './.git/*' ! -path './fuzz/*' | sed 's|^\./||' | grep -vxFf /tmp/tdbg-gpu/tracked |
        grep -vE '\.(o|lo|a|Po|Plo)$|^autom4te|config\.log' > /tmp/tdbg-gpu/built &&
        while read -r f; do file -b "$f" | grep -q '^ELF' && strip --strip-debug "$f"; done < /tmp/tdbg-gpu/built)
    tar -C "$packdir" -cJf "$here/gpu-pack.tar.xz" -T /tmp/tdbg-gpu/built
    echo "pack: $here/gpu-pack.tar.xz ($(du -h "$here/gpu-pack.tar.xz" | cut -f1)); carry it with the run"
}

# Build here, or unpack a carried tree; prints the build directory.
build() {
    if [ -f "$here/gpu-pack.tar.xz" ]; then
        tar -C "$here" -xJf "$here/gpu-pack.tar.xz" || return 1
        mkdir -p /tmp/tdbg-gpu && rm -rf "$packdir" && ln -s "$here" "$packdir"
        mkdir -p "$here/gpu-libs/fallback"
        for lib in "$here"/gpu-libs/*.so*; do
            ldconfig -p | grep -q " $(basename "$lib") " || ln -sf "$lib" "$here/gpu-libs/fallback/"
        done
        export LD_LIBRARY_PATH="$here/gpu-libs/fallback${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "using the carried tree (fallback libraries: $(ls "$here/gpu-libs/fallback" | tr '\n' ' '))" >&2
        echo "$packdir"
        return 0
    fi
    (cd "$here" && { [ -x configure ] || autoreconf -fi; } && ./configure --quiet --with-cuda &&
        make -j"$jobs" >/dev/null && make -j"$jobs" check TESTS= >/dev/null) >&2 || return 1
    echo "$here"
}

run() {
    local out=${1:-${OUT:-$here/gpu-out}} start=$SECONDS b
    mkdir -p "$out"
    exec > >(tee "$out/gpu-check.log") 2>&1
    facts
    echo "== build"
    b=$(timeout 200 bash -c "$(declare -f build); here='$here' packdir='$packdir' jobs=$jobs build") ||
        { echo "gpu-check: no build (see above)"; return 1; }
    [ -d "$here/gpu-libs/fallback" ] && export LD_LIBRARY_PATH="$here/gpu-libs/fallback${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "built in $((SECONDS - start)) s at $b"
    local fail=0

    echo "== GPU suites: every op on CUDA against the CPU, the device watch, residency"
    export TDBG_REQUIRE_GPU=1
    for s in $(grep -o 'suite_cuda_[a-z_]*' "$here/tests/suites.h" | sed 's/suite_//' | sort -u) residency; do
        CK_RUN_SUITE=$s timeout 120 "$b/tests/run_tests" 2>&1 | grep -E "Checks:|:[FE]:|skipped" | sed "s/^/  $s: /"
        [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
    done
    echo "== the op suites with every tensor on the GPU (TDBG_TEST_BACKEND=cuda)"
    for s in linear elementwise reduce loss conv norm shape attention_ops optim scaler graph fused_attention amp lowp_native gpt; do
        TDBG_TEST_BACKEND=cuda CK_RUN_SUITE=$s timeout 120 "$b/tests/run_tests" 2>&1 | grep -E "Checks:|:[FE]:" | sed "s/^/  $s: /"
        [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
    done

    echo "== parity: the same run on cpu and cuda, dumped and diffed"
    local d=$out/parity
    rm -rf "$d" && mkdir -p "$d"
    for be in cpu cuda; do
        timeout 60 "$b/examples/mlp" --backend $be --steps 3 --batch 32 --train-size 256 --log-every 1 \
            --dump "dir=$d/mlp-$be;io=both;phase=forward,backward,update,params,grads" > "$d/mlp-$be.log" 2>&1 || fail=1
        timeout 60 "$b/examples/gpt" --backend $be --steps 2 --log-every 1 \
            --dump "dir=$d/gpt-$be;phase=forward,backward" > "$d/gpt-$be.log" 2>&1 || fail=1
    done
    for m in mlp gpt; do
        "$b/dump/tdbg-diff" "$d/$m-cpu" "$d/$m-cuda" 2>&1 | tail -4 | sed "s/^/  $m: /"
        [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
    done
    echo "== the debugger: injected faults stop at the same op, step and origin"
    for mode in eager graph; do
    for inj in "nan@op=fc2/linear,step=3" "inf@op=update/fc2.weight,step=2,index=9" "nan@op=grad/fc1/linear,step=2"; do
        for be in cpu cuda; do
            timeout 60 "$b/debugger/tdbg" --batch -ex "break nonfinite" -ex "run" -- "$b/examples/mlp" --backend $be \
                --mode $mode --steps 5 --batch 32 --train-size 256 --inject "$inj" 2>&1 | grep -m1 "^stopped:" > "$d/stop-$be.txt"
        done
        if cmp -s "$d/stop-cpu.txt" "$d/stop-cuda.txt" && [ -s "$d/stop-cpu.txt" ]; then
            echo "  $mode $inj: same stop: $(cat "$d/stop-cuda.txt")"
        else
            echo "  $mode $inj: cpu: $(cat "$d/stop-cpu.txt"); cuda: $(cat "$d/stop-cuda.txt")"
            fail=1
        fi
    done
    done

    echo "== the profiler: device time by CUDA events (a device track), read by tdbg-prof"
    for mode in eager graph; do
        timeout 60 "$b/examples/mlp" --backend cuda --mode $mode --steps 5 --batch 32 --train-size 256 \
            --profile "file=$d/prof-$mode.json;steps=2-4" > "$d/prof-$mode.log" 2>&1 || fail=1
        if grep -q '"device (event time)"' "$d/prof-$mode.json" 2>/dev/null &&
            "$b/prof/tdbg-prof" --top 5 "$d/prof-$mode.json" > "$d/prof-$mode.txt" 2>&1; then
            echo "  $mode: $(head -1 "$d/prof-$mode.txt")"
            sed -n '/^top ops by total/,/^$/p' "$d/prof-$mode.txt" | sed 's/^/    /'
        else
            echo "  $mode: no device track or tdbg-prof failed: $(tail -2 "$d/prof-$mode.log" "$d/prof-$mode.txt" 2>&1)"
            fail=1
        fi
    done

    echo "== data parallel on the GPU: 1 rank through NCCL against the run without --dp (several ranks need several GPUs)"
    if command -v mpirun >/dev/null; then
        CK_RUN_SUITE=examples CK_RUN_CASE=dp timeout 200 "$b/tests/run_tests" 2>&1 | grep -E "Checks:|:[FE]:|skipped" |
            sed "s/^/  /"
        [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
    else
        echo "  skipped: no mpirun on this machine"
    fi

    echo "== time travel on CUDA: a rewind replays to the same stop, bit for bit; a resumed run's losses"
    for mode in eager graph; do
        timeout 90 "$b/debugger/tdbg" --batch -ex "record every 2" -ex "break nan" -ex run -ex "rewind 4" \
            -ex continue -ex quit -- "$b/examples/mlp" --backend cuda \
            --mode $mode --steps 10 --batch 32 --train-size 256 --inject "nan@op=fc2/linear,step=8" \
            > "$d/rewind-$mode.txt" 2>&1
        local stops
        stops=$(grep "^stopped:" "$d/rewind-$mode.txt")
        if [ "$(sed -n 1p <<< "$stops")" = "$(sed -n 3p <<< "$stops")" ] && grep -q "reason=rewind" <<< "$stops" &&
            ! grep -qi "diverged" "$d/rewind-$mode.txt"; then
            echo "  $mode: the replay stopped again at $(sed -n 1p <<< "$stops" | cut -d' ' -f2-4), no step diverged"
        else
            echo "  $mode: replay differs:"; sed 's/^/    /' "$d/rewind-$mode.txt" | tail -30
            fail=1
        fi
        timeout 60 "$b/examples/mlp" --backend cuda --mode $mode --steps 8 --batch 32 --train-size 256 \
            --log-every 1 > "$d/whole-$mode.txt" 2>&1 || fail=1
        timeout 60 "$b/examples/mlp" --backend cuda --mode $mode --steps 8 --batch 32 --train-size 256 \
            --log-every 1 --stop-at 4 --save "$d/ck-$mode.h5" > /dev/null 2>&1 || fail=1
        timeout 60 "$b/examples/mlp" --backend cuda --mode $mode --steps 8 --batch 32 --train-size 256 \
            --log-every 1 --load "$d/ck-$mode.h5" > "$d/resumed-$mode.txt" 2>&1 || fail=1
        if diff <(grep -E '^step=[4-7] ' "$d/whole-$mode.txt") <(grep -E '^step=[4-7] ' "$d/resumed-$mode.txt") \
            > /dev/null && [ "$(grep -cE '^step=[4-7] ' "$d/resumed-$mode.txt")" = 4 ]; then
            echo "  $mode: resumed at step 4: the same losses as the whole run"
        else
            echo "  $mode: resumed losses differ:"; diff <(grep '^step=' "$d/whole-$mode.txt") \
                <(grep '^step=' "$d/resumed-$mode.txt") | sed 's/^/    /'
            fail=1
        fi
    done

    local left=$((470 - (SECONDS - start)))
    echo "== benchmark (bench/gpu.sh, $left s left of 8 minutes)"
    if [ $left -gt 60 ]; then
        GPU_SECONDS=$((left - 40)) RUNS=3 PYTHON=${PYTHON:-python3} timeout $((left - 10)) \
            bash "$here/bench/gpu.sh" "$b" "$here" 2>&1 | tee "$out/bench.txt"
    else
        echo "  no time left for it"
    fi
    echo "== done in $((SECONDS - start)) s: $([ $fail = 0 ] && echo "every check passed" || echo "FAILURES above")"
    return $fail
}

case ${1:-} in
facts) facts ;;
pack) pack ;;
run) shift; run "$@" ;;
*) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
