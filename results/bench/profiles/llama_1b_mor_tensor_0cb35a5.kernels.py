# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_12: 12.13 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 8192, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'in_ptr3': '*bf16', 'out_ptr1': '*fp32', 'out_ptr2': '*fp8e4nv', 'out_ptr3': '*fp8e4nv', 'out_ptr4': '*fp8e4nv', 'out_ptr5': '*bf16', 'out_ptr6': '*bf16', 'out_ptr7': '*fp32', 'out_ptr8': '*fp8e4nv', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]], (11,): [['tt.divisibility', 16]], (12,): [['tt.divisibility', 16]], (13,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_12', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 8, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 3137339392, 'x': 184549376}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_12(in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr1, out_ptr2, out_ptr3, out_ptr4, out_ptr5, out_ptr6, out_ptr7, out_ptr8, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
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
    tmp21 = tl.load(in_ptr2 + (0))
    tmp22 = tl.broadcast_to(tmp21, [1, 1])
    tmp47 = tl.load(in_ptr3 + (y0 + 5632*x1), ymask, eviction_policy='evict_last').to(tl.float32)
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
    tmp23 = tl.full([1, 1], 0.0, tl.float32)
    tmp24 = tmp22 > tmp23
    tmp25 = tmp22 == tmp22
    tmp26 = tl_math.abs(tmp22)
    tmp27 = tl.full([1, 1], float("inf"), tl.float32)
    tmp28 = tmp26 != tmp27
    tmp29 = tmp25 & tmp28
    tmp30 = tmp24 & tmp29
    tmp31 = tl.where(tmp30, tmp22, tmp7)
    tmp32 = tl.full([1, 1], 448.0, tl.float32)
    tmp33 = triton.language.div_rn(tmp32, tmp31)
    tmp34 = tl.full([1, 1], 1.1754943508222875e-38, tl.float32)
    tmp35 = tl.where((tmp33 > tmp34) | (tmp33 != tmp33), tmp33, tmp34)
    tmp36 = tl.full([1, 1], 1.7014118346046923e+38, tl.float32)
    tmp37 = tl.where((tmp35 < tmp36) | (tmp35 != tmp35), tmp35, tmp36)
    tmp38 = tl.where(tmp30, tmp37, tmp7)
    tmp39 = tmp20 * tmp38
    tmp40 = tl.full([1, 1], -448.0, tl.float32)
    tmp41 = tl.where((tmp39 > tmp40) | (tmp39 != tmp39), tmp39, tmp40)
    tmp42 = tl.where((tmp41 < tmp32) | (tmp41 != tmp41), tmp41, tmp32)
    tmp43 = tmp42.to(tl.float8e4nv)
    tmp44 = tmp43.to(tl.float32)
    tmp45 = triton.language.div_rn(tmp44, tmp38)
    tmp46 = tmp45 - tmp20
    tmp48 = tmp47.to(tl.bfloat16)
    tmp49 = tmp48.to(tl.float32)
    tmp50 = tmp2 * tmp49
    tmp51 = tmp50.to(tl.bfloat16)
    tmp52 = tmp51.to(tl.float32)
    tmp53 = tmp52.to(tl.float32)
    tmp54 = tl.full([1, 1], 1, tl.int32)
    tmp55 = (tmp54 / tmp8)
    tmp56 = tmp55 * tmp7
    tmp57 = tmp53 * tmp56
    tmp58 = tmp7 - tmp56
    tmp59 = tmp4 * tmp58
    tmp60 = tmp59 + tmp7
    tmp61 = tmp57 * tmp60
    tmp62 = tmp61.to(tl.float32)
    tmp63 = tmp62.to(tl.bfloat16)
    tmp64 = tmp63.to(tl.float32)
    tmp65 = tmp64.to(tl.bfloat16)
    tmp66 = tmp65.to(tl.float32)
    tmp67 = tmp66.to(tl.float32)
    tmp68 = tl_math.abs(tmp67)
    tmp69 = tmp68 != tmp27
    tmp70 = tmp67 == tmp67
    tmp71 = tmp70 & tmp69
    tmp72 = tl.where(tmp71, tmp68, tmp23)
    tl.store(out_ptr1 + (y0 + 5632*x1), tmp46, ymask)
    tl.store(out_ptr2 + (y0 + 5632*x1), tmp43, ymask)
    tl.store(out_ptr3 + (y0 + 5632*x1), tmp43, ymask)
    tl.store(out_ptr4 + (y0 + 5632*x1), tmp43, ymask)
    tl.store(out_ptr5 + (y0 + 5632*x1), tmp17, ymask)
    tl.store(out_ptr6 + (y0 + 5632*x1), tmp17, ymask)
    tl.store(out_ptr7 + (y0 + 5632*x1), tmp72, ymask)
    tl.store(out_ptr8 + (x1 + 16384*y0), tmp43, ymask)


# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_zeros_like_12: 12.13 ms in 16 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()


# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_17: 10.48 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 8192, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*bf16', 'in_ptr3': '*fp32', 'out_ptr1': '*i1', 'out_ptr2': '*bf16', 'out_ptr3': '*bf16', 'out_ptr4': '*fp8e4nv', 'out_ptr5': '*fp8e4nv', 'out_ptr6': '*fp8e4nv', 'out_ptr7': '*fp8e4nv', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]], (11,): [['tt.divisibility', 16]], (12,): [['tt.divisibility', 16]], (13,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_17', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 8, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 2583691264, 'x': 184549376}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_17(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr1, out_ptr2, out_ptr3, out_ptr4, out_ptr5, out_ptr6, out_ptr7, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
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
    tmp44 = tl.where((tmp42 > tmp43) | (tmp42 != tmp42), tmp42, tmp43)
    tmp45 = tl.full([1, 1], 1.7014118346046923e+38, tl.float32)
    tmp46 = tl.where((tmp44 < tmp45) | (tmp44 != tmp44), tmp44, tmp45)
    tmp47 = tl.where(tmp39, tmp46, tmp14)
    tmp48 = tmp29 * tmp47
    tmp49 = tl.full([1, 1], -448.0, tl.float32)
    tmp50 = tl.where((tmp48 > tmp49) | (tmp48 != tmp48), tmp48, tmp49)
    tmp51 = tl.where((tmp50 < tmp41) | (tmp50 != tmp50), tmp50, tmp41)
    tmp52 = tmp51.to(tl.float8e4nv)
    tmp53 = tmp52.to(tl.float32)
    tmp54 = triton.language.div_rn(tmp53, tmp47)
    tmp55 = tmp54 - tmp29
    tmp56 = triton.language.div_rn(tmp55, tmp29)
    tmp57 = tmp29 != tmp32
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (y0 + 5632*x1), tmp56, ymask)
    tl.store(out_ptr1 + (y0 + 5632*x1), tmp57, ymask)
    tl.store(out_ptr2 + (y0 + 5632*x1), tmp26, ymask)
    tl.store(out_ptr3 + (y0 + 5632*x1), tmp26, ymask)
    tl.store(out_ptr4 + (y0 + 5632*x1), tmp52, ymask)
    tl.store(out_ptr5 + (y0 + 5632*x1), tmp52, ymask)
    tl.store(out_ptr6 + (y0 + 5632*x1), tmp52, ymask)
    tl.store(out_ptr7 + (x1 + 16384*y0), tmp52, ymask)


# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_silu_silu_backward_sub_t_unsqueeze_view_where_zeros_like_17: 10.48 ms in 16 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()


# triton_poi_fused__scaled_mm__to_copy__unsafe_view_abs_add_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_sub_t_transpose_unsqueeze_view_where_zeros_like_29: 5.01 ms in 32 calls per step
@triton_heuristics.pointwise(
    size_hints={'y': 2048, 'x': 16384}, tile_hint=TileHint.DEFAULT,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'out_ptr1': '*fp32', 'out_ptr2': '*bf16', 'out_ptr3': '*bf16', 'out_ptr4': '*fp8e4nv', 'out_ptr5': '*fp8e4nv', 'out_ptr6': '*fp8e4nv', 'out_ptr7': '*fp8e4nv', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]], (10,): [['tt.divisibility', 16]], (11,): [['tt.divisibility', 16]], (12,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid2D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy__unsafe_view_abs_add_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_sub_t_transpose_unsqueeze_view_where_zeros_like_29', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 4, 'num_store': 7, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'y': 873463808, 'x': 67108864}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy__unsafe_view_abs_add_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_sub_t_transpose_unsqueeze_view_where_zeros_like_29(in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr1, out_ptr2, out_ptr3, out_ptr4, out_ptr5, out_ptr6, out_ptr7, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 2048
    xnumel = 16384
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = tl.full([YBLOCK], True, tl.int1)[:, None]
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = tl.full([XBLOCK], True, tl.int1)[None, :]
    x1 = xindex
    y0 = yindex
    tmp0 = tl.load(in_ptr0 + (y0 + 2048*x1), None, eviction_policy='evict_last').to(tl.float32)
    tmp3 = tl.load(in_ptr1 + (y0 + 2048*x1), None, eviction_policy='evict_last').to(tl.float32)
    tmp7 = tl.load(in_ptr2 + (128*((x1 % 2048)) + ((y0 % 128))), None, eviction_policy='evict_last')
    tmp20 = tl.load(in_ptr3 + (0))
    tmp21 = tl.broadcast_to(tmp20, [1, 1])
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
    tmp22 = tl.full([1, 1], 0.0, tl.float32)
    tmp23 = tmp21 > tmp22
    tmp24 = tmp21 == tmp21
    tmp25 = tl_math.abs(tmp21)
    tmp26 = tl.full([1, 1], float("inf"), tl.float32)
    tmp27 = tmp25 != tmp26
    tmp28 = tmp24 & tmp27
    tmp29 = tmp23 & tmp28
    tmp30 = tl.full([1, 1], 1.0, tl.float32)
    tmp31 = tl.where(tmp29, tmp21, tmp30)
    tmp32 = tl.full([1, 1], 448.0, tl.float32)
    tmp33 = triton.language.div_rn(tmp32, tmp31)
    tmp34 = tl.full([1, 1], 1.1754943508222875e-38, tl.float32)
    tmp35 = tl.where((tmp33 > tmp34) | (tmp33 != tmp33), tmp33, tmp34)
    tmp36 = tl.full([1, 1], 1.7014118346046923e+38, tl.float32)
    tmp37 = tl.where((tmp35 < tmp36) | (tmp35 != tmp35), tmp35, tmp36)
    tmp38 = tl.where(tmp29, tmp37, tmp30)
    tmp39 = tmp19 * tmp38
    tmp40 = tl.full([1, 1], -448.0, tl.float32)
    tmp41 = tl.where((tmp39 > tmp40) | (tmp39 != tmp39), tmp39, tmp40)
    tmp42 = tl.where((tmp41 < tmp32) | (tmp41 != tmp41), tmp41, tmp32)
    tmp43 = tmp42.to(tl.float8e4nv)
    tmp44 = tmp43.to(tl.float32)
    tmp45 = triton.language.div_rn(tmp44, tmp38)
    tmp46 = tmp45 - tmp19
    tl.store(out_ptr1 + (y0 + 2048*x1), tmp46, None)
    tl.store(out_ptr2 + (y0 + 2048*x1), tmp16, None)
    tl.store(out_ptr3 + (y0 + 2048*x1), tmp16, None)
    tl.store(out_ptr4 + (y0 + 2048*x1), tmp43, None)
    tl.store(out_ptr5 + (y0 + 2048*x1), tmp43, None)
    tl.store(out_ptr6 + (y0 + 2048*x1), tmp43, None)
    tl.store(out_ptr7 + (x1 + 16384*y0), tmp43, None)


# triton_poi_fused__scaled_mm__to_copy__unsafe_view_abs_add_bitwise_and_clamp_clamp_min_clone_div_eq_full_like_gt_le_masked_fill_mul_ne_ones_like_reciprocal_scalar_tensor_sub_t_transpose_unsqueeze_view_where_zeros_like_29: 5.01 ms in 32 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()


# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_sub_t_unsqueeze_view_where_27: 4.69 ms in 16 calls per step
@triton_heuristics.pointwise(
    size_hints={'x': 134217728}, 
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'out_ptr1': '*fp32', 'out_ptr2': '*fp8e4nv', 'out_ptr3': '*fp8e4nv', 'out_ptr4': '*fp8e4nv', 'out_ptr5': '*bf16', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_sub_t_unsqueeze_view_where_27', 'mutated_arg_names': [], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 3, 'num_store': 5, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 1660944384}},
    min_elem_per_thread=2
)
@triton.jit
def triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_sub_t_unsqueeze_view_where_27(in_ptr0, in_ptr1, in_ptr2, out_ptr1, out_ptr2, out_ptr3, out_ptr4, out_ptr5, xnumel, XBLOCK : tl.constexpr):
    xnumel = 92274688
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), None).to(tl.float32)
    tmp12 = tl.load(in_ptr1 + (x0), None).to(tl.float32)
    tmp21 = tl.load(in_ptr2 + (0))
    tmp22 = tl.broadcast_to(tmp21, [XBLOCK])
    tmp1 = tmp0.to(tl.float32)
    tmp2 = -tmp1
    tmp3 = libdevice.exp(tmp2)
    tmp4 = tl.full([1], 1.0, tl.float32)
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
    tmp23 = tl.full([1], 0.0, tl.float32)
    tmp24 = tmp22 > tmp23
    tmp25 = tmp22 == tmp22
    tmp26 = tl_math.abs(tmp22)
    tmp27 = tl.full([1], float("inf"), tl.float32)
    tmp28 = tmp26 != tmp27
    tmp29 = tmp25 & tmp28
    tmp30 = tmp24 & tmp29
    tmp31 = tl.where(tmp30, tmp22, tmp4)
    tmp32 = tl.full([1], 448.0, tl.float32)
    tmp33 = triton.language.div_rn(tmp32, tmp31)
    tmp34 = tl.full([1], 1.1754943508222875e-38, tl.float32)
    tmp35 = tl.where((tmp33 > tmp34) | (tmp33 != tmp33), tmp33, tmp34)
    tmp36 = tl.full([1], 1.7014118346046923e+38, tl.float32)
    tmp37 = tl.where((tmp35 < tmp36) | (tmp35 != tmp35), tmp35, tmp36)
    tmp38 = tl.where(tmp30, tmp37, tmp4)
    tmp39 = tmp20 * tmp38
    tmp40 = tl.full([1], -448.0, tl.float32)
    tmp41 = tl.where((tmp39 > tmp40) | (tmp39 != tmp39), tmp39, tmp40)
    tmp42 = tl.where((tmp41 < tmp32) | (tmp41 != tmp41), tmp41, tmp32)
    tmp43 = tmp42.to(tl.float8e4nv)
    tmp44 = tmp43.to(tl.float32)
    tmp45 = triton.language.div_rn(tmp44, tmp38)
    tmp46 = tmp45 - tmp20
    tl.store(out_ptr1 + (x0), tmp46, None)
    tl.store(out_ptr2 + (x0), tmp43, None)
    tl.store(out_ptr3 + (x0), tmp43, None)
    tl.store(out_ptr4 + (x0), tmp43, None)
    tl.store(out_ptr5 + (x0), tmp17, None)


# triton_poi_fused__scaled_mm__to_copy_abs_bitwise_and_clamp_div_eq_full_like_gt_mul_ne_ones_like_reciprocal_silu_sub_t_unsqueeze_view_where_27: 4.69 ms in 16 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()


# triton_red_fused__to_copy_abs_bitwise_not_div_masked_fill_mul_ne_silu_sum_view_28: 4.50 ms in 16 calls per step
@triton_heuristics.reduction(
    size_hints={'x': 512, 'r0_': 262144},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'in_ptr1': '*bf16', 'in_ptr2': '*fp32', 'out_ptr0': '*i64', 'out_ptr1': '*fp64', 'out_ptr2': '*bf16', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': False, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused__to_copy_abs_bitwise_not_div_masked_fill_mul_ne_silu_sum_view_28', 'mutated_arg_names': [], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 3, 'num_store': 3, 'num_reduction': 2, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 16384, 'r0_': 738197504}}
)
@triton.jit
def triton_red_fused__to_copy_abs_bitwise_not_div_masked_fill_mul_ne_silu_sum_view_28(in_ptr0, in_ptr1, in_ptr2, out_ptr0, out_ptr1, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
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
    _tmp25 = tl.full([XBLOCK, R0_BLOCK], 0, tl.int64)
    _tmp34 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float64)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp12 = tl.load(in_ptr1 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp28 = tl.load(in_ptr2 + (r0_1 + 180224*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
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
        tmp21 = tl.full([1, 1], 0.0, tl.float32)
        tmp22 = tmp20 != tmp21
        tmp23 = tmp22.to(tl.int64)
        tmp24 = tl.broadcast_to(tmp23, [XBLOCK, R0_BLOCK])
        tmp26 = _tmp25 + tmp24
        _tmp25 = tl.where(r0_mask & xmask, tmp26, _tmp25)
        tmp27 = tmp22 == 0
        tmp29 = triton.language.div_rn(tmp28, tmp20)
        tmp30 = tl_math.abs(tmp29)
        tmp31 = tl.where(tmp27, tmp21, tmp30)
        tmp32 = tmp31.to(tl.float64)
        tmp33 = tl.broadcast_to(tmp32, [XBLOCK, R0_BLOCK])
        tmp35 = _tmp34 + tmp33
        _tmp34 = tl.where(r0_mask & xmask, tmp35, _tmp34)
        tl.store(out_ptr2 + (r0_1 + 180224*x0), tmp17, r0_mask & xmask)
    tmp25 = tl.sum(_tmp25, 1)[:, None]
    tmp34 = tl.sum(_tmp34, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp25, xmask)
    tl.store(out_ptr1 + (x0), tmp34, xmask)


# triton_red_fused__to_copy_abs_bitwise_not_div_masked_fill_mul_ne_silu_sum_view_28: 4.50 ms in 16 calls per step

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

