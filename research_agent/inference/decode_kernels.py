"""Fused elementwise kernels for ``decode_step``, compiled once per machine with the C compiler.

Why this exists: a one-row decode step of a small model is bound by the number of ops, not by
bytes.  Once its matrices are int8, smollm2-135m's step spends about as long in some 1,500 tiny ops
(RMSNorm alone is six: pow, mean, add, rsqrt and two multiplies, ~30 us per norm on a 2-core CPU,
and the rotary embedding another seven) as in its 120 matrix products: dispatcher, allocator and
OpenMP fork/join time for vectors of a few hundred floats.  Each kernel here is one call doing what
those ops did, in one pass over the rows, on the calling thread:

- ``add_rms_norm``: an optional residual added in place, then RMSNorm by a weight (with an int8
  layer's SmoothQuant input scale folded in), and the few outlier channels that layer keeps in
  float32 gathered unscaled beside it;
- ``rope``: the rotary embedding applied in place to the query and key heads of one projection;
- ``silu_mul``: SiLU(gate) times up, times the next int8 layer's input scale.

The arithmetic is the ops' own, in the same order (no FMA contraction, ``-ffp-contract=off``),
except that RMSNorm sums its squares in double precision and ``expf`` is libm's: greedy tokens are
tested equal to ``model(...)``'s (``tests/agent/test_decode_step.py``).

The library is built with ``cc -O3 -march=native`` into the cache (``RESEARCH_AGENT_CACHE``),
named by a hash of the source, the flags and this CPU's model and flags, so a cache shared between
machines never loads another CPU's build; the build is written to a temporary file and renamed.  No
compiler, a failed build, or ``RESEARCH_AGENT_DECODE_KERNELS=0``: ``library()`` is None and
``decode_step`` runs the torch ops, with one warning for a failed build.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC")

SOURCE = r"""
#include <math.h>
#include <stdint.h>

/* x[r] += delta[r] (when delta), then out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w; with nidx > 0
   also kept[r][j] = x[r][idx[j]] * rsqrt(...) * wkept[j] (channels an int8 product leaves out). */
void add_rms_norm(float *x, const float *delta, const float *w, float eps, float *out, int64_t rows,
                  int64_t n, const int64_t *idx, int64_t nidx, const float *wkept, float *kept) {
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * n;
        if (delta) {
            const float *dr = delta + r * n;
            for (int64_t i = 0; i < n; i++) xr[i] = xr[i] + dr[i];
        }
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++) acc[j] += (double)xr[i + j] * xr[i + j];
        double ss = 0;
        for (int j = 0; j < 8; j++) ss += acc[j];
        for (; i < n; i++) ss += (double)xr[i] * xr[i];
        float var = (float)(ss / (double)n);
        float s = 1.0f / sqrtf(var + eps);
        float *o = out + r * n;
        for (int64_t k = 0; k < n; k++) o[k] = (xr[k] * s) * w[k];
        for (int64_t j = 0; j < nidx; j++) kept[r * nidx + j] = (xr[idx[j]] * s) * wkept[j];
    }
}

/* Rotary embedding in place on `heads` heads of width hd at the start of each row of t (row stride
   `stride` floats): t*cos + rotate_half(t)*sin, with cos/sin [rows, hd]. */
void rope(float *t, int64_t rows, int64_t stride, int64_t heads, int64_t hd, const float *cos_,
          const float *sin_) {
    int64_t half = hd / 2;
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cos_ + r * hd, *s = sin_ + r * hd;
        for (int64_t h = 0; h < heads; h++) {
            float *v = t + r * stride + h * hd;
            for (int64_t i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] + (-b) * s[i];
                v[i + half] = b * c[i + half] + a * s[i + half];
            }
        }
    }
}

/* out[r][i] = silu(g[r][i]) * u[r][i] (* scale[i] when scale); g and u rows `stride` floats apart. */
void silu_mul(const float *g, const float *u, int64_t stride, int64_t rows, int64_t n,
              const float *scale, float *out) {
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = g + r * stride, *ur = u + r * stride;
        float *o = out + r * n;
        for (int64_t i = 0; i < n; i++) {
            float x = gr[i];
            float y = (x / (1.0f + expf(-x))) * ur[i];
            o[i] = scale ? y * scale[i] : y;
        }
    }
}
"""

_P = ctypes.c_void_p
_I = ctypes.c_int64
_SIGNATURES = {
    "add_rms_norm": (_P, _P, _P, ctypes.c_float, _P, _I, _I, _P, _I, _P, _P),
    "rope": (_P, _I, _I, _I, _I, _P, _P),
    "silu_mul": (_P, _P, _I, _I, _I, _P, _P),
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tried = False


def enabled() -> bool:
    return os.environ.get("RESEARCH_AGENT_DECODE_KERNELS", "").strip() != "0"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def _cpu_key() -> str:
    """This CPU's model name and flags: what ``-march=native`` compiled for."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        import platform

        return platform.processor() or platform.machine()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(lines)))


def library_path(compiler: str) -> Path:
    from corpus.files import cache_dir

    key = hashlib.sha256("\0".join((SOURCE, compiler, *FLAGS, _cpu_key())).encode()).hexdigest()[:16]
    return cache_dir() / "kernels" / f"decode-{key}.so"


def _build(compiler: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
        src, so = Path(tmp) / "decode.c", Path(tmp) / "decode.so"
        src.write_text(SOURCE, encoding="utf-8")
        proc = subprocess.run([compiler, *FLAGS, str(src), "-o", str(so), "-lm"],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
        os.replace(so, path)  # atomic: another process sees the whole library or none


def library() -> ctypes.CDLL | None:
    """The compiled kernels (built on first use), or None: disabled, no compiler, or a failed build."""
    global _lib, _tried
    if not enabled():
        return None
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        compiler = _compiler()
        if compiler is not None:
            try:
                path = library_path(compiler)
                if not path.exists():
                    _build(compiler, path)
                lib = ctypes.CDLL(str(path))
                for name, args in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.argtypes, fn.restype = args, None
                _lib = lib
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                log.warning("decode kernels not built (%s); decoding with torch's ops", e)
        _tried = True
        return _lib


def _ptr(t) -> int | None:
    return None if t is None else t.data_ptr()


def add_rms_norm(lib, x, delta, weight, eps: float, out, kept_idx=None, kept_weight=None, kept=None) -> None:
    """``x`` [rows, n] (+= ``delta``) and ``out`` = RMSNorm(x) * ``weight``; contiguous float32 all."""
    rows, n = x.shape
    k = 0 if kept_idx is None else kept_idx.numel()
    lib.add_rms_norm(x.data_ptr(), _ptr(delta), weight.data_ptr(), eps, out.data_ptr(), rows, n,
                     _ptr(kept_idx), k, _ptr(kept_weight), _ptr(kept))


def rope(lib, t, heads: int, head_dim: int, cos, sin) -> None:
    """The first ``heads`` heads of each row of ``t`` [rows, >= heads * head_dim] rotated in place."""
    lib.rope(t.data_ptr(), t.shape[0], t.stride(0), heads, head_dim, cos.data_ptr(), sin.data_ptr())


def silu_mul(lib, g, u, scale, out) -> None:
    """``out`` [rows, n] = SiLU(g) * u (* ``scale``); ``g``/``u`` rows share one stride."""
    rows, n = out.shape
    lib.silu_mul(g.data_ptr(), u.data_ptr(), g.stride(0), rows, n, _ptr(scale), out.data_ptr())
