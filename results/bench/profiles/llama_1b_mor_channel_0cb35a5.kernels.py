# triton_per_fused_abs_bitwise_not_masked_fill_sum_43: 38.89 ms in 16 calls per step
@triton_heuristics.persistent_reduction(
    size_hints={'x': 131072, 'r0_': 1024},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*i1', 'in_ptr1': '*fp32', 'out_ptr0': '*fp64', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused_abs_bitwise_not_masked_fill_sum_43', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 2, 'num_store': 1, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 2097152, 'r0_': 0}}
)
@triton.jit
def triton_per_fused_abs_bitwise_not_masked_fill_sum_43(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 131072
    r0_numel = 704
    R0_BLOCK: tl.constexpr = 1024
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = r0_index < r0_numel
    roffset = r0_offset
    rindex = r0_index
    r0_2 = r0_index
    x0 = (xindex % 512)
    x1 = xindex // 512
    x3 = xindex
    tmp0 = tl.load(in_ptr0 + (11*x0 + 5632*(((r0_2 + 704*x1) % 16384)) + ((r0_2 + 704*x1) // 16384)), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.int1)
    tmp2 = tl.load(in_ptr1 + (11*x0 + 5632*(((r0_2 + 704*x1) % 16384)) + ((r0_2 + 704*x1) // 16384)), r0_mask, eviction_policy='evict_last', other=0.0)
    tmp1 = tmp0 == 0
    tmp3 = tl_math.abs(tmp2)
    tmp4 = tl.full([1, 1], 0.0, tl.float32)
    tmp5 = tl.where(tmp1, tmp4, tmp3)
    tmp6 = tmp5.to(tl.float64)
    tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
    tmp9 = tl.where(r0_mask, tmp7, 0)
    tmp10 = tl.sum(tmp9, 1)[:, None].to(tl.float64)
    tl.store(out_ptr0 + (x3), tmp10, None)


# triton_per_fused_abs_bitwise_not_masked_fill_sum_43: 38.89 ms in 16 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()


# triton_red_fused__scaled_mm__to_copy_abs_amax_clamp_clamp_min_clone_div_eq_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_28: 11.16 ms in 16 calls per step
@triton_heuristics.reduction(
    size_hints={'x': 16384, 'r0_': 8192},
    reduction_hint=ReductionHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'in_ptr3': '*bf16', 'out_ptr0': '*fp32', 'out_ptr1': '*fp8e4nv', 'out_ptr2': '*fp8e4nv', 'out_ptr3': '*bf16', 'out_ptr5': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused__scaled_mm__to_copy_abs_amax_clamp_clamp_min_clone_div_eq_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_28', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 5, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 369229824, 'r0_': 1476417536}}
)
@triton.jit
def triton_red_fused__scaled_mm__to_copy_abs_amax_clamp_clamp_min_clone_div_eq_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_28(in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr0, out_ptr1, out_ptr2, out_ptr3, out_ptr5, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 16384
    r0_numel = 5632
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp60 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 5632*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp3 = tl.load(in_ptr1 + (r0_1 + 5632*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp21 = tl.load(in_ptr2 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp31 = tl.load(in_ptr3 + (r0_1 + 5632*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
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
        tmp22 = tmp20 * tmp21
        tmp23 = tl.full([1, 1], -448.0, tl.float32)
        tmp24 = tl.where((tmp22 > tmp23) | (tmp22 != tmp22), tmp22, tmp23)
        tmp25 = tl.full([1, 1], 448.0, tl.float32)
        tmp26 = tl.where((tmp24 < tmp25) | (tmp24 != tmp24), tmp24, tmp25)
        tmp27 = tmp26.to(tl.float8e4nv)
        tmp28 = tmp27.to(tl.float32)
        tmp29 = triton.language.div_rn(tmp28, tmp21)
        tmp30 = tmp29 - tmp20
        tmp32 = tmp31.to(tl.bfloat16)
        tmp33 = tmp32.to(tl.float32)
        tmp34 = tmp2 * tmp33
        tmp35 = tmp34.to(tl.bfloat16)
        tmp36 = tmp35.to(tl.float32)
        tmp37 = tmp36.to(tl.float32)
        tmp38 = tl.full([1, 1], 1, tl.int32)
        tmp39 = (tmp38 / tmp8)
        tmp40 = tmp39 * tmp7
        tmp41 = tmp37 * tmp40
        tmp42 = tmp7 - tmp40
        tmp43 = tmp4 * tmp42
        tmp44 = tmp43 + tmp7
        tmp45 = tmp41 * tmp44
        tmp46 = tmp45.to(tl.float32)
        tmp47 = tmp46.to(tl.bfloat16)
        tmp48 = tmp47.to(tl.float32)
        tmp49 = tmp48.to(tl.bfloat16)
        tmp50 = tmp49.to(tl.float32)
        tmp51 = tmp50.to(tl.float32)
        tmp52 = tl_math.abs(tmp51)
        tmp53 = tl.full([1, 1], float("inf"), tl.float32)
        tmp54 = tmp52 != tmp53
        tmp55 = tmp51 == tmp51
        tmp56 = tmp55 & tmp54
        tmp57 = tl.full([1, 1], 0.0, tl.float32)
        tmp58 = tl.where(tmp56, tmp52, tmp57)
        tmp59 = tl.broadcast_to(tmp58, [XBLOCK, R0_BLOCK])
        tmp61 = tl.where((_tmp60 > tmp59) | (_tmp60 != _tmp60), _tmp60, tmp59)
        _tmp60 = tl.where(r0_mask, tmp61, _tmp60)
        tl.store(out_ptr0 + (r0_1 + 5632*x0), tmp30, r0_mask)
        tl.store(out_ptr1 + (x0 + 16384*r0_1), tmp27, r0_mask)
        tl.store(out_ptr2 + (x0 + 16384*r0_1), tmp27, r0_mask)
        tl.store(out_ptr3 + (r0_1 + 5632*x0), tmp17, r0_mask)
    tmp60 = triton_helpers.max2(_tmp60, 1)[:, None]
    tl.store(out_ptr5 + (x0), tmp60, None)


# triton_red_fused__scaled_mm__to_copy_abs_amax_clamp_clamp_min_clone_div_eq_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_28: 11.16 ms in 16 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()


# triton_poi_fused__scaled_mm__to_copy_clamp_clamp_min_clone_div_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_41: 8.12 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 8192, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'in_ptr3': '*fp32', 'out_ptr1': '*i1', 'out_ptr2': '*bf16', 'out_ptr3': '*fp8e4nv', 'out_ptr4': '*fp8e4nv', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_clamp_clamp_min_clone_div_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_41', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 5, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 1660966912, 'x': 369098752}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_clamp_clamp_min_clone_div_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_41(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr1, out_ptr2, out_ptr3, out_ptr4, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
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
    tmp30 = tl.load(in_ptr3 + (y0), ymask, eviction_policy='evict_last')
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
    tmp31 = tmp29 * tmp30
    tmp32 = tl.full([1, 1], -448.0, tl.float32)
    tmp33 = tl.where((tmp31 > tmp32) | (tmp31 != tmp31), tmp31, tmp32)
    tmp34 = tl.full([1, 1], 448.0, tl.float32)
    tmp35 = tl.where((tmp33 < tmp34) | (tmp33 != tmp33), tmp33, tmp34)
    tmp36 = tmp35.to(tl.float8e4nv)
    tmp37 = tmp36.to(tl.float32)
    tmp38 = triton.language.div_rn(tmp37, tmp30)
    tmp39 = tmp38 - tmp29
    tmp40 = triton.language.div_rn(tmp39, tmp29)
    tmp41 = tl.full([1, 1], 0.0, tl.float32)
    tmp42 = tmp29 != tmp41
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (y0 + 5632*x1), tmp40, ymask)
    tl.store(out_ptr1 + (y0 + 5632*x1), tmp42, ymask)
    tl.store(out_ptr2 + (y0 + 5632*x1), tmp26, ymask)
    tl.store(out_ptr3 + (x1 + 16384*y0), tmp36, ymask)
    tl.store(out_ptr4 + (x1 + 16384*y0), tmp36, ymask)


# triton_poi_fused__scaled_mm__to_copy_clamp_clamp_min_clone_div_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_41: 8.12 ms in 16 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()


# triton_poi_fused__scaled_mm__to_copy_abs_clamp_clamp_min_clone_div_eq_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_38: 7.00 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'x': 134217728}, 
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'in_ptr3': '*fp32', 'out_ptr1': '*i1', 'out_ptr2': '*bf16', 'out_ptr3': '*fp32', 'out_ptr4': '*fp8e4nv', 'out_ptr5': '*fp8e4nv', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_abs_clamp_clamp_min_clone_div_eq_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_38', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 6, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 2768240640}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_abs_clamp_clamp_min_clone_div_eq_gt_le_masked_fill_mul_ne_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_38(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr1, out_ptr2, out_ptr3, out_ptr4, out_ptr5, xnumel, XBLOCK : tl.constexpr):
    xnumel = 92274688
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x2 = xindex
    x1 = xindex // 5632
    tmp0 = tl.load(in_ptr0 + (x2), None).to(tl.float32)
    tmp3 = tl.load(in_ptr1 + (x2), None).to(tl.float32)
    tmp10 = tl.load(in_ptr2 + (x2), None).to(tl.float32)
    tmp30 = tl.load(in_ptr3 + (x1), None, eviction_policy='evict_last')
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
    tmp14 = tl.full([1], 1.0, tl.float32)
    tmp15 = tmp13 + tmp14
    tmp16 = tl.full([1], 1, tl.int32)
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
    tmp31 = tmp29 * tmp30
    tmp32 = tl.full([1], -448.0, tl.float32)
    tmp33 = tl.where((tmp31 > tmp32) | (tmp31 != tmp31), tmp31, tmp32)
    tmp34 = tl.full([1], 448.0, tl.float32)
    tmp35 = tl.where((tmp33 < tmp34) | (tmp33 != tmp33), tmp33, tmp34)
    tmp36 = tmp35.to(tl.float8e4nv)
    tmp37 = tmp36.to(tl.float32)
    tmp38 = triton.language.div_rn(tmp37, tmp30)
    tmp39 = tmp38 - tmp29
    tmp40 = triton.language.div_rn(tmp39, tmp29)
    tmp41 = tl.full([1], 0.0, tl.float32)
    tmp42 = tmp29 != tmp41
    tmp43 = tl_math.abs(tmp29)
    tmp44 = tl.full([1], float("inf"), tl.float32)
    tmp45 = tmp43 != tmp44
    tmp46 = tmp29 == tmp29
    tmp47 = tmp46 & tmp45
    tmp48 = tl.where(tmp47, tmp43, tmp41)
    tl.store(in_out_ptr0 + (x2), tmp40, None)
    tl.store(out_ptr1 + (x2), tmp42, None)
    tl.store(out_ptr2 + (x2), tmp26, None)
    tl.store(out_ptr3 + (x2), tmp48, None)
    tl.store(out_ptr4 + (x2), tmp36, None)
    tl.store(out_ptr5 + (x2), tmp36, None)


# triton_poi_fused__scaled_mm__to_copy__unsafe_view_add_clamp_clamp_min_clone_div_gt_le_masked_fill_mul_reciprocal_scalar_tensor_sub_t_transpose_unsqueeze_view_where_zeros_like_62: 6.31 ms in 32 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 16384, 'x': 2048}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*fp32', 'out_ptr0': '*fp32', 'out_ptr1': '*fp8e4nv', 'out_ptr2': '*fp8e4nv', 'out_ptr3': '*bf16', 'out_ptr4': '*fp32', 'out_ptr5': '*fp8e4nv', 'out_ptr6': '*fp8e4nv', 'out_ptr7': '*bf16', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]], (11,): [['tt.divisibility', 16]], (12,): [['tt.divisibility', 16]], (13,): [['tt.divisibility', 16]], (14,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy__unsafe_view_add_clamp_clamp_min_clone_div_gt_le_masked_fill_mul_reciprocal_scalar_tensor_sub_t_transpose_unsqueeze_view_where_zeros_like_62', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 5, 'num_store': 8, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 134283264, 'x': 1074798592}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy__unsafe_view_add_clamp_clamp_min_clone_div_gt_le_masked_fill_mul_reciprocal_scalar_tensor_sub_t_transpose_unsqueeze_view_where_zeros_like_62(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, out_ptr1, out_ptr2, out_ptr3, out_ptr4, out_ptr5, out_ptr6, out_ptr7, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 16384
    xnumel = 2048
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = tl.full([YBLOCK], True, tl.int1)[:, None]
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < xnumel
    x1 = xindex
    y0 = yindex
    tmp0 = tl.load(in_ptr0 + (x1 + 2048*y0), xmask, eviction_policy='evict_last').to(tl.float32)
    tmp3 = tl.load(in_ptr1 + (x1 + 2048*y0), xmask, eviction_policy='evict_last').to(tl.float32)
    tmp7 = tl.load(in_ptr2 + (128*((y0 % 2048)) + ((x1 % 128))), xmask, eviction_policy='evict_last')
    tmp20 = tl.load(in_ptr3 + (y0), None, eviction_policy='evict_last')
    tmp31 = tl.load(in_ptr4 + (x1), xmask, eviction_policy='evict_last')
    tmp1 = tmp0.to(tl.bfloat16)
    tmp2 = tmp1.to(tl.float32)
    tmp4 = tmp3.to(tl.bfloat16)
    tmp5 = tmp4.to(tl.float32)
    tmp6 = tmp5.to(tl.float32)
    tmp8 = tmp6 * tmp7
    tmp9 = tmp8.to(tl.float32)
    tmp10 = tmp9.to(tl.bfloat16)
    tmp11 = tmp10.to(tl.float32)
    tmp12 = tmp11.to(tl.bfloat16)
    tmp13 = tmp12.to(tl.float32)
    tmp14 = tmp2 + tmp13
    tmp15 = tmp14.to(tl.bfloat16)
    tmp16 = tmp15.to(tl.float32)
    tmp17 = tmp16.to(tl.bfloat16)
    tmp18 = tmp17.to(tl.float32)
    tmp19 = tmp18.to(tl.float32)
    tmp21 = tmp19 * tmp20
    tmp22 = tl.full([1, 1], -448.0, tl.float32)
    tmp23 = tl.where((tmp21 > tmp22) | (tmp21 != tmp21), tmp21, tmp22)
    tmp24 = tl.full([1, 1], 448.0, tl.float32)
    tmp25 = tl.where((tmp23 < tmp24) | (tmp23 != tmp23), tmp23, tmp24)
    tmp26 = tmp25.to(tl.float8e4nv)
    tmp27 = tmp26.to(tl.float32)
    tmp28 = triton.language.div_rn(tmp27, tmp20)
    tmp29 = tmp28 - tmp19
    tmp30 = triton.language.div_rn(tmp29, tmp19)
    tmp32 = tmp19 * tmp31
    tmp33 = tl.where((tmp32 > tmp22) | (tmp32 != tmp32), tmp32, tmp22)
    tmp34 = tl.where((tmp33 < tmp24) | (tmp33 != tmp33), tmp33, tmp24)
    tmp35 = tmp34.to(tl.float8e4nv)
    tmp36 = tmp35.to(tl.float32)
    tmp37 = triton.language.div_rn(tmp36, tmp31)
    tmp38 = tmp37 - tmp19
    tmp39 = triton.language.div_rn(tmp38, tmp19)
    tl.store(out_ptr0 + (x1 + 2048*y0), tmp30, xmask)
    tl.store(out_ptr1 + (x1 + 2048*y0), tmp26, xmask)
    tl.store(out_ptr2 + (x1 + 2048*y0), tmp26, xmask)
    tl.store(out_ptr3 + (x1 + 2048*y0), tmp16, xmask)
    tl.store(out_ptr4 + (x1 + 2048*y0), tmp39, xmask)
    tl.store(out_ptr5 + (y0 + 16384*x1), tmp35, xmask)
    tl.store(out_ptr6 + (y0 + 16384*x1), tmp35, xmask)
    tl.store(out_ptr7 + (x1 + 2048*y0), tmp16, xmask)

