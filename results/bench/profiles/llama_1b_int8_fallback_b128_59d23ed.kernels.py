# triton_poi_fused___rshift____to_copy_bitwise_and_bitwise_xor_mul_silu_silu_backward_stack_t_view_4: 5.62 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'x': 262144}, 
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'out_ptr0': '*i16', 'out_ptr1': '*i16', 'out_ptr2': '*i16', 'out_ptr3': '*i16', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused___rshift____to_copy_bitwise_and_bitwise_xor_mul_silu_silu_backward_stack_t_view_4', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 3, 'num_store': 4, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 6291456}},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused___rshift____to_copy_bitwise_and_bitwise_xor_mul_silu_silu_backward_stack_t_view_4(in_ptr0, in_ptr1, in_ptr2, out_ptr0, out_ptr1, out_ptr2, out_ptr3, xnumel, XBLOCK : tl.constexpr):
    xnumel = 262144
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), None)
    tmp6 = tl.load(in_ptr1 + (x0), None).to(tl.float32)
    tmp22 = tl.load(in_ptr2 + (x0), None).to(tl.float32)
    tmp1 = tmp0.to(tl.float32)
    tmp2 = tmp1.to(tl.bfloat16)
    tmp3 = tmp2.to(tl.float32)
    tmp4 = tmp3.to(tl.bfloat16)
    tmp5 = tmp4.to(tl.float32)
    tmp7 = tmp6.to(tl.float32)
    tmp8 = -tmp7
    tmp9 = libdevice.exp(tmp8)
    tmp10 = tl.full([1], 1.0, tl.float32)
    tmp11 = tmp9 + tmp10
    tmp12 = triton.language.div_rn(tmp7, tmp11)
    tmp13 = tmp12.to(tl.float32)
    tmp14 = tmp13.to(tl.bfloat16)
    tmp15 = tmp14.to(tl.float32)
    tmp16 = tmp15.to(tl.bfloat16)
    tmp17 = tmp16.to(tl.float32)
    tmp18 = tmp5 * tmp17
    tmp19 = tmp18.to(tl.bfloat16)
    tmp20 = tmp19.to(tl.float32)
    tmp21 = tmp20.to(tl.bfloat16).to(tl.int16, bitcast=True)
    tmp23 = tmp22.to(tl.bfloat16)
    tmp24 = tmp23.to(tl.float32)
    tmp25 = tmp5 * tmp24
    tmp26 = tmp25.to(tl.bfloat16)
    tmp27 = tmp26.to(tl.float32)
    tmp28 = tmp27.to(tl.float32)
    tmp29 = tl.full([1], 1, tl.int32)
    tmp30 = (tmp29 / tmp11)
    tmp31 = tmp30 * tmp10
    tmp32 = tmp28 * tmp31
    tmp33 = tmp10 - tmp31
    tmp34 = tmp7 * tmp33
    tmp35 = tmp34 + tmp10
    tmp36 = tmp32 * tmp35
    tmp37 = tmp36.to(tl.float32)
    tmp38 = tmp37.to(tl.bfloat16)
    tmp39 = tmp38.to(tl.float32)
    tmp40 = tmp39.to(tl.bfloat16).to(tl.int16, bitcast=True)
    tl.store(out_ptr0 + (x0), tmp21, None)
    tl.store(out_ptr1 + (x0), tmp21, None)
    tl.store(out_ptr2 + (x0), tmp40, None)
    tl.store(out_ptr3 + (x0), tmp40, None)


# triton_poi_fused__to_copy_abs_add_clamp_floor_full_like_gt_index_select_mul_nan_to_num_rsub_silu_sub_view_where_20: 4.97 ms in 16 calls per step


# triton_poi_fused__to_copy_abs_add_clamp_floor_full_like_gt_index_select_mul_nan_to_num_rsub_silu_sub_view_where_20: 4.97 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'x': 134217728}, 
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'in_ptr1': '*bf16', 'out_ptr0': '*bf16', 'out_ptr1': '*fp32', 'out_ptr2': '*i16', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__to_copy_abs_add_clamp_floor_full_like_gt_index_select_mul_nan_to_num_rsub_silu_sub_view_where_20', 'mutated_arg_names': [], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 2, 'num_store': 3, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 2214592512}},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused__to_copy_abs_add_clamp_floor_full_like_gt_index_select_mul_nan_to_num_rsub_silu_sub_view_where_20(in_ptr0, in_ptr1, out_ptr0, out_ptr1, out_ptr2, xnumel, XBLOCK : tl.constexpr):
    xnumel = 92274688
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), None)
    tmp4 = tl.load(in_ptr1 + (x0), None).to(tl.float32)
    tmp1 = tmp0.to(tl.float32)
    tmp2 = tmp1.to(tl.bfloat16)
    tmp3 = tmp2.to(tl.float32)
    tmp5 = tmp4.to(tl.float32)
    tmp6 = -tmp5
    tmp7 = libdevice.exp(tmp6)
    tmp8 = tl.full([1], 1.0, tl.float32)
    tmp9 = tmp7 + tmp8
    tmp10 = triton.language.div_rn(tmp5, tmp9)
    tmp11 = tmp10.to(tl.float32)
    tmp12 = tmp11.to(tl.bfloat16)
    tmp13 = tmp12.to(tl.float32)
    tmp14 = tmp13.to(tl.bfloat16)
    tmp15 = tmp14.to(tl.float32)
    tmp16 = tmp3.to(tl.bfloat16)
    tmp17 = tmp16.to(tl.float32)
    tmp18 = tmp15 * tmp17
    tmp19 = tmp18.to(tl.bfloat16)
    tmp20 = tmp19.to(tl.float32)
    tmp21 = tmp20.to(tl.bfloat16)
    tmp22 = tmp21.to(tl.float32)
    tmp23 = tmp22.to(tl.float32)
    tmp24 = tl_math.abs(tmp23)
    tmp25 = tl.full([1], float("inf"), tl.float32)
    tmp26 = tmp24 == tmp25
    tmp27 = tl.full([1], float("-inf"), tl.float32)
    tmp28 = tmp24 == tmp27
    tmp29 = libdevice.isnan(tmp24).to(tl.int1)
    tmp30 = tl.full([1], 0.0, tl.float32)
    tmp31 = tl.where(tmp29, tmp30, tmp24)
    tmp32 = tl.full([1], -3.4028234663852886e+38, tl.float32)
    tmp33 = tl.where(tmp28, tmp32, tmp31)
    tmp34 = tl.where(tmp26, tmp30, tmp33)
    tmp35 = tmp20.to(tl.bfloat16).to(tl.int16, bitcast=True)
    tl.store(out_ptr0 + (x0), tmp3, None)
    tl.store(out_ptr1 + (x0), tmp34, None)
    tl.store(out_ptr2 + (x0), tmp35, None)


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_9: 3.07 ms in 16 calls per step


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_9: 3.07 ms in 16 calls per step
@triton_heuristics.persistent_reduction(
    size_hints={'x': 16384, 'r0_': 2048},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*fp32', 'in_ptr5': '*fp32', 'ws_ptr': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'RSPLIT_SIZE': 'constexpr', 'NUM_STAGES': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'MixOrderReductionGrid', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_9', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 7, 'num_store': 0, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'RSPLIT_SIZE': 16}
)
@triton.jit
def triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_9(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, ws_ptr, xnumel, r0_numel, XBLOCK : tl.constexpr, RSPLIT_SIZE : tl.constexpr, NUM_STAGES : tl.constexpr):
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
    split_size = min(RSPLIT_SIZE, xnumel - xoffset)
    for _ in tl.range(0, split_size, XBLOCK, num_stages=NUM_STAGES):
        x0 = xindex
        xindex += XBLOCK
        tmp0 = tl.load(in_ptr0 + (r0_1 + 2048*x0), None)
        tmp7 = tl.load(in_ptr1 + (r0_1 + 2048*x0), None)
        tmp15 = tl.load(in_ptr2 + (r0_1 + 2048*x0), None)
        tmp23 = tl.load(in_ptr3 + (r0_1), None, eviction_policy='evict_last')
        tmp25 = tl.load(in_ptr4 + (r0_1 + 2048*x0), None)
        tmp30 = tl.load(in_out_ptr0 + (r0_1 + 2048*x0), None)
        tmp31 = tl.load(in_ptr5 + (x0), None, eviction_policy='evict_last')
        tmp1 = tmp0.to(tl.float32)
        tmp2 = tmp1.to(tl.bfloat16)
        tmp3 = tmp2.to(tl.float32)
        tmp4 = tmp3.to(tl.bfloat16)
        tmp5 = tmp4.to(tl.float32)
        tmp6 = tmp5.to(tl.float32)
        tmp8 = tmp7.to(tl.float32)
        tmp9 = tmp8.to(tl.bfloat16)
        tmp10 = tmp9.to(tl.float32)
        tmp11 = tmp10.to(tl.bfloat16)
        tmp12 = tmp11.to(tl.float32)
        tmp13 = tmp12.to(tl.float32)
        tmp14 = tmp6 + tmp13
        tmp16 = tmp15.to(tl.float32)
        tmp17 = tmp16.to(tl.bfloat16)
        tmp18 = tmp17.to(tl.float32)
        tmp19 = tmp18.to(tl.bfloat16)
        tmp20 = tmp19.to(tl.float32)
        tmp21 = tmp20.to(tl.float32)
        tmp22 = tmp14 + tmp21
        tmp24 = tmp22 * tmp23
        tmp26 = tmp24 * tmp25
        tmp27 = tl.broadcast_to(tmp26, [XBLOCK, R0_BLOCK])
        tmp29 = tl.sum(tmp27, 1)[:, None].to(tl.float32)
        tmp32 = tmp24 * tmp31
        tmp33 = tmp30 + tmp32
        tmp34 = tl.full([1, 1], -0.5, tl.float32)
        tmp35 = tmp29 * tmp34
        tmp36 = tmp31 * tmp31
        tmp37 = tmp36 * tmp31
        tmp38 = tmp35 * tmp37
        tmp39 = tl.full([1, 1], 0.00048828125, tl.float32)
        tmp40 = tmp38 * tmp39
        tmp41 = tl.full([1, 1], 2.0, tl.float32)
        tmp42 = tmp25 * tmp41
        tmp43 = tmp40 * tmp42
        tmp44 = tmp33 + tmp43
        tmp45 = tmp25 * tmp31
        tmp46 = tmp22 * tmp45
        tl.store(in_out_ptr0 + (r0_1 + 2048*x0), tmp44, None)
        tmp47 = tl.sum(tmp46, 0)
        tmp48 = accum0 + tmp47
        accum0 = tmp48
    tl.store(ws_ptr + (tl.program_id(0) + 0 * tl.num_programs(0)) * r0_numel + r0_index, accum0, r0_mask)


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_6: 2.88 ms in 16 calls per step


# triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_6: 2.88 ms in 16 calls per step
@triton_heuristics.persistent_reduction(
    size_hints={'x': 16384, 'r0_': 2048},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*bf16', 'in_ptr5': '*fp32', 'in_ptr6': '*fp32', 'out_ptr1': '*fp32', 'ws_ptr': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'RSPLIT_SIZE': 'constexpr', 'NUM_STAGES': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'MixOrderReductionGrid', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_6', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 7, 'num_store': 0, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'RSPLIT_SIZE': 16}
)
@triton.jit
def triton_per_fused__to_copy_add_div_expand_mul_pow_sum_view_6(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, in_ptr6, out_ptr1, ws_ptr, xnumel, r0_numel, XBLOCK : tl.constexpr, RSPLIT_SIZE : tl.constexpr, NUM_STAGES : tl.constexpr):
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
    split_size = min(RSPLIT_SIZE, xnumel - xoffset)
    for _ in tl.range(0, split_size, XBLOCK, num_stages=NUM_STAGES):
        x0 = xindex
        xindex += XBLOCK
        tmp0 = tl.load(in_ptr0 + (r0_1 + 2048*x0), None)
        tmp7 = tl.load(in_ptr1 + (r0_1 + 2048*x0), None)
        tmp15 = tl.load(in_ptr2 + (r0_1), None, eviction_policy='evict_last')
        tmp17 = tl.load(in_ptr3 + (r0_1 + 2048*x0), None)
        tmp18 = tl.load(in_ptr4 + (r0_1 + 2048*x0), None).to(tl.float32)
        tmp27 = tl.load(in_ptr5 + (r0_1 + 2048*x0), None)
        tmp28 = tl.load(in_ptr6 + (x0), None, eviction_policy='evict_last')
        tmp1 = tmp0.to(tl.float32)
        tmp2 = tmp1.to(tl.bfloat16)
        tmp3 = tmp2.to(tl.float32)
        tmp4 = tmp3.to(tl.bfloat16)
        tmp5 = tmp4.to(tl.float32)
        tmp6 = tmp5.to(tl.float32)
        tmp8 = tmp7.to(tl.float32)
        tmp9 = tmp8.to(tl.bfloat16)
        tmp10 = tmp9.to(tl.float32)
        tmp11 = tmp10.to(tl.bfloat16)
        tmp12 = tmp11.to(tl.float32)
        tmp13 = tmp12.to(tl.float32)
        tmp14 = tmp6 + tmp13
        tmp16 = tmp14 * tmp15
        tmp19 = tmp18.to(tl.bfloat16)
        tmp20 = tmp19.to(tl.float32)
        tmp21 = tmp20.to(tl.float32)
        tmp22 = tmp17 + tmp21
        tmp23 = tmp16 * tmp22
        tmp24 = tl.broadcast_to(tmp23, [XBLOCK, R0_BLOCK])
        tmp26 = tl.sum(tmp24, 1)[:, None].to(tl.float32)
        tmp29 = tmp16 * tmp28
        tmp30 = tmp27 + tmp29
        tmp31 = tl.full([1, 1], -0.5, tl.float32)
        tmp32 = tmp26 * tmp31
        tmp33 = tmp28 * tmp28
        tmp34 = tmp33 * tmp28
        tmp35 = tmp32 * tmp34
        tmp36 = tl.full([1, 1], 0.00048828125, tl.float32)
        tmp37 = tmp35 * tmp36
        tmp38 = tl.full([1, 1], 2.0, tl.float32)
        tmp39 = tmp22 * tmp38
        tmp40 = tmp37 * tmp39
        tmp41 = tmp30 + tmp40
        tmp42 = tmp22 * tmp28
        tmp43 = tmp14 * tmp42
        tl.store(out_ptr1 + (r0_1 + 2048*x0), tmp41, None)
        tmp44 = tl.sum(tmp43, 0)
        tmp45 = accum0 + tmp44
        accum0 = tmp45
    tl.store(ws_ptr + (tl.program_id(0) + 0 * tl.num_programs(0)) * r0_numel + r0_index, accum0, r0_mask)


# triton_red_fused___rshift____to_copy_abs_add_bitwise_and_isnan_mean_mul_nan_to_num_pow_rsqrt_view_where_14: 2.40 ms in 16 calls per step


# triton_red_fused___rshift____to_copy_abs_add_bitwise_and_isnan_mean_mul_nan_to_num_pow_rsqrt_view_where_14: 2.40 ms in 16 calls per step
@triton_heuristics.reduction(
    size_hints={'x': 16384, 'r0_': 2048},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'out_ptr0': '*bf16', 'out_ptr3': '*fp32', 'out_ptr4': '*i1', 'out_ptr5': '*i1', 'out_ptr6': '*i16', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused___rshift____to_copy_abs_add_bitwise_and_isnan_mean_mul_nan_to_num_pow_rsqrt_view_where_14', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 5, 'num_store': 6, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 196608, 'r0_': 1006641152}}
)
@triton.jit
def triton_red_fused___rshift____to_copy_abs_add_bitwise_and_isnan_mean_mul_nan_to_num_pow_rsqrt_view_where_14(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, out_ptr0, out_ptr3, out_ptr4, out_ptr5, out_ptr6, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
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
    _tmp11 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp4 = tl.load(in_ptr1 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp1 = tmp0.to(tl.float32)
        tmp2 = tmp1.to(tl.bfloat16)
        tmp3 = tmp2.to(tl.float32)
        tmp5 = tmp3.to(tl.bfloat16)
        tmp6 = tmp5.to(tl.float32)
        tmp7 = tmp6.to(tl.float32)
        tmp8 = tmp4 + tmp7
        tmp9 = tmp8 * tmp8
        tmp10 = tl.broadcast_to(tmp9, [XBLOCK, R0_BLOCK])
        tmp12 = _tmp11 + tmp10
        _tmp11 = tl.where(r0_mask, tmp12, _tmp11)
        tl.store(out_ptr0 + (r0_1 + 2048*x0), tmp3, r0_mask)
    tmp11 = tl.sum(_tmp11, 1)[:, None]
    tmp13 = tl.full([1, 1], 2048.0, tl.float32)
    tmp14 = triton.language.div_rn(tmp11, tmp13)
    tmp15 = tl.full([1, 1], 1e-06, tl.float32)
    tmp16 = tmp14 + tmp15
    tmp17 = libdevice.rsqrt(tmp16)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp17, None)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp18 = tl.load(in_ptr2 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp19 = tl.load(in_ptr1 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp20 = tl.load(out_ptr0 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp21 = tmp20.to(tl.bfloat16)
        tmp22 = tmp21.to(tl.float32)
        tmp23 = tmp22.to(tl.float32)
        tmp24 = tmp19 + tmp23
        tmp25 = tmp24 * tmp17
        tmp26 = tmp18 * tmp25
        tmp27 = libdevice.isnan(tmp26).to(tl.int1)
        tmp28 = tmp26.to(tl.int32, bitcast=True)
        tmp29 = tl.full([1, 1], 16, tl.int32)
        tmp30 = tmp28 >> tmp29
        tmp31 = tl.full([1, 1], 1, tl.int32)
        tmp32 = tmp30 & tmp31
        tmp33 = tl.full([1, 1], 32767, tl.int32)
        tmp34 = tmp32 + tmp33
        tmp35 = tmp28 + tmp34
        tmp36 = tl.full([1, 1], -65536, tl.int32)
        tmp37 = tmp35 & tmp36
        tmp38 = tmp37.to(tl.float32, bitcast=True)
        tmp39 = tl.where(tmp27, tmp26, tmp38)
        tmp40 = tmp39.to(tl.float32)
        tmp41 = tmp40.to(tl.bfloat16)
        tmp42 = tmp41.to(tl.float32)
        tmp43 = tmp42.to(tl.bfloat16)
        tmp44 = tmp43.to(tl.float32)
        tmp45 = tmp44.to(tl.float32)
        tmp46 = tl_math.abs(tmp45)
        tmp47 = libdevice.isnan(tmp46).to(tl.int1)
        tmp48 = tl.full([1, 1], 0.0, tl.float32)
        tmp49 = tl.where(tmp47, tmp48, tmp46)
        tmp50 = tl.full([1, 1], float("-inf"), tl.float32)
        tmp51 = tmp46 == tmp50
        tmp52 = tl.full([1, 1], float("inf"), tl.float32)
        tmp53 = tmp46 == tmp52
        tmp54 = tmp42.to(tl.bfloat16).to(tl.int16, bitcast=True)
        tl.store(out_ptr3 + (r0_1 + 2048*x0), tmp49, r0_mask)
        tl.store(out_ptr4 + (r0_1 + 2048*x0), tmp51, r0_mask)
        tl.store(out_ptr5 + (r0_1 + 2048*x0), tmp53, r0_mask)
        tl.store(out_ptr6 + (r0_1 + 2048*x0), tmp54, r0_mask)

