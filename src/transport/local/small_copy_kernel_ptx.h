// Generated from small_copy_kernel.cu (see there); do not edit.
#pragma once

namespace ferry::local {

inline constexpr const char kSmallCopyPtx[] = R"PTX(
.version 7.0
.target sm_80
.address_size 64
	// .globl	ferry_small_copy
.visible .entry ferry_small_copy(
	.param .u64 ferry_small_copy_param_0,
	.param .u64 ferry_small_copy_param_1,
	.param .u64 ferry_small_copy_param_2
)
{
	.reg .pred 	%p<8>;
	.reg .b16 	%rs<3>;
	.reg .b32 	%r<13>;
	.reg .b64 	%rd<31>;
	ld.param.u64 	%rd14, [ferry_small_copy_param_0];
	ld.param.u64 	%rd15, [ferry_small_copy_param_1];
	ld.param.u64 	%rd13, [ferry_small_copy_param_2];
	cvta.to.global.u64 	%rd1, %rd15;
	cvta.to.global.u64 	%rd2, %rd14;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mul.wide.u32 	%rd16, %r1, %r2;
	mov.u32 	%r3, %tid.x;
	cvt.u64.u32 	%rd17, %r3;
	add.s64 	%rd28, %rd16, %rd17;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd4, %r4, %r2;
	or.b64  	%rd18, %rd15, %rd14;
	and.b64  	%rd19, %rd18, 15;
	setp.eq.s64 	%p1, %rd19, 0;
	@%p1 bra 	$L__BB0_3;
	setp.ge.u64 	%p2, %rd28, %rd13;
	@%p2 bra 	$L__BB0_8;
$L__BB0_2:
	add.s64 	%rd20, %rd2, %rd28;
	ld.global.nc.u8 	%rs1, [%rd20];
	add.s64 	%rd21, %rd1, %rd28;
	st.global.u8 	[%rd21], %rs1;
	add.s64 	%rd28, %rd28, %rd4;
	setp.lt.u64 	%p3, %rd28, %rd13;
	@%p3 bra 	$L__BB0_2;
	bra.uni 	$L__BB0_8;
$L__BB0_3:
	shr.u64 	%rd7, %rd13, 4;
	setp.ge.u64 	%p4, %rd28, %rd7;
	@%p4 bra 	$L__BB0_6;
	mov.u64 	%rd29, %rd28;
$L__BB0_5:
	shl.b64 	%rd22, %rd29, 4;
	add.s64 	%rd23, %rd1, %rd22;
	add.s64 	%rd24, %rd2, %rd22;
	ld.global.nc.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd24];
	st.global.v4.u32 	[%rd23], {%r5, %r6, %r7, %r8};
	add.s64 	%rd29, %rd29, %rd4;
	setp.lt.u64 	%p5, %rd29, %rd7;
	@%p5 bra 	$L__BB0_5;
$L__BB0_6:
	and.b64  	%rd25, %rd13, -16;
	add.s64 	%rd30, %rd25, %rd28;
	setp.ge.u64 	%p6, %rd30, %rd13;
	@%p6 bra 	$L__BB0_8;
$L__BB0_7:
	add.s64 	%rd26, %rd2, %rd30;
	ld.global.nc.u8 	%rs2, [%rd26];
	add.s64 	%rd27, %rd1, %rd30;
	st.global.u8 	[%rd27], %rs2;
	add.s64 	%rd30, %rd30, %rd4;
	setp.lt.u64 	%p7, %rd30, %rd13;
	@%p7 bra 	$L__BB0_7;
$L__BB0_8:
	ret;
}
)PTX";

}  // namespace ferry::local
