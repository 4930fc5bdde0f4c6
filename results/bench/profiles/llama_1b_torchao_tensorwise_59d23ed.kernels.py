# triton_poi_fused__scaled_mm__to_copy_abs_clamp_clone_mul_reciprocal_silu_silu_backward_t_view_6: 7.05 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 8192, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'in_ptr3': '*bf16', 'in_ptr4': '*bf16', 'out_ptr1': '*fp8e4nv', 'out_ptr3': '*fp8e5', 'out_ptr4': '*bf16', 'out_ptr5': '*fp8e5', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_abs_clamp_clone_mul_reciprocal_silu_silu_backward_t_view_6', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 5, 'num_store': 4, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 1107296256, 'x': 369098752}},
    min_elem_per_thread=4
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_abs_clamp_clone_mul_reciprocal_silu_silu_backward_t_view_6(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr1, out_ptr3, out_ptr4, out_ptr5, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 5632
    xnumel = 16384
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = yindex < ynumel
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = tl.full([XBLOCK], True, tl.int1)[None, :]
    x1 = xindex
    y0 = yindex
    tmp0 = tl.load(in_ptr0 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
    tmp12 = tl.load(in_ptr1 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
    tmp21 = tl.load(in_ptr2 + (0)).to(tl.float32)
    tmp22 = tl.broadcast_to(tmp21, [1, 1])
    tmp39 = tl.load(in_ptr3 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
    tmp48 = tl.load(in_ptr4 + (0)).to(tl.float32)
    tmp49 = tl.broadcast_to(tmp48, [1, 1])
    tmp1 = tmp0.to(tl.float32)
    tmp2 = -tmp1
    tmp3 = libdevice.exp(tmp2)
    tmp4 = tl.full([1, 1], 1.0, tl.float32)
    tmp5 = tmp3 + tmp4
    tmp6 = triton.language.div_rn(tmp1, tmp5)
    tmp7 = tmp6.to(tl.float32)
    tmp8 = tmp7.to(tl.bfloat16)
    tmp9 = tmp8.to(tl.float32)
    tmp10 = tmp9.to(tl.bfloat16)
    tmp11 = tmp10.to(tl.float32)
    tmp13 = tmp12.to(tl.bfloat16)
    tmp14 = tmp13.to(tl.float32)
    tmp15 = tmp11 * tmp14
    tmp16 = tmp15.to(tl.bfloat16)
    tmp17 = tmp16.to(tl.float32)
    tmp18 = tmp17.to(tl.bfloat16)
    tmp19 = tmp18.to(tl.float32)
    tmp20 = tmp19.to(tl.float32)
    tmp23 = tmp22.to(tl.bfloat16)
    tmp24 = tmp23.to(tl.float32)
    tmp25 = tmp24.to(tl.float64)
    tmp26 = tl.full([1, 1], 1e-12, tl.float64)
    tmp27 = tl.where((tmp25 > tmp26) | (tmp25 != tmp25), tmp25, tmp26)
    tmp28 = tl.full([1, 1], 1, tl.int32)
    tmp29 = (tmp28 / tmp27)
    tmp30 = tl.full([1, 1], 448.0, tl.float64)
    tmp31 = tmp29 * tmp30
    tmp32 = tmp31.to(tl.float32)
    tmp33 = tmp20 * tmp32
    tmp34 = tl.full([1, 1], -448.0, tl.float32)
    tmp35 = tl.where((tmp33 > tmp34) | (tmp33 != tmp33), tmp33, tmp34)
    tmp36 = tl.full([1, 1], 448.0, tl.float32)
    tmp37 = tl.where((tmp35 < tmp36) | (tmp35 != tmp35), tmp35, tmp36)
    tmp38 = tmp37.to(tl.float8e4nv)
    tmp40 = tmp39.to(tl.bfloat16)
    tmp41 = tmp40.to(tl.float32)
    tmp42 = tmp41 * tmp11
    tmp43 = tmp42.to(tl.bfloat16)
    tmp44 = tmp43.to(tl.float32)
    tmp45 = tmp44.to(tl.bfloat16)
    tmp46 = tmp45.to(tl.float32)
    tmp47 = tmp46.to(tl.float32)
    tmp50 = tmp49.to(tl.bfloat16)
    tmp51 = tmp50.to(tl.float32)
    tmp52 = tmp51.to(tl.float64)
    tmp53 = tl.where((tmp52 > tmp26) | (tmp52 != tmp52), tmp52, tmp26)
    tmp54 = (tmp28 / tmp53)
    tmp55 = tl.full([1, 1], 57344.0, tl.float64)
    tmp56 = tmp54 * tmp55
    tmp57 = tmp56.to(tl.float32)
    tmp58 = tmp47 * tmp57
    tmp59 = tl.full([1, 1], -57344.0, tl.float32)
    tmp60 = tl.where((tmp58 > tmp59) | (tmp58 != tmp58), tmp58, tmp59)
    tmp61 = tl.full([1, 1], 57344.0, tl.float32)
    tmp62 = tl.where((tmp60 < tmp61) | (tmp60 != tmp60), tmp60, tmp61)
    tmp63 = tmp62.to(tl.float8e5)
    tmp64 = tmp41 * tmp14
    tmp65 = tmp64.to(tl.bfloat16)
    tmp66 = tmp65.to(tl.float32)
    tmp67 = tmp66.to(tl.float32)
    tmp68 = (tmp28 / tmp5)
    tmp69 = tmp68 * tmp4
    tmp70 = tmp67 * tmp69
    tmp71 = tmp4 - tmp69
    tmp72 = tmp1 * tmp71
    tmp73 = tmp72 + tmp4
    tmp74 = tmp70 * tmp73
    tmp75 = tmp74.to(tl.float32)
    tmp76 = tmp75.to(tl.bfloat16)
    tmp77 = tmp76.to(tl.float32)
    tmp78 = tmp77.to(tl.bfloat16)
    tmp79 = tmp78.to(tl.float32)
    tmp80 = tl_math.abs(tmp79)
    tmp81 = tmp80.to(tl.bfloat16)
    tmp82 = tmp81.to(tl.float32)
    tl.store(out_ptr1 + (x1 + 16384*y0), tmp38, ymask)
    tl.store(out_ptr3 + (y0 + 5632*x1), tmp63, ymask)
    tl.store(out_ptr4 + (y0 + 5632*x1), tmp82, ymask)
    tl.store(out_ptr5 + (x1 + 16384*y0), tmp63, ymask)


# triton_poi_fused__scaled_mm__to_copy_clamp_clone_mul_reciprocal_silu_silu_backward_t_view_15: 3.98 ms in 16 calls per step


# triton_poi_fused__scaled_mm__to_copy_clamp_clone_mul_reciprocal_silu_silu_backward_t_view_15: 3.98 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 8192, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'in_ptr3': '*bf16', 'out_ptr1': '*fp8e5', 'out_ptr2': '*fp8e5', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_clamp_clone_mul_reciprocal_silu_silu_backward_t_view_15', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 2, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 738197504, 'x': 184549376}},
    min_elem_per_thread=4
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_clamp_clone_mul_reciprocal_silu_silu_backward_t_view_15(in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr1, out_ptr2, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 5632
    xnumel = 16384
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = yindex < ynumel
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = tl.full([XBLOCK], True, tl.int1)[None, :]
    x1 = xindex
    y0 = yindex
    tmp0 = tl.load(in_ptr0 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
    tmp3 = tl.load(in_ptr1 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
    tmp10 = tl.load(in_ptr2 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
    tmp30 = tl.load(in_ptr3 + (0)).to(tl.float32)
    tmp31 = tl.broadcast_to(tmp30, [1, 1])
    tmp1 = tmp0.to(tl.bfloat16)
    tmp2 = tmp1.to(tl.float32)
    tmp4 = tmp3.to(tl.bfloat16)
    tmp5 = tmp4.to(tl.float32)
    tmp6 = tmp2 * tmp5
    tmp7 = tmp6.to(tl.bfloat16)
    tmp8 = tmp7.to(tl.float32)
    tmp9 = tmp8.to(tl.float32)
    tmp11 = tmp10.to(tl.float32)
    tmp12 = -tmp11
    tmp13 = libdevice.exp(tmp12)
    tmp14 = tl.full([1, 1], 1.0, tl.float32)
    tmp15 = tmp13 + tmp14
    tmp16 = tl.full([1, 1], 1, tl.int32)
    tmp17 = (tmp16 / tmp15)
    tmp18 = tmp17 * tmp14
    tmp19 = tmp9 * tmp18
    tmp20 = tmp14 - tmp18
    tmp21 = tmp11 * tmp20
    tmp22 = tmp21 + tmp14
    tmp23 = tmp19 * tmp22
    tmp24 = tmp23.to(tl.float32)
    tmp25 = tmp24.to(tl.bfloat16)
    tmp26 = tmp25.to(tl.float32)
    tmp27 = tmp26.to(tl.bfloat16)
    tmp28 = tmp27.to(tl.float32)
    tmp29 = tmp28.to(tl.float32)
    tmp32 = tmp31.to(tl.bfloat16)
    tmp33 = tmp32.to(tl.float32)
    tmp34 = tmp33.to(tl.float64)
    tmp35 = tl.full([1, 1], 1e-12, tl.float64)
    tmp36 = tl.where((tmp34 > tmp35) | (tmp34 != tmp34), tmp34, tmp35)
    tmp37 = (tmp16 / tmp36)
    tmp38 = tl.full([1, 1], 57344.0, tl.float64)
    tmp39 = tmp37 * tmp38
    tmp40 = tmp39.to(tl.float32)
    tmp41 = tmp29 * tmp40
    tmp42 = tl.full([1, 1], -57344.0, tl.float32)
    tmp43 = tl.where((tmp41 > tmp42) | (tmp41 != tmp41), tmp41, tmp42)
    tmp44 = tl.full([1, 1], 57344.0, tl.float32)
    tmp45 = tl.where((tmp43 < tmp44) | (tmp43 != tmp43), tmp43, tmp44)
    tmp46 = tmp45.to(tl.float8e5)
    tl.store(out_ptr1 + (y0 + 5632*x1), tmp46, ymask)
    tl.store(out_ptr2 + (x1 + 16384*y0), tmp46, ymask)


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_23: 3.19 ms in 16 calls per step


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_23: 3.19 ms in 16 calls per step
@triton_heuristics.persistent_reduction(
    size_hints={'x': 512, 'r0_': 256},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*bf16', 'in_ptr5': '*fp32', 'in_ptr6': '*fp32', 'out_ptr1': '*fp32', 'out_ptr3': '*i16', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_23', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 7, 'num_store': 2, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 2048, 'r0_': 2884608}}
)
@triton.jit
def triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_23(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, in_ptr6, out_ptr1, out_ptr3, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 512
    r0_numel = 256
    R0_BLOCK: tl.constexpr = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), xmask, other=0.0).to(tl.float32)
    tmp4 = tl.load(in_ptr1 + (r0_1 + 256*x0), xmask, other=0.0).to(tl.float32)
    tmp9 = tl.load(in_ptr2 + (r0_1), None, eviction_policy='evict_last')
    tmp11 = tl.load(in_ptr3 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp12 = tl.load(in_ptr4 + (r0_1 + 256*x0), xmask, other=0.0).to(tl.float32)
    tmp22 = tl.load(in_ptr5 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp23 = tl.load(in_ptr6 + (x0), xmask, eviction_policy='evict_last')
    tmp1 = tmp0.to(tl.bfloat16)
    tmp2 = tmp1.to(tl.float32)
    tmp3 = tmp2.to(tl.float32)
    tmp5 = tmp4.to(tl.bfloat16)
    tmp6 = tmp5.to(tl.float32)
    tmp7 = tmp6.to(tl.float32)
    tmp8 = tmp3 + tmp7
    tmp10 = tmp8 * tmp9
    tmp13 = tmp12.to(tl.bfloat16)
    tmp14 = tmp13.to(tl.float32)
    tmp15 = tmp14.to(tl.float32)
    tmp16 = tmp11 + tmp15
    tmp17 = tmp10 * tmp16
    tmp18 = tl.broadcast_to(tmp17, [XBLOCK, R0_BLOCK])
    tmp20 = tl.where(xmask, tmp18, 0)
    tmp21 = tl.sum(tmp20, 1)[:, None].to(tl.float32)
    tmp24 = tmp10 * tmp23
    tmp25 = tmp22 + tmp24
    tmp26 = tl.full([1, 1], -0.5, tl.float32)
    tmp27 = tmp21 * tmp26
    tmp28 = tmp23 * tmp23
    tmp29 = tmp28 * tmp23
    tmp30 = tmp27 * tmp29
    tmp31 = tl.full([1, 1], 0.00390625, tl.float32)
    tmp32 = tmp30 * tmp31
    tmp33 = tl.full([1, 1], 2.0, tl.float32)
    tmp34 = tmp16 * tmp33
    tmp35 = tmp32 * tmp34
    tmp36 = tmp25 + tmp35
    tmp37 = tmp36.to(tl.float32)
    tmp38 = tmp37.to(tl.bfloat16)
    tmp39 = tmp38.to(tl.float32)
    tmp40 = tmp39.to(tl.bfloat16).to(tl.int16, bitcast=True)
    tl.store(out_ptr1 + (r0_1 + 256*x0), tmp36, xmask)
    tl.store(out_ptr3 + (r0_1 + 256*x0), tmp40, xmask)


# triton_red_fused_abs_max_mul_silu_view_4: 3.12 ms in 16 calls per step


# triton_red_fused_abs_max_mul_silu_view_4: 3.12 ms in 16 calls per step
@triton_heuristics.reduction(
    size_hints={'x': 512, 'r0_': 262144},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'out_ptr0': '*fp32', 'out_ptr1': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused_abs_max_mul_silu_view_4', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 3, 'num_store': 2, 'num_reduction': 2, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 8192, 'r0_': 553648128}}
)
@triton.jit
def triton_red_fused_abs_max_mul_silu_view_4(in_ptr0, in_ptr1, in_ptr2, out_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 512
    r0_numel = 180224
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp24 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    _tmp38 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp12 = tl.load(in_ptr1 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp26 = tl.load(in_ptr2 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp1 = tmp0.to(tl.float32)
        tmp2 = -tmp1
        tmp3 = libdevice.exp(tmp2)
        tmp4 = tl.full([1, 1], 1.0, tl.float32)
        tmp5 = tmp3 + tmp4
        tmp6 = triton.language.div_rn(tmp1, tmp5)
        tmp7 = tmp6.to(tl.float32)
        tmp8 = tmp7.to(tl.bfloat16)
        tmp9 = tmp8.to(tl.float32)
        tmp10 = tmp9.to(tl.bfloat16)
        tmp11 = tmp10.to(tl.float32)
        tmp13 = tmp12.to(tl.bfloat16)
        tmp14 = tmp13.to(tl.float32)
        tmp15 = tmp11 * tmp14
        tmp16 = tmp15.to(tl.bfloat16)
        tmp17 = tmp16.to(tl.float32)
        tmp18 = tmp17.to(tl.bfloat16)
        tmp19 = tmp18.to(tl.float32)
        tmp20 = tl_math.abs(tmp19)
        tmp21 = tmp20.to(tl.bfloat16)
        tmp22 = tmp21.to(tl.float32)
        tmp23 = tl.broadcast_to(tmp22, [XBLOCK, R0_BLOCK])
        tmp25 = tl.where((_tmp24 > tmp23) | (_tmp24 != _tmp24), _tmp24, tmp23)
        _tmp24 = tl.where(r0_mask & xmask, tmp25, _tmp24)
        tmp27 = tmp26.to(tl.bfloat16)
        tmp28 = tmp27.to(tl.float32)
        tmp29 = tmp28 * tmp11
        tmp30 = tmp29.to(tl.bfloat16)
        tmp31 = tmp30.to(tl.float32)
        tmp32 = tmp31.to(tl.bfloat16)
        tmp33 = tmp32.to(tl.float32)
        tmp34 = tl_math.abs(tmp33)
        tmp35 = tmp34.to(tl.bfloat16)
        tmp36 = tmp35.to(tl.float32)
        tmp37 = tl.broadcast_to(tmp36, [XBLOCK, R0_BLOCK])
        tmp39 = tl.where((_tmp38 > tmp37) | (_tmp38 != _tmp38), _tmp38, tmp37)
        _tmp38 = tl.where(r0_mask & xmask, tmp39, _tmp38)
    tmp24 = triton_helpers.max2(_tmp24, 1)[:, None]
    tmp38 = triton_helpers.max2(_tmp38, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp24, xmask)
    tl.store(out_ptr1 + (x0), tmp38, xmask)


# triton_red_fused__to_copy_abs_add_div_expand_max_mul_pow_sum_view_16: 2.55 ms in 16 calls per step


# triton_red_fused__to_copy_abs_add_div_expand_max_mul_pow_sum_view_16: 2.55 ms in 16 calls per step
@triton_heuristics.reduction(
    size_hints={'x': 16384, 'r0_': 2048},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*bf16', 'in_ptr5': '*fp32', 'in_ptr6': '*fp32', 'out_ptr1': '*fp32', 'out_ptr2': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused__to_copy_abs_add_div_expand_max_mul_pow_sum_view_16', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 12, 'num_store': 2, 'num_reduction': 2, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 196608, 'r0_': 738205696}}
)
@triton.jit
def triton_red_fused__to_copy_abs_add_div_expand_max_mul_pow_sum_view_16(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, in_ptr6, out_ptr1, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 16384
    r0_numel = 2048
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp19 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp4 = tl.load(in_ptr1 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp9 = tl.load(in_ptr2 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp11 = tl.load(in_ptr3 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp12 = tl.load(in_ptr4 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp1 = tmp0.to(tl.bfloat16)
        tmp2 = tmp1.to(tl.float32)
        tmp3 = tmp2.to(tl.float32)
        tmp5 = tmp4.to(tl.bfloat16)
        tmp6 = tmp5.to(tl.float32)
        tmp7 = tmp6.to(tl.float32)
        tmp8 = tmp3 + tmp7
        tmp10 = tmp8 * tmp9
        tmp13 = tmp12.to(tl.bfloat16)
        tmp14 = tmp13.to(tl.float32)
        tmp15 = tmp14.to(tl.float32)
        tmp16 = tmp11 + tmp15
        tmp17 = tmp10 * tmp16
        tmp18 = tl.broadcast_to(tmp17, [XBLOCK, R0_BLOCK])
        tmp20 = _tmp19 + tmp18
        _tmp19 = tl.where(r0_mask, tmp20, _tmp19)
    tmp19 = tl.sum(_tmp19, 1)[:, None]
    tmp33 = tl.load(in_ptr6 + (x0), None, eviction_policy='evict_last')
    _tmp62 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp21 = tl.load(in_ptr5 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp22 = tl.load(in_ptr0 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp26 = tl.load(in_ptr1 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp31 = tl.load(in_ptr2 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp43 = tl.load(in_ptr3 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp44 = tl.load(in_ptr4 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp23 = tmp22.to(tl.bfloat16)
        tmp24 = tmp23.to(tl.float32)
        tmp25 = tmp24.to(tl.float32)
        tmp27 = tmp26.to(tl.bfloat16)
        tmp28 = tmp27.to(tl.float32)
        tmp29 = tmp28.to(tl.float32)
        tmp30 = tmp25 + tmp29
        tmp32 = tmp30 * tmp31
        tmp34 = tmp32 * tmp33
        tmp35 = tmp21 + tmp34
        tmp36 = tl.full([1, 1], -0.5, tl.float32)
        tmp37 = tmp19 * tmp36
        tmp38 = tmp33 * tmp33
        tmp39 = tmp38 * tmp33
        tmp40 = tmp37 * tmp39
        tmp41 = tl.full([1, 1], 0.00048828125, tl.float32)
        tmp42 = tmp40 * tmp41
        tmp45 = tmp44.to(tl.bfloat16)
        tmp46 = tmp45.to(tl.float32)
        tmp47 = tmp46.to(tl.float32)
        tmp48 = tmp43 + tmp47
        tmp49 = tl.full([1, 1], 2.0, tl.float32)
        tmp50 = tmp48 * tmp49
        tmp51 = tmp42 * tmp50
        tmp52 = tmp35 + tmp51
        tmp53 = tmp52.to(tl.float32)
        tmp54 = tmp53.to(tl.bfloat16)
        tmp55 = tmp54.to(tl.float32)
        tmp56 = tmp55.to(tl.bfloat16)
        tmp57 = tmp56.to(tl.float32)
        tmp58 = tl_math.abs(tmp57)
        tmp59 = tmp58.to(tl.bfloat16)
        tmp60 = tmp59.to(tl.float32)
        tmp61 = tl.broadcast_to(tmp60, [XBLOCK, R0_BLOCK])
        tmp63 = tl.where((_tmp62 > tmp61) | (_tmp62 != _tmp62), _tmp62, tmp61)
        _tmp62 = tl.where(r0_mask, tmp63, _tmp62)
        tl.store(out_ptr1 + (r0_1 + 2048*x0), tmp52, r0_mask)
    tmp62 = triton_helpers.max2(_tmp62, 1)[:, None]
    tl.store(out_ptr2 + (x0), tmp62, None)

