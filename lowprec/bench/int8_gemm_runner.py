"""The state of one run of ``lowprec.bench.int8_gemm``: random block-scaled INT8 operands and
fallback flags, the timer (do_bench on CUDA; a plain median under the interpreter, for the tests),
the float64 check of an output, guarded measurements (a failing variant is recorded and the run goes
on), the time budget, and the rows written.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import replace

from lowprec.bench.common import Budget, do_bench_median
from lowprec.errors import error_text

FIELDS = [
    "sweep", "kind", "M", "N", "K", "group", "block_rows", "pattern", "fallback_target", "fallback_ratio",
    "tile_ratio", "block_m", "block_n", "ms", "tflops", "tops_issued", "gbps", "speedup_vs_bf16",
    "speedup_vs_int_mm", "speedup_vs_int8_block", "max_rel_err",
    # added with the tuned kernel
    "impl", "config", "residual_config", "variant", "bitwise_equal",
]



def cpu_timer(fn) -> float:
    """Median ms of three calls after one: the interpreter dry run (tests), where timings mean nothing."""
    fn()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[1]


class Bench:
    """Operands, timing, float64 checks and the rows written, for one run."""

    def __init__(self, args, torch, kf, writer, fh, dev="cuda"):
        from lowprec.kernels import int8_fallback_tuning as kt

        self.args, self.torch, self.kf, self.kt, self.dev = args, torch, kf, kt, dev
        self.writer, self.fh, self.rows = writer, fh, []
        self.bench = do_bench_median(args.warmup, args.rep, args.cudagraph)[0] if dev == "cuda" else cpu_timer
        self.gen = torch.Generator(device=dev).manual_seed(args.seed)
        self.br = args.block_rows
        self.fixed = {k: v for k, v in (("block_m", args.block_m), ("block_n", args.block_n),
                                        ("num_warps", args.num_warps), ("num_stages", args.num_stages))
                      if v is not None}
        self.budget = Budget(args.budget_s)
        self.failures = []

    # -- plumbing
    def over_budget(self, what: str) -> bool:
        return not self.budget.allows(what)

    def emit(self, row):
        full = {k: row.get(k, "") for k in FIELDS}
        self.writer.writerow(full)
        self.fh.flush()
        self.rows.append(full)
        ms = f"{float(full['ms']):9.4f} ms" if full["ms"] != "" else " " * 12
        print(f"{full['sweep']:8s} {full['kind']:20s} {full['M']:>5}x{full['N']:>5}x{full['K']:>5} "
              f"g={full['group']!s:>4} {full['pattern']:>6} rho={full['fallback_ratio']!s:>6} {ms} "
              f"{full['tflops']:>7} TOPS x{full['speedup_vs_bf16'] or '-'} bf16 "
              f"{full['variant'] or full['impl']} {full['config']} err {full['max_rel_err'] or '-'}"
              f"{' bitwise=' + full['bitwise_equal'] if full['bitwise_equal'] else ''}", flush=True)

    def guarded(self, what, fn):
        """Run one measurement; an exception is reported and recorded, and the run goes on."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one variant failing must not lose the others
            msg = error_text(exc, 300)
            print(f"# FAILED {what}: {msg}", flush=True)
            traceback.print_exc(limit=4)
            self.failures.append(f"{what}: {msg}")
            self.sync()
            return None

    def checked(self, what, fn, *operands):
        """fn() once, guarded: its error against the float64 product of operands (rel_err's
        arguments after the output), or None where it failed."""
        y = self.guarded(what, fn)
        return None if y is None else self.rel_err(y, *operands)

    def sync(self):
        if self.dev == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def elapsed(self) -> float:
        return self.budget.elapsed()

    # -- operands
    def codes(self, rows, k):
        return self.torch.randint(-127, 128, (rows, k), device=self.dev, generator=self.gen, dtype=self.torch.int8)

    def scales(self, rows, nkb):
        return (self.torch.rand(rows, nkb, device=self.dev, generator=self.gen) + 0.5) / 127.0

    def flags_for(self, ratio, pattern, n_brow, nkb):
        torch = self.torch
        f = torch.zeros(n_brow, nkb, dtype=torch.int8, device=self.dev)
        if pattern == "rows":
            k = int(ratio * n_brow + 0.5)
            f[torch.randperm(n_brow, device=self.dev, generator=self.gen)[:k]] = 1
        else:
            n = n_brow * nkb
            k = int(ratio * n + 0.5)
            f.view(-1)[torch.randperm(n, device=self.dev, generator=self.gen)[:k]] = 1
        return f

    def masked(self, r, f, rows, g):
        """Residual codes only where flagged, as the quantizer writes them."""
        full = f.repeat_interleave(rows, 0)[: r.shape[0]].repeat_interleave(g, 1)[:, : r.shape[1]].bool()
        return self.torch.where(full, r, self.torch.zeros_like(r))

    def tile_ratio(self, f, bm):
        # a tile of bm rows issues the extra product if any of its row-blocks is flagged
        rows_per_tile = max(bm // self.br, 1)
        n_tiles = -(-f.shape[0] // rows_per_tile)
        pad = n_tiles * rows_per_tile - f.shape[0]
        ff = self.torch.nn.functional.pad(f.float(), (0, 0, 0, pad)).reshape(n_tiles, rows_per_tile, -1)
        return float(ff.amax(dim=1).mean())

    def rel_err(self, y, qa, da, qb, db, g, ra=None, dra=None, fa=None):
        if self.args.no_check:
            return ""
        torch, br = self.torch, self.br

        def deq(q, d):
            full = d.double().repeat_interleave(br, 0)[: q.shape[0]].repeat_interleave(g, 1)
            return q.double() * full[:, : q.shape[1]]

        a = deq(qa, da)
        if ra is not None:
            a += deq(ra, torch.where(fa.bool(), dra, torch.zeros_like(dra)))
        exact = a @ deq(qb, db).t()
        del a
        err = float((y.double() - exact).abs().max() / exact.abs().max())
        del exact
        return f"{err:.2e}"

    def async_config(self):
        """--async-mma: the Gluon kernel of asynchronous MMAs, in the tile the fixed fields give."""
        return replace(self.kt.GemmConfig(k_groups=1, num_stages=4, tma=True, async_mma=True), **self.fixed)

    def gemm(self, qa, da, qb, db, g, *second, **kw):
        if self.args.async_mma and "config" not in kw:
            kw["config"] = self.async_config()
        if self.fixed and "config" not in kw:
            kw = {**self.fixed, **kw}
        return self.kf.int8_fallback_gemm(qa, da, qb, db, (self.br, g), (self.br, g), *second, **kw)

    def config_label(self, qa, qb, g, **kw):
        if "config" in kw:
            return kw["config"].label()
        if self.args.async_mma:
            return self.async_config().label()
        if self.fixed:
            return replace(self.kt.default_config(g), **self.fixed).label()
        return self.kf.selected_config(qa, qb, (self.br, g), (self.br, g)).label()
