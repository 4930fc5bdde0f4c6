# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clone_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_silu_backward_t_unsqueeze_view_where_zeros_6: 8.03 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 8192, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'in_ptr3': '*bf16', 'in_ptr4': '*fp32', 'out_ptr0': '*fp8e4nv', 'out_ptr2': '*fp8e4nv', 'out_ptr3': '*fp32', 'out_ptr4': '*fp8e4nv', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clone_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_silu_backward_t_unsqueeze_view_where_zeros_6', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 5, 'num_store': 4, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 1476395008, 'x': 369098752}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clone_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_silu_backward_t_unsqueeze_view_where_zeros_6(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, out_ptr2, out_ptr3, out_ptr4, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
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
    tmp21 = tl.load(in_ptr2 + (0))
    tmp22 = tl.broadcast_to(tmp21, [1, 1])
    tmp29 = tl.load(in_ptr3 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
    tmp38 = tl.load(in_ptr4 + (0))
    tmp39 = tl.broadcast_to(tmp38, [1, 1])
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
    tmp23 = tmp20 * tmp22
    tmp24 = tl.full([1, 1], -448.0, tl.float32)
    tmp25 = triton_helpers.maximum(tmp23, tmp24)
    tmp26 = tl.full([1, 1], 448.0, tl.float32)
    tmp27 = triton_helpers.minimum(tmp25, tmp26)
    tmp28 = tmp27.to(tl.float8e4nv)
    tmp30 = tmp29.to(tl.bfloat16)
    tmp31 = tmp30.to(tl.float32)
    tmp32 = tmp31 * tmp11
    tmp33 = tmp32.to(tl.bfloat16)
    tmp34 = tmp33.to(tl.float32)
    tmp35 = tmp34.to(tl.bfloat16)
    tmp36 = tmp35.to(tl.float32)
    tmp37 = tmp36.to(tl.float32)
    tmp40 = tl.full([1, 1], 0.0, tl.float32)
    tmp41 = tmp39 > tmp40
    tmp42 = tmp39 == tmp39
    tmp43 = tl_math.abs(tmp39)
    tmp44 = tl.full([1, 1], float("inf"), tl.float32)
    tmp45 = tmp43 != tmp44
    tmp46 = tmp42 & tmp45
    tmp47 = tmp41 & tmp46
    tmp48 = tl.where(tmp47, tmp39, tmp4)
    tmp49 = triton.language.div_rn(tmp26, tmp48)
    tmp50 = tl.full([1, 1], 1.1754943508222875e-38, tl.float32)
    tmp51 = triton_helpers.maximum(tmp49, tmp50)
    tmp52 = tl.full([1, 1], 1.7014118346046923e+38, tl.float32)
    tmp53 = triton_helpers.minimum(tmp51, tmp52)
    tmp54 = tl.where(tmp47, tmp53, tmp4)
    tmp55 = tmp37 * tmp54
    tmp56 = triton_helpers.maximum(tmp55, tmp24)
    tmp57 = triton_helpers.minimum(tmp56, tmp26)
    tmp58 = tmp57.to(tl.float8e4nv)
    tmp59 = tmp31 * tmp14
    tmp60 = tmp59.to(tl.bfloat16)
    tmp61 = tmp60.to(tl.float32)
    tmp62 = tmp61.to(tl.float32)
    tmp63 = tl.full([1, 1], 1, tl.int32)
    tmp64 = (tmp63 / tmp5)
    tmp65 = tmp64 * tmp4
    tmp66 = tmp62 * tmp65
    tmp67 = tmp4 - tmp65
    tmp68 = tmp1 * tmp67
    tmp69 = tmp68 + tmp4
    tmp70 = tmp66 * tmp69
    tmp71 = tmp70.to(tl.float32)
    tmp72 = tmp71.to(tl.bfloat16)
    tmp73 = tmp72.to(tl.float32)
    tmp74 = tmp73.to(tl.bfloat16)
    tmp75 = tmp74.to(tl.float32)
    tmp76 = tmp75.to(tl.float32)
    tmp77 = tl_math.abs(tmp76)
    tmp78 = tmp77 != tmp44
    tmp79 = tmp76 == tmp76
    tmp80 = tmp79 & tmp78
    tmp81 = tl.where(tmp80, tmp77, tmp40)
    tl.store(out_ptr0 + (x1 + 16384*y0), tmp28, ymask)
    tl.store(out_ptr2 + (y0 + 5632*x1), tmp58, ymask)
    tl.store(out_ptr3 + (y0 + 5632*x1), tmp81, ymask)
    tl.store(out_ptr4 + (x1 + 16384*y0), tmp58, ymask)


# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clone_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_silu_backward_t_unsqueeze_view_where_10: 3.97 ms in 16 calls per step


# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clone_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_silu_backward_t_unsqueeze_view_where_10: 3.97 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 8192, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'in_ptr3': '*fp32', 'out_ptr1': '*fp8e4nv', 'out_ptr2': '*fp8e4nv', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clone_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_silu_backward_t_unsqueeze_view_where_10', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 2, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 738197504, 'x': 184549376}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clone_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_silu_backward_t_unsqueeze_view_where_10(in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr1, out_ptr2, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
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
    tmp30 = tl.load(in_ptr3 + (0))
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
    tmp32 = tl.full([1, 1], 0.0, tl.float32)
    tmp33 = tmp31 > tmp32
    tmp34 = tmp31 == tmp31
    tmp35 = tl_math.abs(tmp31)
    tmp36 = tl.full([1, 1], float("inf"), tl.float32)
    tmp37 = tmp35 != tmp36
    tmp38 = tmp34 & tmp37
    tmp39 = tmp33 & tmp38
    tmp40 = tl.where(tmp39, tmp31, tmp14)
    tmp41 = tl.full([1, 1], 448.0, tl.float32)
    tmp42 = triton.language.div_rn(tmp41, tmp40)
    tmp43 = tl.full([1, 1], 1.1754943508222875e-38, tl.float32)
    tmp44 = triton_helpers.maximum(tmp42, tmp43)
    tmp45 = tl.full([1, 1], 1.7014118346046923e+38, tl.float32)
    tmp46 = triton_helpers.minimum(tmp44, tmp45)
    tmp47 = tl.where(tmp39, tmp46, tmp14)
    tmp48 = tmp29 * tmp47
    tmp49 = tl.full([1, 1], -448.0, tl.float32)
    tmp50 = triton_helpers.maximum(tmp48, tmp49)
    tmp51 = triton_helpers.minimum(tmp50, tmp41)
    tmp52 = tmp51.to(tl.float8e4nv)
    tl.store(out_ptr1 + (y0 + 5632*x1), tmp52, ymask)
    tl.store(out_ptr2 + (x1 + 16384*y0), tmp52, ymask)


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_17: 3.19 ms in 16 calls per step


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_17: 3.19 ms in 16 calls per step
@triton_heuristics.persistent_reduction(
    size_hints={'x': 16384, 'r0_': 2048},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'in_ptr3': '*fp32', 'in_ptr4': '*fp32', 'in_ptr5': '*fp32', 'in_ptr6': '*bf16', 'in_ptr7': '*bf16', 'in_ptr8': '*bf16', 'in_ptr9': '*fp32', 'ws_ptr': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'RSPLIT_SIZE': 'constexpr', 'NUM_STAGES': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]], (11,): [['tt.divisibility', 16]], (12,): [['tt.divisibility', 16]], (13,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'MixOrderReductionGrid', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_17', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 11, 'num_store': 0, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'RSPLIT_SIZE': 16}
)
@triton.jit
def triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_17(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, in_ptr6, in_ptr7, in_ptr8, in_ptr9, ws_ptr, xnumel, r0_numel, XBLOCK : tl.constexpr, RSPLIT_SIZE : tl.constexpr, NUM_STAGES : tl.constexpr):
    xnumel = 16384
    r0_numel = 2048
    R0_BLOCK: tl.constexpr = 2048
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * RSPLIT_SIZE
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    accum0 = tl.full([R0_BLOCK], 0, tl.float32)[None, :]
    accum1 = tl.full([R0_BLOCK], 0, tl.float32)[None, :]
    split_size = min(RSPLIT_SIZE, xnumel - xoffset)
    for _ in tl.range(0, split_size, XBLOCK, num_stages=NUM_STAGES):
        x0 = xindex
        xindex += XBLOCK
        tmp0 = tl.load(in_ptr0 + (r0_1 + 2048*x0), None).to(tl.float32)
        tmp4 = tl.load(in_ptr1 + (r0_1 + 2048*x0), None).to(tl.float32)
        tmp9 = tl.load(in_ptr2 + (r0_1 + 2048*x0), None).to(tl.float32)
        tmp14 = tl.load(in_ptr3 + (r0_1), None, eviction_policy='evict_last')
        tmp16 = tl.load(in_ptr4 + (r0_1 + 2048*x0), None)
        tmp21 = tl.load(in_out_ptr0 + (r0_1 + 2048*x0), None)
        tmp22 = tl.load(in_ptr5 + (x0), None, eviction_policy='evict_last')
        tmp36 = tl.load(in_ptr6 + (r0_1 + 2048*x0), None).to(tl.float32)
        tmp40 = tl.load(in_ptr7 + (r0_1 + 2048*x0), None).to(tl.float32)
        tmp45 = tl.load(in_ptr8 + (r0_1 + 2048*x0), None).to(tl.float32)
        tmp50 = tl.load(in_ptr9 + (x0), None, eviction_policy='evict_last')
        tmp1 = tmp0.to(tl.bfloat16)
        tmp2 = tmp1.to(tl.float32)
        tmp3 = tmp2.to(tl.float32)
        tmp5 = tmp4.to(tl.bfloat16)
        tmp6 = tmp5.to(tl.float32)
        tmp7 = tmp6.to(tl.float32)
        tmp8 = tmp3 + tmp7
        tmp10 = tmp9.to(tl.bfloat16)
        tmp11 = tmp10.to(tl.float32)
        tmp12 = tmp11.to(tl.float32)
        tmp13 = tmp8 + tmp12
        tmp15 = tmp13 * tmp14
        tmp17 = tmp15 * tmp16
        tmp18 = tl.broadcast_to(tmp17, [XBLOCK, R0_BLOCK])
        tmp20 = tl.sum(tmp18, 1)[:, None].to(tl.float32)
        tmp23 = tmp15 * tmp22
        tmp24 = tmp21 + tmp23
        tmp25 = tl.full([1, 1], -0.5, tl.float32)
        tmp26 = tmp20 * tmp25
        tmp27 = tmp22 * tmp22
        tmp28 = tmp27 * tmp22
        tmp29 = tmp26 * tmp28
        tmp30 = tl.full([1, 1], 0.00048828125, tl.float32)
        tmp31 = tmp29 * tmp30
        tmp32 = tl.full([1, 1], 2.0, tl.float32)
        tmp33 = tmp16 * tmp32
        tmp34 = tmp31 * tmp33
        tmp35 = tmp24 + tmp34
        tmp37 = tmp36.to(tl.bfloat16)
        tmp38 = tmp37.to(tl.float32)
        tmp39 = tmp38.to(tl.float32)
        tmp41 = tmp40.to(tl.bfloat16)
        tmp42 = tmp41.to(tl.float32)
        tmp43 = tmp42.to(tl.float32)
        tmp44 = tmp39 + tmp43
        tmp46 = tmp45.to(tl.bfloat16)
        tmp47 = tmp46.to(tl.float32)
        tmp48 = tmp47.to(tl.float32)
        tmp49 = tmp16 + tmp48
        tmp51 = tmp49 * tmp50
        tmp52 = tmp44 * tmp51
        tmp53 = tmp16 * tmp22
        tmp54 = tmp13 * tmp53
        tl.store(in_out_ptr0 + (r0_1 + 2048*x0), tmp35, None)
        tmp55 = tl.sum(tmp52, 0)
        tmp56 = accum0 + tmp55
        accum0 = tmp56
        tmp57 = tl.sum(tmp54, 0)
        tmp58 = accum1 + tmp57
        accum1 = tmp58
    tl.store(ws_ptr + (tl.program_id(0) + 0 * tl.num_programs(0)) * r0_numel + r0_index, accum0, r0_mask)
    tl.store(ws_ptr + (tl.program_id(0) + 1 * tl.num_programs(0)) * r0_numel + r0_index, accum1, r0_mask)


# triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_5: 2.53 ms in 16 calls per step


# triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_5: 2.53 ms in 16 calls per step
@triton_heuristics.reduction(
    size_hints={'x': 32, 'r0_': 8192},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_5', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 2, 'num_store': 1, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 256, 'r0_': 1048576}}
)
@triton.jit
def triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_5(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 32
    r0_numel = 8192
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp29 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp3 = tl.load(in_ptr1 + (r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp1 = tmp0.to(tl.bfloat16)
        tmp2 = tmp1.to(tl.float32)
        tmp4 = tmp3.to(tl.float32)
        tmp5 = -tmp4
        tmp6 = libdevice.exp(tmp5)
        tmp7 = tl.full([1, 1], 1.0, tl.float32)
        tmp8 = tmp6 + tmp7
        tmp9 = triton.language.div_rn(tmp4, tmp8)
        tmp10 = tmp9.to(tl.float32)
        tmp11 = tmp10.to(tl.bfloat16)
        tmp12 = tmp11.to(tl.float32)
        tmp13 = tmp12.to(tl.bfloat16)
        tmp14 = tmp13.to(tl.float32)
        tmp15 = tmp2 * tmp14
        tmp16 = tmp15.to(tl.bfloat16)
        tmp17 = tmp16.to(tl.float32)
        tmp18 = tmp17.to(tl.bfloat16)
        tmp19 = tmp18.to(tl.float32)
        tmp20 = tmp19.to(tl.float32)
        tmp21 = tmp20 == tmp20
        tmp22 = tl_math.abs(tmp20)
        tmp23 = tl.full([1, 1], float("inf"), tl.float32)
        tmp24 = tmp22 != tmp23
        tmp25 = tmp21 & tmp24
        tmp26 = tl.full([1, 1], 0.0, tl.float32)
        tmp27 = tl.where(tmp25, tmp22, tmp26)
        tmp28 = tl.broadcast_to(tmp27, [XBLOCK, R0_BLOCK])
        tmp30 = triton_helpers.maximum(_tmp29, tmp28)
        _tmp29 = tl.where(r0_mask & xmask, tmp30, _tmp29)
    tmp29 = triton_helpers.max2(_tmp29, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp29, xmask)


# triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_13: 2.45 ms in 16 calls per step


# triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_13: 2.45 ms in 16 calls per step
@triton_heuristics.reduction(
    size_hints={'x': 512, 'r0_': 262144},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_13', 'mutated_arg_names': [], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 2, 'num_store': 1, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 4096, 'r0_': 369098752}}
)
@triton.jit
def triton_red_fused__to_copy_abs_amax_eq_mul_ne_silu_view_where_zeros_13(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
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
    _tmp29 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp12 = tl.load(in_ptr1 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
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
        tmp21 = tmp20 == tmp20
        tmp22 = tl_math.abs(tmp20)
        tmp23 = tl.full([1, 1], float("inf"), tl.float32)
        tmp24 = tmp22 != tmp23
        tmp25 = tmp21 & tmp24
        tmp26 = tl.full([1, 1], 0.0, tl.float32)
        tmp27 = tl.where(tmp25, tmp22, tmp26)
        tmp28 = tl.broadcast_to(tmp27, [XBLOCK, R0_BLOCK])
        tmp30 = triton_helpers.maximum(_tmp29, tmp28)
        _tmp29 = tl.where(r0_mask & xmask, tmp30, _tmp29)
    tmp29 = triton_helpers.max2(_tmp29, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp29, xmask)

