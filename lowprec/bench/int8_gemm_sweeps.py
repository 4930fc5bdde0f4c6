"""The sweeps of ``lowprec.bench.int8_gemm``, each adding rows to a ``Bench``: the correctness
checks before anything is timed, the square sizes (group size and fallback ratio), the training
step's shapes, the ablations of the tuned configuration, the quantize pass and the
warp-specialized loop. Each timed variant has its BF16 ``torch.matmul`` and ``torch._int_mm``
baselines measured in the same run on the same shape.
"""

from __future__ import annotations

import time
from dataclasses import replace

from lowprec.bench.int8_gemm_runner import Bench

def check_sweep(b: Bench, groups, ratio_groups):
    """Every variant against the torch reference before timing anything. Everything these checks
    and the timed sweeps launch in a configuration known beforehand is compiled here first, in
    parallel threads."""
    torch, kf = b.torch, b.kf
    kt = b.kt
    from lowprec.methods.int8_fallback import int8_block_gemm_reference as ref

    def eff(d, f):
        return torch.where(f.bool(), d, torch.zeros_like(d))

    def sparse_ref(A, B, blk, pa, pb):
        y = ref(*A, *B, blk, blk)
        if pa[0] is not None:
            y = y + ref(pa[0], eff(pa[1], pa[2]), *B, blk, blk)
        if pb[0] is not None:
            y = y + ref(*A, pb[0], eff(pb[1], pb[2]), blk, blk, *pa)
        return y

    def record(shape, g, kind, variant, got, want, exact_required, config="", residual=""):
        bitwise = bool(torch.equal(got, want))
        rel = float((got.double() - want.double()).abs().max() / want.double().abs().max())
        ok = bitwise if exact_required else rel <= 1e-5
        b.emit({"sweep": "check", "kind": kind, "M": shape[0], "N": shape[1], "K": shape[2], "group": g,
                "block_rows": b.br, "variant": variant, "config": config, "residual_config": residual,
                "max_rel_err": f"{rel:.2e}", "bitwise_equal": str(bitwise).lower()})
        if not ok:
            b.failures.append(f"check {kind} {variant} {shape} g={g}: bitwise={bitwise} rel={rel:.2e}")

    def operands(shape, g, ratio):
        M, N, K = shape
        nkb = -(-K // g)
        qa, qb = b.codes(M, K), b.codes(N, K)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)
        fa, fb = b.flags_for(ratio, "random", da.shape[0], nkb), b.flags_for(ratio, "random", db.shape[0], nkb)
        ra, rb = b.masked(b.codes(M, K), fa, b.br, g), b.masked(b.codes(N, K), fb, b.br, g)
        return (qa, da), (qb, db), (ra, da / 254, fa), (rb, db / 254, fb)

    # (M, N, K), group, check the second parts, check every tuning candidate. K = 4096 and M, N
    # multiples of 16 specialize the kernels as the timed shapes do: the tuner reuses these builds.
    cpu = b.dev != "cuda"
    shapes = [(((32, 32, 4 * g) if cpu else (256, 256, 4096)), g, g in ratio_groups, True) for g in groups]
    # tiles that do not divide M, N; 17 K-groups
    shapes.append((((40, 24, 17 * 8) if cpu else (200, 136, 544)), 8 if cpu else 32, True, False))
    rdef, rnofma = kt.ResidualConfig(), kt.ResidualConfig(fp_fusion=False)
    plans, warm = [], []
    for shape, g, with_fallback, all_candidates in shapes:
        A, B, pa, pb = operands(shape, g, 0.2)
        blk = (b.br, g)
        gm = kf._Gemm(*A, *B, blk, blk, *pa, *pb)
        c = torch.empty(shape[:2], device=b.dev)
        nofma = replace(kt.default_config(g), fp_fusion=False)
        cands = gm.candidates() if all_candidates else []
        warm += [(gm, c, cfg, False, False) for cfg in [nofma, *cands]]
        if with_fallback:
            warm += [(gm, c, nofma, fa_, fb_) for fa_, fb_ in ((True, False), (False, True), (True, True))]
            warm += [(gm, c, rc, side, cross) for rc in (rnofma, rdef)
                     for side, cross in (("a", False), ("b", False), ("b", True))]
        plans.append((shape, g, with_fallback, A, B, pa, pb, blk, nofma, cands))

    def warm_one(item):
        gm, c, cfg, x, y = item
        if isinstance(cfg, kt.ResidualConfig):
            return gm.launch_residual(c, x, cfg, y, warmup=True)
        return gm.launch_main(c, cfg, x, y, warmup=True)

    t = time.time()
    kt.precompile(warm_one, warm)
    print(f"# compiled {len(warm)} kernel variants in {time.time() - t:.0f} s", flush=True)

    for shape, g, with_fallback, A, B, pa, pb, blk, nofma, cands in plans:
        if b.over_budget(f"check {shape} g={g}"):
            continue
        want = ref(*A, *B, blk, blk)
        b.guarded(f"check main nofma {shape} g={g}", lambda: record(
            shape, g, "int8_block", "no FMA contraction: bit for bit",
            kf.int8_fallback_gemm(*A, *B, blk, blk, config=nofma), want, True, nofma.label()))
        for cfg in cands:
            b.guarded(f"check {cfg.label()} g={g}", lambda: record(
                shape, g, "int8_block", "tuning candidate, to 1e-5",
                kf.int8_fallback_gemm(*A, *B, blk, blk, config=cfg), want, False, cfg.label()))
        if not with_fallback:
            continue
        for impl in kf.FALLBACK_IMPLS:
            for sides in ("a", "b", "ab"):
                sa = pa if "a" in sides else (None, None, None)
                sb = pb if "b" in sides else (None, None, None)
                w = (sparse_ref(A, B, blk, sa, sb) if impl == "sparse"
                     else ref(*A, *B, blk, blk, *sa, *sb, order="tail" if impl == "tail" else "k"))
                b.guarded(f"check {impl} {sides} {shape} g={g}", lambda: record(
                    shape, g, f"int8_fallback_{impl}", f"second parts of {sides}, no FMA contraction: bit for bit",
                    kf.int8_fallback_gemm(*A, *B, blk, blk, *sa, *sb, fallback=impl, config=nofma,
                                          residual=rnofma), w, True, nofma.label(),
                    rnofma.label() if impl == "sparse" else ""))
    b.sync()


# ----------------------------------------------------------------------------------------------
# timed sweeps


def _baselines(b: Bench, sweep, M, N, K, extra=None, emit=True):
    torch = b.torch
    a16 = torch.randn(M, K, device=b.dev, generator=b.gen).to(torch.bfloat16)
    b16 = torch.randn(N, K, device=b.dev, generator=b.gen).to(torch.bfloat16)
    qa, qb = b.codes(M, K), b.codes(N, K)
    flop = 2.0 * M * N * K
    t_bf16 = b.bench(lambda: torch.matmul(a16, b16.t()))
    t_int = b.bench(lambda: torch._int_mm(qa, qb.t()))
    base = dict(M=M, N=N, K=K, block_rows=b.br, **(extra or {}))
    if not emit:
        return qa, qb, t_bf16, t_int
    b.emit({**base, "sweep": sweep, "kind": "bf16_matmul", "ms": f"{t_bf16:.5f}",
            "tflops": f"{flop / t_bf16 / 1e9:.1f}", "speedup_vs_bf16": "1.00", "speedup_vs_int_mm": f"{t_int / t_bf16:.2f}"})
    b.emit({**base, "sweep": sweep, "kind": "int_mm", "ms": f"{t_int:.5f}", "tflops": f"{flop / t_int / 1e9:.1f}",
            "speedup_vs_bf16": f"{t_bf16 / t_int:.2f}", "speedup_vs_int_mm": "1.00"})
    return qa, qb, t_bf16, t_int


def _time_row(b: Bench, row, fn, flop, t_bf16, t_int, t_block=None, issued=1.0):
    t = b.bench(fn)
    out = {**row, "ms": f"{t:.5f}", "tflops": f"{flop / t / 1e9:.1f}", "tops_issued": f"{flop * issued / t / 1e9:.1f}",
           "speedup_vs_bf16": f"{t_bf16 / t:.2f}", "speedup_vs_int_mm": f"{t_int / t:.2f}",
           "speedup_vs_int8_block": f"{t_block / t:.2f}" if t_block else ""}
    b.emit(out)
    return t


def square_sweeps(b: Bench, S, groups, ratios, ratio_groups, patterns, impls, sweeps):
    kf = b.kf
    kt = b.kt
    M = N = K = S
    flop = 2.0 * M * N * K
    qa, qb, t_bf16, t_int = _baselines(b, "baseline", M, N, K)
    default_impl = kf.FALLBACK_IMPLS[0]
    timed_groups = sorted(set(groups if "group" in sweeps else [])
                          | set(ratio_groups if "ratio" in sweeps else []))
    # the headline groups first, so a budget cut drops the extras
    timed_groups.sort(key=lambda g: (g not in (128, 32), g))
    for g in timed_groups:
        if b.over_budget(f"{S}^3 g={g}"):
            continue
        nkb = -(-K // g)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)
        blk = (b.br, g)

        def run_plain():
            return b.gemm(qa, da, qb, db, g)

        err = b.checked(f"int8_block {S} g={g}", run_plain, qa, da, qb, db, g)
        if err is None:
            continue
        cfg = b.config_label(qa, qb, g)
        sel = b.kf.selected_config(qa, qb, blk, blk) if not b.fixed else replace(kt.default_config(g), **b.fixed)
        base = dict(M=M, N=N, K=K, group=g, block_rows=b.br, block_m=sel.block_m, block_n=sel.block_n, config=cfg)
        # a group timed for the other sweeps only is not a point of the figure
        sweep = "group" if "group" in sweeps and g in groups else "group_extra"
        t_block = _time_row(b, {**base, "sweep": sweep, "kind": "int8_block", "fallback_target": 0,
                                "fallback_ratio": 0, "tile_ratio": 0, "speedup_vs_int8_block": "1.00",
                                "max_rel_err": err}, run_plain, flop, t_bf16, t_int)
        if "ratio" in sweeps and g in ratio_groups:
            ra = b.codes(M, K)
            dra = b.scales(-(-M // b.br), nkb) / 254.0
            for ratio in ratios:
                for pattern in patterns:
                    if ratio == 0 and pattern != patterns[0]:
                        continue  # no block falls back: the pattern does not matter
                    if b.over_budget(f"ratio {S} g={g} {pattern} {ratio}"):
                        continue
                    fa = b.flags_for(ratio, pattern, -(-M // b.br), nkb)
                    ra_f = b.masked(ra, fa, b.br, g)
                    actual = float(fa.float().mean())
                    tr = b.tile_ratio(fa, sel.block_m)
                    for impl in impls:
                        def run_fb(impl=impl):
                            return b.gemm(qa, da, qb, db, g, ra_f, dra, fa, fallback=impl)

                        err = b.checked(f"{impl} {S} g={g} {pattern} {ratio}", run_fb,
                                        qa, da, qb, db, g, ra_f, dra, fa)
                        if err is None:
                            continue
                        kind = "int8_fallback" if impl == default_impl else f"int8_fallback_{impl}"
                        issued = 1 + (actual if impl == "sparse" else tr)  # the others issue whole tiles
                        _time_row(b, {**base, "sweep": "ratio", "kind": kind, "impl": impl, "pattern": pattern,
                                      "fallback_target": ratio, "fallback_ratio": f"{actual:.4f}",
                                      "tile_ratio": f"{tr:.4f}", "max_rel_err": err,
                                      "residual_config": kt.ResidualConfig().label() if impl == "sparse" else ""},
                                  run_fb, flop, t_bf16, t_int, t_block, issued)
        b.sync()
    return qa, qb, t_bf16, t_int


def ablation_sweep(b: Bench, S, groups):
    """At S^3: the tuned configuration, then one change at a time; then the second parts at 5 %
    random blocks in several pass configurations, in the fused loop and after it. Built in parallel first."""
    kf, torch = b.kf, b.torch
    kt = b.kt
    # its own baselines, written: timed minutes after the baseline sweep's, they can differ from them
    # (an H100 at 14b5a5f: BF16 1.75 ms here against 1.46 there), and every ratio of this sweep is to these
    qa, qb, t_bf16, t_int = _baselines(b, "ablation", S, S, S)
    M = N = K = S
    flop = 2.0 * M * N * K
    for g in groups:
        if b.over_budget(f"ablation g={g}"):
            return
        nkb = -(-K // g)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)
        fa = b.flags_for(0.05, "random", -(-M // b.br), nkb)
        ra = b.masked(b.codes(M, K), fa, b.br, g)
        dra = b.scales(-(-M // b.br), nkb) / 254.0
        sel = kf.selected_config(qa, qb, (b.br, g), (b.br, g))
        tma_ok = kf._tma_usable(qa, qb, g)
        variants = [("tuned", sel),
                    ("conversion instead of the add trick", replace(sel, magic=False)),
                    ("descriptor loads toggled", replace(sel, tma=not sel.tma)),
                    ("half the K-groups per iteration", replace(sel, k_groups=max(1, sel.k_groups // 2))),
                    ("twice the K-groups per iteration", replace(sel, k_groups=sel.k_groups * 2)),
                    ("no tile grouping (group_m 1)", replace(sel, group_m=1)),
                    ("group_m 16", replace(sel, group_m=16)),
                    ("one more stage", replace(sel, num_stages=sel.num_stages + 1)),
                    ("no FMA contraction", replace(sel, fp_fusion=False))]
        seen, todo = set(), []
        for name, cfg in variants:
            if cfg in seen or (cfg.tma and not tma_ok) or kt.smem_bytes(cfg, g) > 228 * 1024:
                continue
            seen.add(cfg)
            todo.append((name, "block", cfg, None))
        rdef = kt.ResidualConfig()
        for name, rcfg in (("sparse pass, default", rdef),
                           ("sparse pass, 64-row programs", replace(rdef, block_r=64)),
                           ("sparse pass, 256-wide tiles", replace(rdef, block_y=256)),
                           ("sparse pass, one tile per program", replace(rdef, programs=1 << 30)),
                           ("sparse pass, 1024 programs", replace(rdef, programs=1024)),
                           ("sparse pass, 8 warps", replace(rdef, num_warps=8, block_y=256))):
            todo.append((name, "sparse", sel, rcfg))
        todo.append(("fused loop", "fused", sel, None))
        todo.append(("tail after the loop", "tail", sel, None))
        gm = kf._Gemm(qa, da, qb, db, (b.br, g), (b.br, g), ra, dra, fa, None, None, None)
        c = torch.empty((M, N), device=b.dev)

        def warm(item):
            name, kind, cfg, rcfg = item
            if kind == "sparse":
                return gm.launch_residual(c, "a", rcfg, False, warmup=True)
            return gm.launch_main(c, cfg, kind != "block", False, warmup=True, tail=kind == "tail")

        kt.precompile(warm, todo)
        base = dict(M=M, N=N, K=K, group=g, block_rows=b.br, sweep="ablation")
        t_block = None
        for name, kind, cfg, rcfg in todo:
            if b.over_budget(f"ablation g={g} {name}"):
                return
            if kind == "block":
                fn = (lambda cfg=cfg: b.gemm(qa, da, qb, db, g, config=cfg))
                row = {**base, "kind": "int8_block", "variant": name, "config": cfg.label(), "fallback_target": 0,
                       "fallback_ratio": 0}
            else:
                fn = (lambda kind=kind, cfg=cfg, rcfg=rcfg: b.gemm(qa, da, qb, db, g, ra, dra, fa, fallback=kind,
                                                                   config=cfg, residual=rcfg))
                row = {**base, "kind": "int8_fallback", "impl": kind, "variant": name, "config": cfg.label(),
                       "pattern": "random", "fallback_target": 0.05,
                       "fallback_ratio": f"{float(fa.float().mean()):.4f}",
                       "residual_config": rcfg.label() if rcfg else ""}
            if b.guarded(f"ablation g={g} {name}", fn) is None:
                continue
            t = b.guarded(f"ablation g={g} {name} timing",
                          lambda: _time_row(b, row, fn, flop, t_bf16, t_int, t_block))
            if name == "tuned" and t:
                t_block = t
                b.rows[-1]["speedup_vs_int8_block"] = "1.00"
        b.sync()


def shapes_sweep(b: Bench, shapes, g, ratio):
    kf = b.kf
    kt = b.kt
    for M, N, K in shapes:
        if b.over_budget(f"shape {M}x{N}x{K}"):
            continue
        flop = 2.0 * M * N * K
        out = b.guarded(f"baselines {M}x{N}x{K}", lambda: _baselines(b, "shapes", M, N, K, {"group": g}))
        if out is None:
            continue
        qa, qb, t_bf16, t_int = out
        nkb = -(-K // g)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)

        def run_plain():
            return b.gemm(qa, da, qb, db, g)

        err = b.checked(f"int8_block {M}x{N}x{K}", run_plain, qa, da, qb, db, g)
        if err is None:
            continue
        base = dict(M=M, N=N, K=K, group=g, block_rows=b.br, config=b.config_label(qa, qb, g))
        t_block = _time_row(b, {**base, "sweep": "shapes", "kind": "int8_block", "fallback_target": 0,
                                "fallback_ratio": 0, "max_rel_err": err}, run_plain, flop, t_bf16, t_int)
        if ratio > 0:
            fa = b.flags_for(ratio, "random", -(-M // b.br), nkb)
            ra = b.masked(b.codes(M, K), fa, b.br, g)
            dra = b.scales(-(-M // b.br), nkb) / 254.0

            def run_fb():
                return b.gemm(qa, da, qb, db, g, ra, dra, fa)

            err = b.checked(f"int8_fallback {M}x{N}x{K}", run_fb, qa, da, qb, db, g, ra, dra, fa)
            if err is not None:
                _time_row(b, {**base, "sweep": "shapes", "kind": "int8_fallback", "impl": kf.FALLBACK_IMPLS[0],
                              "pattern": "random", "fallback_target": ratio,
                              "fallback_ratio": f"{float(fa.float().mean()):.4f}", "max_rel_err": err,
                              "residual_config": kt.ResidualConfig().label()},
                          run_fb, flop, t_bf16, t_int, t_block, 1 + ratio)
        b.sync()


def quantize_sweep(b: Bench, S, ratio_groups, chunks=()):
    """The quantize pass on an S x S BF16 operand, per group: the fallback decided in the kernel by
    a threshold (the 95th percentile of the block amax: about 5 % of blocks fall back), by a 5 %
    random mask, and as training runs it (the threshold, the stochastic rounding stream drawn in
    the kernel, and the codes' transposes for the backward written from the same pass). chunks:
    the training pass again at each of these (elements, columns) chunk shapes (the elements a
    program holds at once and the most columns they span; the module's ``_QUANT_CHUNK`` and
    ``_QUANT_CHUNK_COLS`` are the default), kind ``quantize_fallback_training_chunk<n>x<cols>``."""
    torch, kf = b.torch, b.kf
    from lowprec.numerics import rounding_stream as rs

    a16 = torch.randn(S, S, device=b.dev, generator=b.gen).to(torch.bfloat16)
    keys = torch.stack([rs.part_key(rs.call_key(torch.tensor(1), torch.tensor(0)), p) for p in range(2)]).to(b.dev)
    for g in sorted(set(ratio_groups)):
        block = (b.br, g)
        if kf._next_pow2(b.br) * kf._next_pow2(g) > kf._MAX_BLOCK_ELEMS:
            continue
        amax, _ = kf.block_stats_int8(a16, block)
        thr = torch.quantile(amax.flatten(), 0.95).reshape(1)
        mask = torch.rand(amax.shape, device=b.dev, generator=b.gen) < 0.05
        grid = 8 * mask.numel() + mask.numel()  # two fp32 scales and a flag per block
        plain = a16.numel() * 2 + 2 * a16.numel() + grid
        modes = [("threshold", {"threshold": thr}, plain), ("mask", {"mask": mask}, plain),
                 ("training", {"threshold": thr, "keys": keys, "transposed": True}, plain + 2 * a16.numel())]
        saved = kf._QUANT_CHUNK, kf._QUANT_CHUNK_COLS
        modes += [(f"training_chunk{n}x{cols}", {**modes[2][1], "chunk": (n, cols)}, modes[2][2]) for n, cols in chunks]
        for mode, kw, nbytes in modes:
            kw = dict(kw)
            kf._QUANT_CHUNK, kf._QUANT_CHUNK_COLS = kw.pop("chunk", saved)
            try:
                t = b.bench(lambda: kf.quantize_fallback_int8(a16, block, **kw))
            finally:
                kf._QUANT_CHUNK, kf._QUANT_CHUNK_COLS = saved
            b.emit({"M": S, "N": S, "K": S, "block_rows": b.br, "sweep": "quantize",
                    "kind": f"quantize_fallback_{mode}", "group": g, "ms": f"{t:.5f}",
                    "gbps": f"{nbytes / t / 1e6:.1f}"})


def ws_sweep(b: Bench, g):
    """The warp-specialized loop, last: a compiler path documented for other GPUs."""
    kf, S = b.kf, b.largest
    if b.fixed or b.over_budget("ws"):
        return
    qa, qb, t_bf16, t_int = _baselines(b, "ws", S, S, S)
    nkb = -(-S // g)
    da, db = b.scales(-(-S // b.br), nkb), b.scales(-(-S // b.br), nkb)
    sel = kf.selected_config(qa, qb, (b.br, g), (b.br, g))
    for cfg in (replace(sel, warp_specialize=True), replace(sel, warp_specialize=True, tma=True)):
        if cfg.tma and not kf._tma_usable(qa, qb, g):
            continue
        fn = (lambda cfg=cfg: b.gemm(qa, da, qb, db, g, config=cfg))
        err = b.checked(f"ws {cfg.label()}", fn, qa, da, qb, db, g)
        if err is None:
            continue
        b.guarded(f"ws {cfg.label()} timing", lambda: _time_row(
            b, {"M": S, "N": S, "K": S, "group": g, "block_rows": b.br, "sweep": "ablation", "kind": "int8_block",
                "variant": "warp-specialized loop", "config": cfg.label(), "max_rel_err": err},
            fn, 2.0 * S ** 3, t_bf16, t_int))
