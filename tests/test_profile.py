"""The profiled window (Step 15, Step 19): categories from names (one rule table, each rule
tested), own (exclusive) times with wrappers left out, the busy/idle arithmetic, oneDNN's
verbose log, energy counters; then real profiled cells on TensorFlow, JAX and PyTorch,
checked against an independent count of their raw traces (tests/profile_count.py).

GPU parts cannot run here: kernel names are canned lists taken from cuBLAS / cuDNN / CUTLASS
naming (the Tensor Core rule is a heuristic, and tested as one), NVML's energy counter a
fake object, RAPL's a fake sysfs tree (this VM exposes no powercap).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

import pytest

import cpu_kinds
import profile_count
from bench_helpers import SMALL, BenchRun, run_bench, shared_bench
from mxbench.bench.evidence import energy, onednn
from mxbench.bench.evidence import profile as profiler
from mxbench.bench.evidence.profile_ops import (
    RULES,
    Event,
    Op,
    busy_s,
    category,
    enclosing,
    exclusive,
    rule_of,
    summarize,
    tensor_core,
)
from mxbench.records.record import Profile, StepStats

# ---- categories from names (known truth: what each operation is) ---------------------------

NAMES = {
    # TensorFlow ops (scope/name:Type)
    "model/conv2d/Relu:_MklNativeFusedConv2D": "conv_matmul",
    "gradient_tape/conv2d/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilterWithBias": (
        "conv_matmul"
    ),
    "model/dense/MatMul:_MklMatMul": "conv_matmul",
    "model/batch_normalization/Cast:Cast": "cast",
    "model/bn/FusedBatchNormV3:_MklFusedBatchNormV3": "elementwise_norm",
    "model/conv2d/transpose:Transpose": "layout",
    "adam/Mul_17:Mul": "optimizer",  # under the optimizer's scope (optimizer="adam")
    "model/add:AddV2": "elementwise_norm",
    "IteratorGetNext": "input",
    "gradient_tape/pool/MaxPoolGrad:_MklNativeMaxPoolGrad": "elementwise_norm",
    "aten::max_pool2d_with_indices": "elementwise_norm",
    # XLA HLO instructions and fusions (JAX on a CPU)
    "convolution.3": "conv_matmul",
    "dot_general.4": "conv_matmul",
    "wrapped_convert.6": "cast",
    "convert_reduce_fusion": "cast",
    "transpose_copy_fusion": "layout",
    "multiply_add_fusion.5": "elementwise_norm",
    "ynn_fusion.3": "other",  # XLA:CPU's YNNPACK fusion: a dot or elementwise, unsaid
    # CUDA kernels
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn": "conv_matmul",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>": "elementwise_norm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>": (
        "elementwise_norm"
    ),
    # CUDA kernels an H200 ran (JAX 0.11, PyTorch 2.11, cuDNN 9.19), named as its traces name
    # them; what each is, from the HLO instruction or ATen operator that launched it.
    # cuDNN's CUTLASS weight-gradient convolution (cudnn-conv-bw-filter), mangled and 1,642
    # characters long: deep in its template hide cutlass::layout and a permute
    "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock"
    "22ImplicitGemmMultistageINS_4gemm9GemmShapeILi128ELi128ELi16EEENS4_52Conv2dWgradOutput"
    "GradientTileAccessIteratorOptimizedINS_11MatrixShapeILi128ELi16EEENS_10tfloat32_tENS_9"
    "transform29PitchLinearWarpRakedThreadMapINS_16PitchLinearShapeILi128ELi16EEELi128ENSF_"
    "ILi4ELi8EEELi4EEEEENS_9transform11threadblock22PermuteLayoutEEEvNT_6ParamsE": "conv_matmul",
    "void wgrad_alg0_engine_NHWC<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float "
    "const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, "
    "int, int, int, int)": "conv_matmul",  # cudnn-conv-bw-filter
    "void convolve_common_engine_float_NHWC<__nv_bfloat16, __nv_bfloat16, 128, 5, 5, 3, 3, 3, "
    "true, false, false, false, false>(int, int, int, __nv_bfloat16 const*, __nv_bfloat16 "
    "const*, int, __nv_bfloat16*, conv_kernel_common_params, unsigned long long, unsigned long, "
    "float, float, int, __nv_bfloat16 const*, __nv_bfloat16 const*, bool)": "conv_matmul",
    "sm90_xmma_dgrad_implicit_gemm_indexed_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize256x64x32_"
    "warpgroupsize1x1x1_g1_strided_execute_kernel__5x_cudnn": "conv_matmul",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bx_coopA_bias_TNT": "conv_matmul",
    # cuDNN reordering a float32 tensor for a float32 convolution: no cast (float to float)
    "void cudnn::engines_precompiled::convertTensor_kernel<float, float, float, "
    "(cudnnKernelDataType_t)2>(float, float const*, float, float*, unsigned long)": "layout",
    "void cudnn::engines_precompiled::convertTensor_kernel<__nv_bfloat16, float, float, "
    "(cudnnKernelDataType_t)2>(float, __nv_bfloat16 const*, float, float*, unsigned long)": (
        "cast"
    ),
    "void nhwcAddPaddingKernel<float, float, float, true, (cudnnKernelDataType_t)2>(int, int, "
    "int, int, float const*, int, float*, int, float, float, cudnnKernelDataType_t)": "layout",
    # PyTorch's copies: of one type (``_nocast``, aten::contiguous), or with a cast (to bf16)
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native"
    "::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native"
    "::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, "
    "at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const"
    "::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const"
    "::{lambda(float)#1} const&)::{lambda(int)#1})": "layout",
    "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::"
    "bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, "
    "2ul>)": "cast",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, "
    "TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native"
    "::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(float)#1}, std::array<char*, 2ul>, TrivialOffsetCalculator<1, unsigned int>, "
    "TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native"
    "::memory::StoreWithCast<1>)": "cast",
    # the optimizer's fused update (torch._foreach_*), in an anonymous namespace
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlpha"
    "Functor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::"
    "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, "
    "2, 2, 0>, std::plus<float>, float)": "optimizer",
}


@pytest.mark.parametrize("name", list(NAMES))
def test_each_operation_lands_in_its_category(name: str) -> None:
    assert category((name,), optimizer="adam") == NAMES[name]


# Names that hold a rule's word inside another word: anchored rules leave them alone
NOT_THEIRS = {
    "multi_step_on_iterator": "other",  # not "mul" (and a wrapper: never an operation)
    "summary_writer_flush": "other",  # not "sum"
    "ExpandDims": "other",  # not "exp"
    "convergence_probe": "other",  # not "conv"
    "padding_fifo_queue": "other",  # not "pad"
    "thread_pooled_buffer": "other",  # not "pool"
    "model/conv2d/Reshape:Reshape": "other",  # the scope says conv2d; the op does not
}


@pytest.mark.parametrize("name", list(NOT_THEIRS))
def test_rules_match_whole_words_of_the_operation_not_its_scope(name: str) -> None:
    assert category((name,)) == NOT_THEIRS[name]


CALLED = {  # (operation, its callers) -> category
    ("aten::mul", "aten::_foreach_mul_"): "optimizer",
    ("ResourceApplyAdam",): "optimizer",
}


@pytest.mark.parametrize("index", range(len(RULES)))
def test_every_rule_decides_a_known_name(index: int) -> None:
    """One test per rule of the table: some name of known category is decided by it (a rule
    shadowed by an earlier one, or matching nothing real, fails here)."""
    rule = RULES[index]
    known = [((n,), c) for n, c in NAMES.items() if not n.startswith("adam/")]  # scope: not a rule
    known += list(CALLED.items())
    decided = [(names, c) for names, c in known if rule_of(names) is rule]
    assert decided, f"rule {index} ({rule.category}: {rule.pattern.pattern[:60]}...) decides none"
    assert all(c == rule.category for _, c in decided), decided


WRAPPERS = [
    "multi_step_on_iterator", "TFE_Py_ExecuteCancelable", "EagerKernelExecute",
    " __inference_multi_step_on_iterator_1431", "EagerLocalExecute: __inference_f_12",
    "ExecutorState::Process", "ThunkExecutor::Execute (wait for completion)",
    "KernelAndDeviceFunc::Run", "$trainer.py:361 fit", "autograd::engine::evaluate_function: "
    "ConvolutionBackward0", "ConvolutionBackward0", "torch::autograd::AccumulateGrad",
    "ProfilerStep#3", "Optimizer.step#Adam.step", "Wait for donation holds", "convert_to_tensor",
    "PjitFunction(equal)", "ValidateInputTypeAndPlacement",
]  # fmt: skip
OPERATIONS = ["m/conv/Relu:_MklNativeFusedConv2D", "IteratorGetNext", "aten::convolution_backward",
              "aten::mm", "convolution.3", "ynn_fusion.2", "wrapped_convert", "Cast"]  # fmt: skip


def test_wrappers_are_told_from_operations() -> None:
    assert [w for w in WRAPPERS if not enclosing(w)] == []
    assert [o for o in OPERATIONS if enclosing(o)] == []


def test_own_time_leaves_out_nested_events_and_wrappers_are_no_operations() -> None:
    """A TensorFlow step as its host trace nests it (ms): the step function, the eager API,
    the function body and the executor each span the step; a function op encloses two ops
    on its thread; another thread runs a matmul meanwhile."""
    ms = 1e-3
    trace = [
        Event("multi_step_on_iterator", 0, 10 * ms, "main"),
        Event("TFE_Py_ExecuteCancelable", 0.1 * ms, 9.8 * ms, "main"),
        Event("EagerKernelExecute", 0.2 * ms, 9.6 * ms, "main"),
        Event(" __inference_multi_step_on_iterator_1431", 0.3 * ms, 9.4 * ms, "main"),
        Event("ExecutorState::Process", 0.5 * ms, 8 * ms, "main"),
        Event("m/f:PartitionedCall", 1 * ms, 6 * ms, "main"),
        Event("m/f/conv:Conv2D", 1.5 * ms, 3 * ms, "main"),
        Event("m/f/relu:Relu", 5 * ms, 1 * ms, "main"),
        Event("m/d:MatMul", 2 * ms, 2 * ms, "worker"),
    ]
    ops = {o.names[0]: o for o in exclusive(trace)}
    assert set(ops) == {"m/f:PartitionedCall", "m/f/conv:Conv2D", "m/f/relu:Relu", "m/d:MatMul"}
    assert ops["m/f:PartitionedCall"].own == pytest.approx(2 * ms)  # 6 less 3 and 1
    assert ops["m/f/conv:Conv2D"].own == pytest.approx(3 * ms)
    assert ops["m/f/relu:Relu"].names == ("m/f/relu:Relu", "m/f:PartitionedCall")  # no wrapper
    s = summarize(list(ops.values()), wall_s=10 * ms, steps=1)
    # busy 6 ms (the function op's interval; the matmul inside it in time), ops 8 ms of own
    # time (two threads side by side), scaled into the busy 6: conv 3 + matmul 2 of 8
    assert s.ops_ms == pytest.approx(8.0)
    assert s.breakdown_ms["conv_matmul"] == pytest.approx(6 * 5 / 8)
    assert s.breakdown_ms["host_gap"] == pytest.approx(4.0)
    assert s.breakdown_ms["other"] == pytest.approx(6 * 2 / 8)  # PartitionedCall's own time


def test_a_thread_pools_loop_inside_an_operation_is_part_of_it() -> None:
    """TensorFlow's own (Eigen) convolutions, where its oneDNN is off (an AVX2-only CPU's
    default), trace the thread pool's ``ParallelFor`` on their thread, inside them. Its time
    is the convolution's: counted as an operation of its own (issue 47) it took that time
    from the convolutions and was listed among the busiest operations, and the independent
    count, giving it to nobody, read 12-22% less work than the threads did (an AVX2-only
    EPYC: 479.5 ms against the record's 551.3). Times in ms."""
    ms = 1e-3
    trace = [
        Event("ExecutorState::Process", 0, 10 * ms, "compute"),
        Event("g/conv:Conv2DBackpropFilter", 1 * ms, 6 * ms, "compute"),
        Event("ParallelFor", 2 * ms, 4 * ms, "compute"),
        Event("g/mul:Mul", 3 * ms, 1 * ms, "compute"),  # an op inside the loop: its own
        Event("g/cast:Cast", 8 * ms, 1 * ms, "compute"),
        Event("ParallelFor", 9.5 * ms, 0.2 * ms, "compute"),  # in no op: work none claims
    ]
    ops = {o.names[0]: o for o in exclusive(trace)}
    assert set(ops) == {"g/conv:Conv2DBackpropFilter", "g/mul:Mul", "g/cast:Cast", "ParallelFor"}
    assert ops["g/conv:Conv2DBackpropFilter"].own == pytest.approx(5 * ms)  # 6 less the Mul
    assert ops["g/mul:Mul"].names == ("g/mul:Mul", "g/conv:Conv2DBackpropFilter")
    assert ops["ParallelFor"].own == pytest.approx(0.2 * ms)
    s = summarize([o for o in ops.values() if o.names[0] != "ParallelFor"], wall_s=10 * ms,
                  steps=1)  # fmt: skip
    assert s.top[0][:3] == ("Conv2DBackpropFilter", "conv_matmul", pytest.approx(5.0))
    assert s.ops_ms == pytest.approx(7.0)  # the threads' busy time: 6 + 1
    # the independent count's rule agrees: time inside an operation is the innermost one's
    slices = [profile_count.Slice(e.name, e.start, e.start + e.duration, e.lane,
                                  op="/" in e.name, category=profile_count.tf_category(e.name))
              for e in trace[:-1]]  # fmt: skip
    count = profile_count.count(slices)
    assert count.ops_s == pytest.approx(7 * ms) == count.thread_busy_s
    assert count.conv_s == pytest.approx(5 * ms)
    assert count.categories == pytest.approx({"conv_matmul": 5 * ms, "elementwise_norm": 1 * ms,
                                              "cast": 1 * ms})  # fmt: skip


def test_pytorch_callers_decide_what_a_copy_is() -> None:
    """aten::copy_ is a cast under aten::_to_copy, a layout change under contiguous, and the
    optimizer's when a _foreach_ op called it."""
    assert category(("aten::copy_", "aten::_to_copy", "aten::to")) == "cast"
    assert category(("aten::copy_", "aten::clone", "aten::contiguous")) == "layout"
    assert category(("aten::mul", "aten::mul_", "aten::_foreach_mul_")) == "optimizer"
    assert category(("aten::mm", "MmBackward0", "autograd::engine::evaluate_function")) == (
        "conv_matmul"
    )
    assert category(("aten::frobnicate",)) == "other"


# Tensor Core kernels by the names cuBLAS, cuDNN and CUTLASS give them (a heuristic)
TENSOR_CORE_KERNELS = [
    "volta_h884gemm_64x64_ldg8_nn",
    "turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn",
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn",
    "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16",
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
    "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8",
    "nvjet_tst_128x128_64x4_1x2_h_bz_coopA_NTT",
    "void xmma_cudnn::gemm::kernel<xmma_cudnn::implicit_gemm::fprop::Kernel_traits<"
    "xmma_cudnn::Ampere_hmma_fp32_traits>>",
]
PLAIN_KERNELS = [
    "volta_sgemm_128x64_nn",
    "ampere_sgemm_64x32_sliced1x4_nn",
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, true, false, true>",
    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>",
    "void gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false, false>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
]


def test_tensor_core_kernels_are_told_from_their_names() -> None:
    assert [k for k in TENSOR_CORE_KERNELS if not tensor_core(k)] == []
    assert [k for k in PLAIN_KERNELS if tensor_core(k)] == []


def test_busy_time_counts_overlap_once_and_the_rest_is_the_host_gap() -> None:
    # two threads: 0-4 ms conv on one, 2-5 ms add on the other, 8-9 ms cast; window 10 ms
    ops = [
        Op(("x/conv:Conv2D",), 0.000, 0.004, "a"),
        Op(("x/add:AddV2",), 0.002, 0.003, "b"),
        Op(("x/c:Cast",), 0.008, 0.001, "a"),
    ]
    assert busy_s(ops) == pytest.approx(0.006)
    s = summarize(ops, wall_s=0.010, steps=2)
    # per step: busy 3 ms split 4:3:1 over the ops' own time, host gap 2 ms
    assert s.breakdown_ms["conv_matmul"] == pytest.approx(1.5)
    assert s.breakdown_ms["elementwise_norm"] == pytest.approx(1.125)
    assert s.breakdown_ms["cast"] == pytest.approx(0.375)
    assert s.breakdown_ms["host_gap"] == pytest.approx(2.0)
    assert sum(s.breakdown_ms.values()) == pytest.approx(5.0)  # the wall step
    assert s.busy_share == pytest.approx(0.6)
    assert s.cast_share == pytest.approx(0.125)
    assert s.tensor_core_share is None  # CPU
    assert s.top[0][:2] == ("Conv2D", "conv_matmul")


def test_gpu_tensor_core_share_of_conv_matmul_time() -> None:
    ops = [
        Op((TENSOR_CORE_KERNELS[2],), 0.0, 0.003, "s"),
        Op((PLAIN_KERNELS[0],), 0.003, 0.001, "s"),
        Op(("void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>",),
           0.004, 0.001, "s"),
    ]  # fmt: skip
    s = summarize(ops, wall_s=0.005, steps=1, gpu=True)
    assert s.tensor_core_share == pytest.approx(0.75)
    assert s.cast_share == pytest.approx(0.2)


# ---- oneDNN's verbose log ---------------------------------------------------------------------

_BF16 = "src:bf16::blocked:acdb::f0 wei:bf16:a:blocked:AcdB64a2b::f0 dst:bf16::blocked:acdb::f0"
_F32 = "src:f32::blocked:ab::f0 wei:f32::blocked:ab::f0 dst:f32::blocked:ab::f0"
_CONV1 = "mb8_ic3oc32_ih32oh16kh5sh2dh0ph1_iw32ow16kw5sw2dw0pw1"
_CONV2 = "mb8_ic32oc64_ih16oh8kh3sh2dh0ph1_iw16ow8kw3sw2dw0pw1"
_EXEC = "onednn_verbose,v1,primitive,exec,cpu"
EXEC_LOG = "\n".join([
    "onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)",
    "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support",
    f"{_EXEC},convolution,brg_conv_fwd:avx512_core_bf16,forward_training,{_BF16},"
    f"attr-scratchpad:user,alg:convolution_direct,{_CONV1},3.0",
    f"{_EXEC},convolution,jit:avx512_core,backward_weights,{_BF16},,alg:convolution_direct,"
    f"{_CONV2},1.0",
    f"{_EXEC},matmul,ref:any,undef,{_F32},,,8x10:10x128,1.0",
    f"{_EXEC},reorder,jit:uni,undef,src:bf16::blocked:cdba::f0 dst:bf16::blocked:AcdB::f0,,,"
    "64x32x7x7,0.5",
    "some other line a library printed",
])  # fmt: skip


def test_exec_log_gives_the_isa_and_native_share_by_time() -> None:
    prims = onednn.parse(EXEC_LOG.splitlines())
    assert [p.kind for p in prims] == ["convolution", "convolution", "matmul", "reorder"]
    assert [p.isa for p in prims[:3]] == ["avx512_core_bf16", "avx512_core", "ref"]
    e = onednn.evidence(prims)
    assert e is not None and e.weight == "time"
    assert e.gemm_isas == {"avx512_core_bf16": 0.6, "avx512_core": 0.2, "ref": 0.2}
    # 16-bit sources: 3 ms on avx512_core_bf16 (native), 1 ms on avx512_core (converted)
    assert e.native16_share == pytest.approx(0.75)
    assert e.sixteen_bit_share == pytest.approx(0.8)
    assert e.reorder_ms == pytest.approx(0.5) and e.gemm_ms == pytest.approx(5.0)


_F16 = "src:f16::blocked:acdb::f0 wei:f16:a:blocked:AcdB32a2b::f0 dst:f16::blocked:acdb::f0"


def test_reference_loops_are_counted_by_pass() -> None:
    """PyTorch's float16 training on an AVX512-FP16 Xeon (this repository's, oneDNN 3.7):
    forward and data gradient on brgemm kernels, the weight gradient on ref:any; the log
    says which pass ran on the reference loops and how much of the work that was."""
    log = [
        f"{_EXEC},convolution,brg_conv_fwd:avx10_1_512,forward_training,{_F16},,"
        f"alg:convolution_direct,{_CONV1},2.0",
        f"{_EXEC},convolution,brgconv_strided:avx10_1_512,backward_data,{_F16},,"
        f"alg:convolution_direct,{_CONV1},3.0",
        f"{_EXEC},convolution,ref:any,backward_weights,{_F16},,alg:convolution_direct,"
        f"{_CONV1},90.0",
        f"{_EXEC},matmul,ref:any,undef,{_F32},,,8x10:10x128,5.0",
    ]
    e = onednn.evidence(onednn.parse(log))
    assert e is not None and e.gemm_isas == {"ref": 0.95, "avx10_1_512": 0.05}
    assert e.ref_passes == {"backward_weights": 0.9, "undef": 0.05}
    assert e.native16_share == pytest.approx(5 / 95, abs=1e-4)
    plain = onednn.evidence(onednn.parse(log[:2]))
    assert plain is not None and plain.ref_passes == {}


def test_creation_log_weighs_each_distinct_primitive_by_its_arithmetic() -> None:
    log = [
        line.replace("primitive,exec", "primitive,create:cache_miss").rsplit(",", 1)[0] + ",0.1"
        for line in EXEC_LOG.splitlines()
        if "primitive,exec" in line
    ]
    log.append(log[0].replace("cache_miss", "cache_hit"))  # the same primitive again: once
    e = onednn.evidence(onednn.parse(log))
    assert e is not None and e.weight == "flops" and e.primitives == 4
    fwd = 8 * 3 * 32 * 16 * 16 * 5 * 5  # mb ic oc oh ow kh kw
    bwd = 8 * 32 * 64 * 8 * 8 * 3 * 3
    mm = 8 * 10 * 128
    assert e.gemm_isas["avx512_core_bf16"] == pytest.approx(fwd / (fwd + bwd + mm), abs=1e-4)
    assert e.native16_share == pytest.approx(fwd / (fwd + bwd), abs=1e-4)


def test_a_float32_only_log_has_no_native_share_and_no_gemm_means_no_evidence() -> None:
    f32 = [x for x in EXEC_LOG.splitlines() if "ref:any" in x]
    e = onednn.evidence(onednn.parse(f32))
    assert e is not None and e.native16_share is None and e.sixteen_bit_share == 0
    reorders = [x for x in EXEC_LOG.splitlines() if "reorder" in x]
    assert onednn.evidence(onednn.parse(reorders)) is None


# One definition of "native 16-bit ISA" (onednn.native16), for every ISA a CI machine or a
# user's may run: AMD EPYC / Cooper Lake (avx512_core_bf16), Sapphire Rapids and later with
# AMX (avx512_core_amx, or avx10_1_512_amx as oneDNN 3.7+ spells it), and names to come.
NATIVE_BF16 = ["avx512_core_bf16", "avx512_core_bf16_ymm", "avx512_core_fp16", "avx10_1_512",
               "avx512_core_amx", "avx10_1_512_amx", "avx512_core_amx_fp16",
               "avx10_1_512_amx_fp16", "avx10_2_512", "avx10_2_512_amx_2",
               "avx2_vnni_2"]  # fmt: skip
FLOAT32_ISAS = ["avx512_core", "avx512_core_vnni", "avx512_common", "avx2_vnni", "avx2", "avx",
                "sse41", "ref", "gemm", "any", "unknown"]  # fmt: skip


@pytest.mark.parametrize("isa", NATIVE_BF16)
def test_every_bf16_isa_oneDNN_names_is_native(isa: str) -> None:
    assert onednn.native16(isa, "bf16") and onednn.native16(f"brg_conv_fwd:{isa}", "bf16")
    assert onednn.amx(isa) is ("amx" in isa)


@pytest.mark.parametrize("isa", FLOAT32_ISAS)
def test_float32_isas_are_not_native_16_bit(isa: str) -> None:
    assert not onednn.native16(isa, "bf16") and not onednn.native16(isa, "f16")
    assert not onednn.native16(f"jit:{isa}", "bf16") and not onednn.amx(isa)


def test_float16_needs_fp16_instructions_not_bf16_ones() -> None:
    for isa in ("avx512_core_fp16", "avx10_1_512", "avx512_core_amx", "avx10_1_512_amx",
                "avx512_core_amx_fp16", "avx2_vnni_2"):  # fmt: skip
        assert onednn.native16(isa, "f16"), isa
    assert not onednn.native16("brg_conv_fwd:avx512_core_bf16", "f16")  # "f16" inside "bf16"
    assert not onednn.native16("avx512_core_amx", "f32")


def test_a_bf16_kernel_on_an_isa_without_bf16_is_not_native() -> None:
    """oneDNN capped at AVX512_CORE (or a Skylake / Cascade Lake Xeon: AVX-512 without
    AVX512_BF16) runs bf16 on ``jit_bf16:avx512_core`` (its bf16 kernel on float32
    instructions) and ``gemm:jit:bf16`` (no ISA named): "bf16" in the kernel's name is not
    bf16 instructions (measured here: the record said 77% native until it read the ISA)."""
    log = [
        f"{_EXEC},convolution,jit_bf16:avx512_core,forward_training,{_BF16},,"
        f"alg:convolution_direct,{_CONV1},3.0",
        f"{_EXEC},matmul,gemm:jit:bf16,undef,{_BF16},,,8x10:10x128,1.0",
    ]
    prims = onednn.parse(log)
    assert [p.isa for p in prims] == ["avx512_core", "gemm"]
    e = onednn.evidence(prims)
    assert e is not None and e.native16_share == 0.0 and e.sixteen_bit_share == 1.0


def test_an_amx_log_is_native_bf16() -> None:
    """The log an AMX Xeon writes (oneDNN 3.7+ spells the ISA avx10_1_512_amx)."""
    amx_log = [line.replace("avx512_core_bf16", "avx10_1_512_amx")
               .replace("jit:avx512_core,", "brg_conv_bwd_w:avx512_core_amx,")
               for line in EXEC_LOG.splitlines()]  # fmt: skip
    prims = onednn.parse(amx_log)
    assert [p.isa for p in prims[:2]] == ["avx10_1_512_amx", "avx512_core_amx"]
    e = onednn.evidence(prims)
    assert e is not None and e.native16_share == 1.0
    assert e.gemm_isas == {"avx10_1_512_amx": 0.6, "avx512_core_amx": 0.2, "ref": 0.2}


def test_older_log_format_still_parses() -> None:
    line = ("dnnl_verbose,exec,cpu,inner_product,gemm:jit,forward_training,src_f32::blocked:ab:"
            "f0 wei_f32::blocked:ab:f0,,,mb8ic128oc10,0.25")  # fmt: skip
    (p,) = onednn.parse([line])
    assert (p.kind, p.isa, p.ms, p.flops) == ("inner_product", "gemm", 0.25, 8 * 128 * 10)


def test_onednn_says_which_isa_it_runs_with_and_whether_it_logs() -> None:
    """The info line names the instruction set after any ONEDNN_MAX_CPU_ISA cap; the record
    says "not known" rather than "did not run" where ONEDNN_VERBOSE logged no primitives."""
    assert onednn.isa(EXEC_LOG.splitlines()) == (
        "Intel AVX-512 with Intel DL Boost and bfloat16 support"
    )
    assert onednn.isa(["onednn_verbose,v1,info,cpu,isa:Intel AVX2"]) == "Intel AVX2"
    assert onednn.isa(["something else", "onednn_verbose,v1,info,cpu,runtime:OpenMP"]) is None
    for logs in ("profile_create", "1", "all", "error,profile_exec", "PROFILE"):
        assert onednn.logs_primitives(logs), logs
    for quiet in ("", "0", "none", "error", "warn,check", "dispatch"):
        assert not onednn.logs_primitives(quiet), quiet


def test_what_c_code_prints_on_stdout_is_captured() -> None:
    libc = ctypes.CDLL(None)
    with onednn.captured_stdout() as lines:
        libc.printf(b"onednn_verbose,from C\n")
        os.write(1, b"from python\n")
    assert "onednn_verbose,from C" in lines and "from python" in lines


_CREATE = "onednn_verbose,v1,primitive,create:cache_miss,cpu"


def test_a_paired_log_gives_each_arm_the_lines_of_its_own_turns() -> None:
    """A paired TensorFlow process's one log, marked where each arm's turn begins and ends
    (profile.mark_turn): each record's figures come from its own policy's turns (an A/A
    pair's two float32 arms are one model: what one created the other may reuse without a
    line); what was logged in no arm's turn (the arms' last steps, run side by side) is in
    nobody's figures, and counted; the ISA is the process's, whoever's turn its line fell in."""
    f32 = (f"{_CREATE},convolution,brg_conv_fwd:avx512_core,forward_training,{_F32},,"
           f"alg:convolution_direct,{_CONV1},0.2")  # fmt: skip
    bf16 = (f"{_CREATE},convolution,brg_conv_fwd:avx512_core_bf16,forward_training,{_BF16},,"
            f"alg:convolution_direct,{_CONV2},0.2")  # fmt: skip
    turn = profiler.TURN
    log = [*EXEC_LOG.splitlines()[:2], f"{turn}0", f32, f"{turn}-", f"{turn}1", bf16,
           f"{turn}-", f"{turn}2", f"{turn}-", f32.replace("miss", "hit"), bf16,
           f"{turn}0", f32.replace("miss", "hit"), f"{turn}-"]  # fmt: skip
    by_arm, outside = profiler.turns(log)
    assert by_arm == {0: [f32, f32.replace("miss", "hit")], 1: [bf16], 2: []}
    assert outside == [*EXEC_LOG.splitlines()[:2], f32.replace("miss", "hit"), bf16]
    found = {}
    for name, arms in (("float32", [0, 2]), ("mixed_bfloat16", [1]), ("whole", None)):
        prof = Profile(device="cpu")
        profiler.add_log(prof, log, "tensorflow", arms=arms)
        assert prof.onednn is not None and prof.onednn.isa and prof.onednn.ran, name
        found[name] = prof.onednn
    f, m, whole = found["float32"], found["mixed_bfloat16"], found["whole"]
    assert f.gemm_isas == {"avx512_core": 1.0} and f.sixteen_bit_share == 0
    assert f.native16_share is None and f.scope == "turns" and f.left_out == 2
    assert m.gemm_isas == {"avx512_core_bf16": 1.0} and m.sixteen_bit_share == 1
    assert m.native16_share == 1 and m.scope == "turns" and m.left_out == 2
    # the whole log (a process of one policy) mixes them, as paired records once did
    assert 0 < (whole.sixteen_bit_share or 0) < 1 and len(whole.gemm_isas) == 2
    assert whole.scope == "process" and whole.left_out is None


# ---- energy counters -------------------------------------------------------------------------


def _zone(root: Path, name: str, uj: int, wrap: int | None = 2**32) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "energy_uj").write_text(f"{uj}\n")
    if wrap is not None:
        (zone / "max_energy_range_uj").write_text(f"{wrap}\n")
    return zone


def test_rapl_sums_packages_not_subzones_and_undoes_wraps(tmp_path: Path) -> None:
    p0 = _zone(tmp_path, "intel-rapl:0", 1_000_000, wrap=10_000_000)
    p1 = _zone(tmp_path, "intel-rapl:1", 2_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 999_000)  # the cores of package 0: part of it
    rapl = energy.Rapl(tmp_path)
    assert len(rapl.zones) == 2
    assert rapl.read() == pytest.approx(3.0)
    (p0 / "energy_uj").write_text("500000\n")  # wrapped: 10 J range, +9.5 J
    (p1 / "energy_uj").write_text("2500000\n")
    assert rapl.read() == pytest.approx(3.0 + 9.5 + 0.5)


def test_no_readable_rapl_means_no_counter(tmp_path: Path) -> None:
    assert energy.cpu_counter(tmp_path) is None  # no powercap at all (this VM)
    zone = _zone(tmp_path, "intel-rapl:0", 1)
    (zone / "energy_uj").write_text("not a number")
    assert energy.cpu_counter(tmp_path) is None


def test_counter_interpolates_the_window() -> None:
    c = energy.Counter(lambda: 0.0, "rapl")
    c.samples = [(10.0, 100.0), (10.5, 150.0), (11.0, 180.0)]
    assert c.joules(10.25, 10.75) == pytest.approx(165.0 - 125.0)
    assert c.joules(9.0, 10.5) is None  # before the first reading: unknown


class FakeNvml:
    """NVML's energy counter (mJ since the driver loaded), rising 200 J per second."""

    def __init__(self, supported: bool = True) -> None:
        self.supported = supported
        self.t0 = None

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return "h0"

    def nvmlDeviceGetUUID(self, h: str) -> bytes:
        return b"GPU-0"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        import time

        if not self.supported:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return int(time.perf_counter() * 200_000)


def test_nvml_energy_over_a_window_gives_joules_per_step_and_image() -> None:
    import time

    counter = energy.gpu_counter("GPU-0", nvml=FakeNvml())
    assert counter is not None and counter.source == "nvml"
    counter.interval_s = 0.01
    counter.start()
    start = time.perf_counter()
    time.sleep(0.2)
    end = time.perf_counter()
    time.sleep(0.03)

    class M:
        energy_j_per_step = energy_j_per_image = energy_source = None

    m = M()
    energy.fill(m, counter, [(start, end)], steps=10, batch_size=4)
    joules = 200 * (end - start)
    assert m.energy_source == "nvml"
    assert m.energy_j_per_step == pytest.approx(joules / 10, rel=0.05)
    assert m.energy_j_per_image == pytest.approx(joules / 40, rel=0.05)
    assert energy.gpu_counter("GPU-0", nvml=FakeNvml(supported=False)) is None  # pre-Volta
    assert energy.gpu_counter("GPU-other", nvml=FakeNvml()) is None


# ---- real profiled cells ----------------------------------------------------------------------


def profiled(backend: str, kind: str | None = None) -> tuple[BenchRun, Path]:
    """One real mixed_bfloat16 blog-cnn cell per backend and CPU kind (tests/cpu_kinds.py)
    and test session, its raw trace kept."""
    pytest.importorskip(backend)
    args = ("--backend", backend, "--policy", "mixed_bfloat16", *SMALL)
    if kind is None:
        run = shared_bench(*args)
    else:  # no one-step check: its float32 pass is not what these tests read
        run = shared_bench(*args, "--check", "off", env=cpu_kinds.KINDS[kind])
    trace = _profile(run)["trace"]
    assert trace, run.record["profile"]
    return run, Path(trace)


def _profile(run: BenchRun) -> dict[str, Any]:
    assert run.returncode == 0, run.stderr
    rec = run.record  # one line on stdout: oneDNN's log did not leak into it
    assert rec["status"] == "ok", rec["error"]
    prof = rec["profile"]
    assert prof["error"] is None and prof["steps"] == 3 and prof["device"] == "cpu", prof
    return dict(prof)


# The CPU-dependent cells: TensorFlow and PyTorch on each CPU kind (JAX's XLA kernels are
# its own: no oneDNN to switch or cap)
KINDS = [(b, k) for b in ("tensorflow", "torch") for k in cpu_kinds.KINDS]


@pytest.mark.parametrize(("backend", "kind"), KINDS)
def test_a_real_cell_says_where_its_time_went_and_which_kernels_ran(
    backend: str, kind: str
) -> None:
    """Whatever the kind, the record says what ran the convolutions: oneDNN's kernels (the
    ISA they ran on, native 16-bit where the CPU and the cap have bf16 instructions), or,
    where oneDNN did not run them (TensorFlow's oneDNN off on an AVX2-only CPU, PyTorch with
    no oneDNN bfloat16 path below AVX-512), the path that did and why (cpu_kinds)."""
    run, _ = profiled(backend, kind)
    prof = _profile(run)
    rec = run.record
    assert rec["settings"]["onednn_max_cpu_isa"] == cpu_kinds.KINDS[kind]["ONEDNN_MAX_CPU_ISA"]
    assert prof["breakdown_ms"]["conv_matmul"] > 0 and prof["breakdown_ms"]["cast"] > 0
    assert 0 < prof["cost_s"] < 60
    d = cpu_kinds.check_kernels(rec)
    if d["ran"]:
        assert d["weight"] == ("time" if backend == "torch" else "flops")
        assert d["sixteen_bit_share"] > 0.5  # the convolutions got bf16 inputs
    else:  # the convolutions the window timed are the ones the record names
        convs = [t["name"] for t in prof["top_ops"] if t["category"] == "conv_matmul"]
        assert d["kernels"] == convs[:8] and convs, prof["top_ops"]
    # a thread pool's loop is part of the operation that runs it, never one of its own
    assert "ParallelFor" not in [t["name"] for t in prof["top_ops"]], prof["top_ops"]


@pytest.mark.parametrize(("backend", "kind"), [*KINDS, ("jax", None)])
def test_the_breakdown_agrees_with_an_independent_count_of_the_raw_trace(
    backend: str, kind: str | None
) -> None:
    """The record's figures against tests/profile_count.py's count of the kept trace (another
    reader, another rule for what an operation is, another own-time algorithm): the
    operations' own times, the busy time and the convolutions' share agree; on blog-cnn, a
    conv-dominated model, TF's and JAX's convolutions are the largest part of the work, and
    "other" stays small on every backend. Wrappers counted as work (the step function, the
    executor: each the whole step) fail every one of these; so does a thread pool's loop
    inside a convolution (TensorFlow's Eigen kernels, oneDNN off) counted apart from it."""
    run, trace = profiled(backend, kind)
    prof = _profile(run)
    bd: dict[str, float] = prof["breakdown_ms"]
    step, steps = float(prof["step_ms"]), int(prof["steps"])
    busy = step - bd["host_gap"]
    assert sum(bd.values()) == pytest.approx(step, rel=0.01)
    count = profile_count.COUNTERS[backend](trace)
    assert prof["ops_ms"] == pytest.approx(count.ops_s * 1000 / steps, rel=0.1)
    # the operations' own times add up to the time their threads were busy: nothing that only
    # encloses them is counted as work (one thread here; operations side by side on several
    # threads make the union below smaller than this sum, as ResNet-50's do)
    assert prof["ops_ms"] == pytest.approx(count.thread_busy_s * 1000 / steps, rel=0.1)
    assert busy == pytest.approx(count.busy_s * 1000 / steps, rel=0.1)
    # the record says whether the busy time is thread time: operations side by side or not
    assert prof["side_by_side"] == pytest.approx(prof["ops_ms"] / busy, rel=0.01)
    assert prof["side_by_side"] == pytest.approx(count.thread_busy_s / count.busy_s, rel=0.1)
    assert bd["conv_matmul"] / busy == pytest.approx(count.conv_s / count.ops_s, abs=0.1)
    # every category's share of the operations' time, against the count's own rules
    shares = {c: v / busy for c, v in bd.items() if c != "host_gap"}
    counted = {c: round(count.share(c), 4) for c in shares}
    off = {c: (shares[c], counted[c]) for c in shares if abs(shares[c] - counted[c]) > 0.1}
    assert not off, (off, shares, counted)
    assert set(count.categories) <= set(shares), count.categories
    # the report's "largest part besides convolutions/matmuls" is the count's largest, or
    # within the same 10 points of it (a near tie the rules may split either way)
    named, largest = _largest_besides_conv(run.record), count.largest_besides_conv()
    assert named is not None and largest is not None, (shares, counted)
    assert count.share(named) >= count.share(largest) - 0.1, (named, largest, shares, counted)
    if backend != "torch":  # Keras' PyTorch BatchNormalization: separate mean/var ATen ops
        # the largest part of the work (its share moves with the load: over half quiet, 45%
        # in a full run beside other work; the share itself is checked just above)
        work = {k: v for k, v in bd.items() if k != "host_gap"}
        assert max(work, key=work.__getitem__) == "conv_matmul", bd
    assert bd["other"] <= 0.15 * step, bd
    if backend == "jax":  # XLA's own kernels: no oneDNN log to read
        assert prof["onednn"] is None and prof["tool"] == "jax.profiler"
        # XLA:CPU ran some convolutions as YNNPACK fusions (XLA's dump says which): the
        # record names every one of them after what it computes, none is left "other"
        assert profile_count._library_convs(trace), "no library fusion in XLA's dump"
        assert not [t for t in prof["top_ops"] if t["name"] in ("ynn_fusion", "xnn_fusion")]


def _largest_besides_conv(rec: dict[str, Any]) -> str | None:
    """What the report's note names as the largest work besides convolutions/matmuls for a
    record: its bar (the timed step split by its profile, mxbench.report.sections.why)."""
    import msgspec

    from mxbench.report.sections import why

    step = float(rec["metrics"]["step_ms"]["median"])
    parts = why.split(step, msgspec.convert(rec["profile"], Profile))
    assert parts is not None, rec["profile"]
    return why.Bar("p", 8, step, parts, "", None).largest_besides_conv()


def test_xla_library_fusions_are_named_after_what_they_compute() -> None:
    """XLA:CPU's ``ynn_fusion.N`` says nothing of its work: the compiled module's text does
    (the JAX operation in its metadata; else the fused computation's root). Lines from a
    real ResNet-50 step: a forward convolution, a weight gradient XLA kept no name for, a
    batch-norm reduction."""
    from mxbench.bench.evidence.profile import library_fusions
    from mxbench.bench.evidence.profile_ops import category

    hlo = """
%fused_computation.2 (param_0.2: f32[512,2,2,8], param_1.2: f32[2,2,8,2048]) -> f32[512,1,1,2048] {
  %param_0.2 = f32[512,2,2,8]{3,2,1,0} parameter(0)
  %param_1.2 = f32[2,2,8,2048]{3,2,1,0} parameter(1)
  ROOT %convolution.98 = f32[512,1,1,2048]{3,2,1,0} convolution(%param_0.2, %param_1.2), window={size=2x2}, dim_labels=b01f_01io->b01f
}

ENTRY %main.1 (p: f32[8,64,64,3]) -> f32[] {
  %ynn_fusion.26 = f32[8,32,32,32]{3,2,1,0} fusion(%data_0_.1, %state_0__0_.1), kind=kCustom, calls=%fused_computation.26, metadata={op_name="jit(train_step)/jvp(conv2d)/conv_general_dilated" stack_frame_id=126}, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  %ynn_fusion.2 = f32[512,1,1,2048]{3,2,1,0} fusion(%transpose_copy_fusion.1, %transpose_copy_fusion), kind=kCustom, calls=%fused_computation.2, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  %ynn_fusion.25 = f32[32]{0} fusion(%broadcast_maximum_fusion.2, %constant.128), kind=kCustom, calls=%fused_computation.25, metadata={op_name="jit(train_step)/jvp(batch_normalization)/jit(_var)/reduce_sum" stack_frame_id=134}
  %ynn_fusion.9 = f32[32]{0} fusion(%a, %b), kind=kCustom, calls=%fused_computation.9
}
"""  # noqa: E501
    found = library_fusions(hlo)
    assert found == {
        "ynn_fusion.26": "conv_general_dilated",
        "ynn_fusion.2": "convolution",
        "ynn_fusion.25": "reduce_sum",
    }
    named = {n: category([f"{n}:{what}"]) for n, what in found.items()}
    assert named == {
        "ynn_fusion.26": "conv_matmul",
        "ynn_fusion.2": "conv_matmul",
        "ynn_fusion.25": "elementwise_norm",
    }
    assert category(["ynn_fusion.9"]) == "other"  # nothing says what it is: not guessed
    # every instruction's JAX operation, with its scopes: Keras' optimizer names its update's
    from mxbench.bench.evidence.profile import op_names

    scoped = op_names(hlo + '  %multiply_add_fusion.17 = f32[32]{0} fusion(%a), kind=kLoop, '
                      'calls=%fused_computation.47, metadata={op_name="jit(train_step)/adam/add" '
                      "stack_frame_id=286}\n")  # fmt: skip
    assert scoped["ynn_fusion.26"] == "jit(train_step)/jvp(conv2d)/conv_general_dilated"
    assert "ynn_fusion.2" not in scoped  # XLA kept no name
    update = ("multiply_add_fusion.17", scoped["multiply_add_fusion.17"])
    assert category(update, "adam") == "optimizer"
    assert category(update[:1], "adam") == "elementwise_norm"  # its name alone says no more


def test_profile_off_records_none() -> None:
    pytest.importorskip("tensorflow")
    run = run_bench("--profile", "off", *SMALL, env={**os.environ, "ONEDNN_VERBOSE": "0"})
    assert run.returncode == 0, run.stderr
    assert run.record["status"] == "ok" and run.record["profile"] is None


# ---- the switch and the host's cost in the matrix ---------------------------------------------


def test_profile_switch_and_cost_per_hour_in_the_matrix() -> None:
    from mxbench.cells.cell import expand
    from mxbench.errors import UsageError
    from mxbench.matrix.file import parse_matrix

    host = "hosts:\n  - {name: box, engine: local, cost_per_hour: 2.5}\n"
    on = expand(parse_matrix(host))
    off = expand(parse_matrix("benchmark: {profile: false}\n" + host))  # YAML's bare off too
    assert {c.params.profile for c in on} == {"on"} and {c.params.profile for c in off} == {"off"}
    assert "--profile" in on[0].bench_args() and on[0].cost_per_hour == 2.5
    # on, the default, leaves the cell key as it was; off is another cell
    plain = expand(parse_matrix("hosts:\n  - {name: box, engine: local}\n"))
    assert [c.key for c in on] == [c.key for c in plain] != [c.key for c in off]
    with pytest.raises(UsageError) as exc:
        parse_matrix("hosts:\n  - {name: box, engine: local, cost_per_hour: -1}\n")
    assert "hosts[0].cost_per_hour" in str(exc.value)
    # the engine stamps the host's cost on every record of its cells, whatever happened
    from mxbench.engines.base import Outcome, to_record

    failed = to_record(on[0], Outcome(returncode=1, stderr="boom"))
    assert failed.status == "error" and failed.cost_per_hour == 2.5


def test_xspace_planes_give_kernels_on_gpu_streams_and_ops_on_host_threads() -> None:
    """The XSpace reader's seam (TensorFlow and JAX traces): which lines and events count."""
    from mxbench.bench.evidence.profile import _xspace_ops

    ps = 10**9  # picoseconds per millisecond
    planes = [
        ("/host:CPU", [
            ("python", 0, [("$trainer.py:361 fit", 0, 50 * ps)]),
            ("tf_Compute/1", 0, [("ExecutorState::Process", 0, 20 * ps),
                                 ("m/conv/Relu:_MklNativeFusedConv2D", 1 * ps, 4 * ps),
                                 ("IteratorGetNextOp::DoCompute", 6 * ps, 1 * ps)]),
            ("tf_data_iterator_get_next/2", 0, [("Iterator::Root", 0, 9 * ps)]),
        ]),
        ("/device:GPU:0", [
            ("Stream #14(Compute)", 0, [(TENSOR_CORE_KERNELS[2], 0, 3 * ps),
                                        (PLAIN_KERNELS[0], 3 * ps, 1 * ps)]),
            ("XLA Ops", 0, [("dot.1", 0, 4 * ps)]),  # a summary of the same kernels
        ]),
    ]  # fmt: skip
    cpu = _xspace_ops(planes, gpu=False)
    assert [o.names[0] for o in cpu] == ["m/conv/Relu:_MklNativeFusedConv2D", "IteratorGetNext"]
    assert [category(o.names) for o in cpu] == ["conv_matmul", "input"]
    gpu = _xspace_ops(planes, gpu=True)
    assert len(gpu) == 2
    s = summarize(gpu, wall_s=0.005, steps=1, gpu=True)
    assert s.tensor_core_share == pytest.approx(0.75)
    assert s.breakdown_ms["host_gap"] == pytest.approx(1.0)


def test_slow_steps_are_profiled_fewer_times() -> None:
    """About half a second of profiled steps: a 1.8 s or a 452 ms step of emulated bfloat16
    once, a 53 ms or a 190 ms one three times; no timed steps: the default."""

    def timed(ms: float) -> StepStats:
        return StepStats(median=ms, p25=ms, p75=ms, n=5)

    assert profiler.steps_for(None) == profiler.STEPS == 3
    assert [profiler.steps_for(timed(ms)) for ms in (53.0, 190.0, 452.0, 1811.0, 9000.0)] == [
        3, 3, 1, 1, 1]  # fmt: skip


def test_slow_steps_are_profiled_without_an_unprofiled_step_before() -> None:
    """The unprofiled step before the profiled ones pays a new fit's setup (milliseconds):
    kept before 53 ms steps, left out before a 452 ms or 1.8 s one (it would cost more than
    the whole profiled window of a fast arm); no timed steps: kept."""

    def timed(ms: float) -> StepStats:
        return StepStats(median=ms, p25=ms, p75=ms, n=5)

    assert profiler.lead_for(None) == 1
    assert [profiler.lead_for(timed(ms)) for ms in (53.0, 190.0, 452.0, 1811.0)] == [1, 1, 0, 0]
