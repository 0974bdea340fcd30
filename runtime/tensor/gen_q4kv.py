#!/usr/bin/env python3
"""Writes dot_q4kv_amd64.s: register-blocked Q4_K × Q8_K kernels for 1 to 4
activation vectors (q4kVecs1AVX2 .. q4kVecs4AVX2, see dot_q4kv_amd64.go),
and for 5 to 8 (q4kVecs5AVX2 .. q4kVecs8AVX2, kernel_wide); and
dot_q4kswz_amd64.s: the kernels in use rewritten for the swizzled layout
(q4kSwz1AVX2 .., see swizzled and swizzle.go).

Run from runtime/tensor: python3 gen_q4kv.py

Per row and super-block, the weights of each 64-value pair of sub-blocks
are decoded once into two registers (the lane-grouped order of
q4kRowsAVX2), and every vector's VPMADDUBSW/VPMADDWD lanes accumulate in
its own register, so weights, scales and integer lanes never touch the
stack. The per-super-block float work of all vectors is done together: the
nv mins sums are packed into one XMM (VPHADDD), and the nv products
(dmin·y.d)·sumi and d·y.d are formed lane-wise in one XMM each. Every lane
operation is the scalar one of dotQ4KQ8KGeneric (float32 products, then the
add or subtract), so each vector's result is bit-identical to it.
"""

import re

# Every kernel prefetches the weights PREFETCH bytes (~28 super-blocks)
# ahead: expert rows come from DRAM. For the single-vector kernel (decode)
# 1 KiB ahead measured about 6% faster than none on a 38 MB matrix; on 128
# MiB of expert-shaped matrices (BenchmarkDecodeStream) 4 KiB was 7-13%
# faster than 1 KiB, 2 KiB and 3 KiB in between, 6 and 8 KiB the same as 4
# KiB. The 2-8 vector kernels (prefill experts) had no prefetch until
# session 7; with it, BenchmarkQ4KExpertsCold (160 cold experts) measured
# 1.2-2.9x (median of 8 interleaved runs, load 8-21) the same kernels
# without it (those copies were dropped in session 8 for q4kVecsPrev*).
PREFETCH = 4096

# blockQ8K offsets (TestBlockQ8KLayout): d 0, bsum2 548, lqs 608, size 864.
D, BSUM2, LQS, SIZE = 0, 548, 608, 864
# bytes per super-block of the 2-8 vector kernels' side array (q4kAux):
# four 32-byte rows of bsum2 pairs, then the 8 vectors' y.d
AUX = 160


def vec_addr(off, v):
    """Address of byte off of vector v's current block: DI + v·ystride."""
    if v == 0:
        return f"{off}(DI)"
    if v == 1:
        return f"{off}(DI)(R12*1)"
    if v == 2:
        return f"{off}(DI)(R12*2)"
    return f"{off}(DI)(R11*1)"


def kernel(nv, name=None, reg=False, prefetch=PREFETCH, aux=False):
    """nv vectors; reg (nv = 1 only) keeps sums (Y11), sumf (X15) and d·y.d
    in registers instead of the frame; prefetch 0 leaves the weights to the
    hardware prefetcher; aux (nv ≥ 2) takes the vectors' mins sums and y.d
    from the packed side array (see aux_mins)."""
    name = name or f"q4kVecs{nv}AVX2"
    assert not reg or nv == 1
    assert not aux or nv >= 2
    # frame: sums 32·v, sumf at 128+4v, d·y.d at 144+4v
    o = []
    e = o.append
    if aux:
        e(f"// func {name}(w *byte, rows int, y *blockQ8K, nb, ystride int, dst *float32, dstride int, aux *byte)")
        e(f"TEXT ·{name}(SB), NOSPLIT, $160-64")
    else:
        e(f"// func {name}(w *byte, rows int, y *blockQ8K, nb, ystride int, dst *float32, dstride int)")
        e(f"TEXT ·{name}(SB), NOSPLIT, ${0 if reg else 160}-56")
    e("\tMOVQ w+0(FP), SI")
    e("\tMOVQ ystride+32(FP), R12")
    e("\tLEAQ (R12)(R12*2), R11")
    e("\tVMOVDQU q4kvPerm<>(SB), Y12")
    e("\tVMOVDQU q4kvTr<>(SB), Y13")
    e("\tVMOVDQU q4kvMask<>(SB), Y14")
    e("\tMOVQ rows+8(FP), AX")
    e("\tTESTQ AX, AX")
    e(f"\tJEQ {name}_done")
    e(f"{name}_row:")
    e("\tVPXOR Y0, Y0, Y0")
    if reg:
        e("\tVPXOR Y11, Y11, Y11")
        e("\tVPXOR X15, X15, X15")
    else:
        for v in range(nv):
            e(f"\tVMOVDQU Y0, {32 * v}(SP)")
        e("\tVMOVDQU X0, 128(SP)")
    e("\tMOVQ y+16(FP), DI")
    if aux:
        e("\tMOVQ aux+56(FP), R14")
    e("\tMOVQ nb+24(FP), R8")
    e("\tTESTQ R8, R8")
    e(f"\tJEQ {name}_finish")
    e(f"{name}_block:")
    if prefetch:
        # the weights stream from DRAM: ask for them ~28 blocks ahead
        e(f"\tPREFETCHT0 {prefetch}(SI)")
        e(f"\tPREFETCHT0 {prefetch + 64}(SI)")
        e(f"\tPREFETCHT0 {prefetch + 128}(SI)")
    # scales s (→ Y8) and mins m (→ X9 as int16), ggml's kmask shuffle
    scales_mins(e, "SI", 8, 9)
    if aux:
        aux_mins(e, "X9", "X", [0, 1, 2, 3])
        e("\tVMOVUPS 128(R14), X1")  # y.d of the vectors
    # mins: sumi_v = Σ bsum2[j]·m[j], packed into X0 lane v
    for v in range(0 if aux else nv):
        e(f"\tVPMADDWD {vec_addr(BSUM2, v)}, X9, X{v}")
    if aux:
        pass
    elif nv == 1:
        e("\tVPSHUFD $0x4e, X0, X1")
        e("\tVPADDD X1, X0, X0")
        e("\tVPSHUFD $0xb1, X0, X1")
        e("\tVPADDD X1, X0, X0")
    else:
        if nv == 2:
            e("\tVPHADDD X1, X0, X0")  # [p0 01, p0 23, p1 01, p1 23]
            e("\tVPHADDD X0, X0, X0")  # [p0, p1, p0, p1]
        elif nv == 3:
            e("\tVPHADDD X1, X0, X0")
            e("\tVPHADDD X2, X2, X2")
            e("\tVPHADDD X2, X0, X0")  # [p0, p1, p2, p2]
        else:
            e("\tVPHADDD X1, X0, X0")
            e("\tVPHADDD X3, X2, X2")
            e("\tVPHADDD X2, X0, X0")  # [p0, p1, p2, p3]
    e("\tVCVTDQ2PS X0, X0")
    # y.d of the nv vectors in X1
    if not aux:
        e(f"\tVMOVSS {vec_addr(D, 0)}, X1")
    for v in range(1, 0 if aux else nv):
        e(f"\tVINSERTPS ${v << 4:#x}, {vec_addr(D, v)}, X1, X1")
    # d, dmin as float32, broadcast
    e("\tMOVWLZX 0(SI), CX")
    e("\tVMOVD CX, X2")
    e("\tVCVTPH2PS X2, X2")
    e("\tVBROADCASTSS X2, X2")
    e("\tMOVWLZX 2(SI), CX")
    e("\tVMOVD CX, X3")
    e("\tVCVTPH2PS X3, X3")
    e("\tVBROADCASTSS X3, X3")
    if reg:
        # lane 0 only (X1's other lanes are zero): the scalar operations
        e("\tVMULSS X1, X2, X2")  # d·y.d
        e("\tVMULSS X1, X3, X3")  # dmin·y.d
        e("\tVMULSS X0, X3, X3")  # ·sumi
        e("\tVSUBSS X3, X15, X15")  # sumf -= ...
    else:
        e("\tVMULPS X1, X2, X2")  # d·y.d
        e("\tVMOVUPS X2, 144(SP)")
        e("\tVMULPS X1, X3, X3")  # dmin·y.d
        e("\tVMULPS X0, X3, X3")  # ·sumi
        e("\tVMOVUPS 128(SP), X4")
        e("\tVSUBPS X3, X4, X4")  # sumf -= ...
        e("\tVMOVUPS X4, 128(SP)")
    # integer lanes: accumulator of vector v is Y{v}
    for k in range(4):
        e(f"\tVPERMD {16 + 32 * k}(SI), Y12, Y4")
        e("\tVPSHUFB Y13, Y4, Y4")
        e("\tVPSRLW $4, Y4, Y5")
        e("\tVPAND Y14, Y4, Y4")
        e("\tVPAND Y14, Y5, Y5")
        e(f"\tVPSHUFB q4kvSc<>+{64 * k}(SB), Y8, Y6")
        e(f"\tVPSHUFB q4kvSc<>+{64 * k + 32}(SB), Y8, Y7")
        for v in range(nv):
            t0, t1 = ("Y9", "Y10") if v % 2 == 0 else ("Y11", "Y15")
            e(f"\tVPMADDUBSW {vec_addr(LQS + 64 * k, v)}, Y4, {t0}")
            e(f"\tVPMADDUBSW {vec_addr(LQS + 64 * k + 32, v)}, Y5, {t1}")
            e(f"\tVPMADDWD Y6, {t0}, {t0}")
            e(f"\tVPMADDWD Y7, {t1}, {t1}")
            if k == 0:
                e(f"\tVPADDD {t1}, {t0}, Y{v}")
            else:
                e(f"\tVPADDD {t0}, Y{v}, Y{v}")
                e(f"\tVPADDD {t1}, Y{v}, Y{v}")
    # sums_v += (d·y.d)·float(lanes_v)
    if reg:
        e("\tVBROADCASTSS X2, Y9")
        e("\tVCVTDQ2PS Y0, Y0")
        e("\tVMULPS Y9, Y0, Y0")
        e("\tVADDPS Y0, Y11, Y11")
    for v in range(nv if not reg else 0):
        e(f"\tVBROADCASTSS {144 + 4 * v}(SP), Y9")
        e(f"\tVCVTDQ2PS Y{v}, Y{v}")
        e(f"\tVMULPS Y9, Y{v}, Y{v}")
        e(f"\tVADDPS {32 * v}(SP), Y{v}, Y{v}")
        e(f"\tVMOVUPS Y{v}, {32 * v}(SP)")
    e("\tADDQ $144, SI")
    e(f"\tADDQ ${SIZE}, DI")
    if aux:
        e(f"\tADDQ ${AUX}, R14")
    e("\tDECQ R8")
    e(f"\tJNZ {name}_block")
    e(f"{name}_finish:")
    # dst[v·dstride] = sumf + sums[0] + ... + sums[7]
    e("\tMOVQ dst+40(FP), R9")
    e("\tMOVQ dstride+48(FP), R10")
    e("\tSHLQ $2, R10")
    if reg:
        # sumf + sums[0] + ... + sums[7], the lanes taken out in order
        e("\tVADDSS X11, X15, X15")
        e("\tVMOVSHDUP X11, X0")
        e("\tVADDSS X0, X15, X15")
        e("\tVMOVHLPS X11, X0, X0")
        e("\tVADDSS X0, X15, X15")
        e("\tVPERMILPS $0xff, X11, X0")
        e("\tVADDSS X0, X15, X15")
        e("\tVEXTRACTF128 $1, Y11, X11")
        e("\tVADDSS X11, X15, X15")
        e("\tVMOVSHDUP X11, X0")
        e("\tVADDSS X0, X15, X15")
        e("\tVMOVHLPS X11, X0, X0")
        e("\tVADDSS X0, X15, X15")
        e("\tVPERMILPS $0xff, X11, X0")
        e("\tVADDSS X0, X15, X15")
        e("\tVMOVSS X15, (R9)")
    for v in range(nv if not reg else 0):
        e(f"\tVMOVSS {128 + 4 * v}(SP), X0")
        for i in range(8):
            e(f"\tVADDSS {32 * v + 4 * i}(SP), X0, X0")
        e("\tVMOVSS X0, (R9)")
        if v + 1 < nv:
            e("\tADDQ R10, R9")
    e("\tADDQ $4, dst+40(FP)")
    e("\tDECQ rows+8(FP)")
    e(f"\tJNZ {name}_row")
    e(f"{name}_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e("")
    return o


# PDEP: the kernels being generated read the swizzled layout's scales
# (swizzle.go): 8 bytes of low nibbles (scale | min<<4) at 4, then at 12 a
# uint32 of the scales' top two bits (bits 2j, 2j+1) and the mins' (bits
# 16+2j, 17+2j), spread back into bytes by two PDEPs.
PDEP = False


def pdep_masks(e):
    """The two masks scales_mins' PDEP form uses: the low nibbles (CX) and
    the top two bits' places (R10)."""
    e("\tMOVQ $0x0f0f0f0f0f0f0f0f, CX")
    e("\tMOVQ $0x3030303030303030, R10")


def scales_mins(e, base, sreg, mreg, masks=True):
    """ggml's kmask shuffle of the 12 scale bytes at 4(base): the 8 6-bit
    scales, broadcast as a qword to the 4 qwords of Y{sreg}, and the 8
    6-bit mins as int16 in X{mreg}. Uses AX, BX, CX, DX, R9, R10. With
    PDEP and masks False, CX and R10 already hold pdep_masks (a kernel
    that sets them once, outside its loops)."""
    if PDEP:
        e(f"\tMOVQ 4({base}), AX")
        e(f"\tMOVL 12({base}), BX")
        if masks:
            pdep_masks(e)
        e("\tMOVQ AX, DX")
        e("\tANDQ CX, DX")  # scales' low nibbles
        e("\tSHRQ $4, AX")
        e("\tANDQ CX, AX")  # mins' low nibbles
        e("\tPDEPQ R10, BX, R9")
        e("\tORQ R9, DX")  # scales
        e("\tSHRL $16, BX")
        e("\tPDEPQ R10, BX, R9")
        e("\tORQ R9, AX")  # mins
        e(f"\tVMOVQ DX, X{sreg}")
        e(f"\tVPBROADCASTQ X{sreg}, Y{sreg}")
        e(f"\tVMOVQ AX, X{mreg}")
        e(f"\tVPMOVZXBW X{mreg}, X{mreg}")
        return
    e(f"\tMOVL 4({base}), AX")
    e(f"\tMOVL 8({base}), BX")
    e(f"\tMOVL 12({base}), CX")
    e("\tMOVL AX, DX")
    e("\tANDL $0x3f3f3f3f, DX")
    e("\tMOVL AX, R9")
    e("\tSHRL $6, R9")
    e("\tANDL $0x03030303, R9")
    e("\tSHLL $4, R9")
    e("\tMOVL CX, R10")
    e("\tANDL $0x0f0f0f0f, R10")
    e("\tORL R10, R9")
    e("\tSHLQ $32, R9")
    e("\tORQ R9, DX")
    e(f"\tVMOVQ DX, X{sreg}")
    e(f"\tVPBROADCASTQ X{sreg}, Y{sreg}")
    e("\tMOVL BX, DX")
    e("\tANDL $0x3f3f3f3f, DX")
    e("\tMOVL BX, R9")
    e("\tSHRL $6, R9")
    e("\tANDL $0x03030303, R9")
    e("\tSHLL $4, R9")
    e("\tMOVL CX, R10")
    e("\tSHRL $4, R10")
    e("\tANDL $0x0f0f0f0f, R10")
    e("\tORL R10, R9")
    e("\tSHLQ $32, R9")
    e("\tORQ R9, DX")
    e(f"\tVMOVQ DX, X{mreg}")
    e(f"\tVPMOVZXBW X{mreg}, X{mreg}")


def lanes_out(e, acc, sums, t):
    """The 8 float lanes of Y{sums} added in order to lane 0 of X{acc}
    (acc + sums[0] + ... + sums[7]); clobbers Y{sums} and X{t}."""
    t = f"X{t}"
    a, s = f"X{acc}", f"X{sums}"
    e(f"\tVADDSS {s}, {a}, {a}")
    e(f"\tVMOVSHDUP {s}, {t}")
    e(f"\tVADDSS {t}, {a}, {a}")
    e(f"\tVMOVHLPS {s}, {t}, {t}")
    e(f"\tVADDSS {t}, {a}, {a}")
    e(f"\tVPERMILPS $0xff, {s}, {t}")
    e(f"\tVADDSS {t}, {a}, {a}")
    e(f"\tVEXTRACTF128 $1, Y{sums}, {s}")
    e(f"\tVADDSS {s}, {a}, {a}")
    e(f"\tVMOVSHDUP {s}, {t}")
    e(f"\tVADDSS {t}, {a}, {a}")
    e(f"\tVMOVHLPS {s}, {t}, {t}")
    e(f"\tVADDSS {t}, {a}, {a}")
    e(f"\tVPERMILPS $0xff, {s}, {t}")
    e(f"\tVADDSS {t}, {a}, {a}")


def kernel_x2(prefetch=PREFETCH):
    """q4kVecs1x2AVX2: the single-vector kernel (kernel(1, reg=True)) for
    two rows per pass, row A at SI and row B at SI + R13 (R13 = 144·nb).
    Per super-block the two rows share the activation loads (Y2, Y3, once
    per 64 values for both rows), the y.d load, one VCVTPH2PS of both rows'
    d and dmin ([dA, dminA, dB, dminB] in X6), one VMULPS by y.d, one
    VPMADDWD of both rows' mins against bsum2 (row A in the low, row B in
    the high 128 bits), one horizontal sum and one multiply and subtract
    for both rows' sumf (lanes 1 and 3 of X15). Every lane operation is
    kernel(1)'s scalar one (float32 products, then the add or subtract), so
    each row's result is bit-identical to it. Y0/Y1 integer lanes and
    Y10/Y11 float sums of rows A/B, Y8/Y9 their scales, Y12 the VPERMD
    index, Y13 d·y.d of both rows, Y14 the nibble mask; Y2-Y7 scratch."""
    name = "q4kVecs1x2AVX2"
    o = []
    e = o.append
    e(f"// func {name}(w *byte, pairs int, y *blockQ8K, nb int, dst *float32)")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-40")
    e("\tMOVQ w+0(FP), SI")
    e("\tMOVQ nb+24(FP), R13")
    e("\tIMUL3Q $144, R13, R13")
    e("\tMOVQ dst+32(FP), R11")
    e("\tVMOVDQU q4kvPerm<>(SB), Y12")
    e("\tVMOVDQU q4kvMask<>(SB), Y14")
    if PDEP:
        pdep_masks(e)  # CX and R10 hold them for the whole call
    e("\tMOVQ pairs+8(FP), AX")
    e("\tTESTQ AX, AX")
    e(f"\tJEQ {name}_done")
    e(f"{name}_row:")
    e("\tVPXOR Y10, Y10, Y10")
    e("\tVPXOR Y11, Y11, Y11")
    e("\tVPXOR X15, X15, X15")
    e("\tMOVQ y+16(FP), DI")
    if prefetch:
        e(f"\tLEAQ {prefetch}(SI)(R13*2), R12")
    e("\tMOVQ nb+24(FP), R8")
    e("\tTESTQ R8, R8")
    e(f"\tJEQ {name}_finish")
    e(f"{name}_block:")
    if prefetch:
        # one pointer sweeps the pair's bytes (288 per block) linearly,
        # prefetch bytes past the pair's end: prefetching ahead of each
        # row's own position (two streams) measured 0.84x the one-row
        # kernel on DRAM-resident 2048-column rows (as gen_q4kv512.py found)
        for k in range(5):
            e(f"\tPREFETCHT0 {64 * k}(R12)")
        e("\tADDQ $288, R12")
    scales_mins(e, "SI", 8, 4, masks=False)
    e("\tLEAQ (SI)(R13*1), R14")
    scales_mins(e, "R14", 9, 5, masks=False)
    # mins: sumi of row A in lanes 0-3, of row B in lanes 4-7
    e("\tVINSERTI128 $1, X5, Y4, Y4")
    e(f"\tVBROADCASTI128 {BSUM2}(DI), Y5")
    e("\tVPMADDWD Y5, Y4, Y4")
    e("\tVPSHUFD $0x4e, Y4, Y5")
    e("\tVPADDD Y5, Y4, Y4")
    e("\tVPSHUFD $0xb1, Y4, Y5")
    e("\tVPADDD Y5, Y4, Y4")
    e("\tVEXTRACTI128 $1, Y4, X5")
    e("\tVPBLENDD $0x0c, X5, X4, X4")  # [sumiA, sumiA, sumiB, sumiB]
    e("\tVCVTDQ2PS X4, X4")
    # [dA, dminA, dB, dminB] · y.d
    e("\tVMOVD 0(SI), X6")
    e("\tVPINSRD $1, 0(R14), X6, X6")
    e("\tVCVTPH2PS X6, X6")
    e(f"\tVBROADCASTSS {D}(DI), X7")
    e("\tVMULPS X7, X6, X13")  # d·y.d (lanes 0, 2), dmin·y.d (lanes 1, 3)
    e("\tVMULPS X4, X13, X4")  # lanes 1, 3: (dmin·y.d)·sumi
    e("\tVSUBPS X4, X15, X15")  # sumf of rows A, B in lanes 1, 3
    for k in range(4):
        e(f"\tVMOVDQU {LQS + 64 * k}(DI), Y2")
        e(f"\tVMOVDQU {LQS + 64 * k + 32}(DI), Y3")
        for base, sc, acc in (("SI", "Y8", "Y0"), ("R14", "Y9", "Y1")):
            e(f"\tVPERMD {16 + 32 * k}({base}), Y12, Y4")
            e("\tVPSHUFB q4kvTr<>(SB), Y4, Y4")
            e("\tVPSRLW $4, Y4, Y5")
            e("\tVPAND Y14, Y4, Y4")
            e("\tVPAND Y14, Y5, Y5")
            e(f"\tVPSHUFB q4kvSc<>+{64 * k}(SB), {sc}, Y6")
            e(f"\tVPSHUFB q4kvSc<>+{64 * k + 32}(SB), {sc}, Y7")
            e("\tVPMADDUBSW Y2, Y4, Y4")
            e("\tVPMADDUBSW Y3, Y5, Y5")
            e("\tVPMADDWD Y6, Y4, Y4")
            e("\tVPMADDWD Y7, Y5, Y5")
            if k == 0:
                e(f"\tVPADDD Y5, Y4, {acc}")
            else:
                e(f"\tVPADDD Y4, {acc}, {acc}")
                e(f"\tVPADDD Y5, {acc}, {acc}")
    # sums += (d·y.d)·float(lanes), row A then row B
    e("\tVBROADCASTSS X13, Y4")
    e("\tVCVTDQ2PS Y0, Y0")
    e("\tVMULPS Y4, Y0, Y0")
    e("\tVADDPS Y0, Y10, Y10")
    e("\tVPERMILPS $0xaa, X13, X5")
    e("\tVBROADCASTSS X5, Y5")
    e("\tVCVTDQ2PS Y1, Y1")
    e("\tVMULPS Y5, Y1, Y1")
    e("\tVADDPS Y1, Y11, Y11")
    e("\tADDQ $144, SI")
    e(f"\tADDQ ${SIZE}, DI")
    e("\tDECQ R8")
    e(f"\tJNZ {name}_block")
    e(f"{name}_finish:")
    # Both rows at once, row A in lane 0 and row B in lane 1: sumf (lanes
    # 1 and 3 of X15) + sums[0] + ... + sums[7], each VADDPS lane the
    # VADDSS lanes_out would do, in the same order, so the bits are the
    # same, in half the instructions.
    e("\tVPERMILPS $0x0d, X15, X0")  # [sumfA, sumfB, ., .]
    e("\tVUNPCKLPS Y11, Y10, Y2")  # [A0 B0 A1 B1 | A4 B4 A5 B5]
    e("\tVUNPCKHPS Y11, Y10, Y3")  # [A2 B2 A3 B3 | A6 B6 A7 B7]
    for half in range(2):
        if half:
            e("\tVEXTRACTF128 $1, Y2, X2")
            e("\tVEXTRACTF128 $1, Y3, X3")
        for r in ("X2", "X3"):
            e(f"\tVADDPS {r}, X0, X0")
            e(f"\tVMOVHLPS {r}, {r}, X4")
            e("\tVADDPS X4, X0, X0")
    e("\tVMOVLPS X0, (R11)")
    e("\tADDQ $8, R11")
    e("\tADDQ R13, SI")  # past row B
    e("\tDECQ pairs+8(FP)")
    e(f"\tJNZ {name}_row")
    e(f"{name}_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e("")
    return o


def kernel2_reg(prefetch=PREFETCH):
    """q4kVecs2AVX2: two vectors with every sum in a register (kernel(2)
    kept its float sums, sumf and d·y.d in the frame). Per super-block one
    VCVTPH2PS gives d and dmin, one VMULPS forms [d·y.d0, d·y.d1, dmin·y.d0,
    dmin·y.d1] (X13), one more and a VSUBPS update both vectors' sumf
    (lanes 2 and 3 of X15). Y0/Y1 integer lanes and Y2/Y3 float sums of the
    two vectors, Y8 scales, Y12 the VPERMD index, Y14 the nibble mask (the
    byte transpose is a memory operand); the second vector's products
    overwrite the decoded weights. The same float32 operations as kernel(2)
    per lane, so results are bit-identical to it."""
    name = "q4kVecs2AVX2"
    o = []
    e = o.append
    e(f"// func {name}(w *byte, rows int, y *blockQ8K, nb, ystride int, dst *float32, dstride int)")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-56")
    e("\tMOVQ w+0(FP), SI")
    e("\tMOVQ ystride+32(FP), R12")
    e("\tMOVQ dst+40(FP), R11")
    e("\tMOVQ dstride+48(FP), R13")
    e("\tSHLQ $2, R13")
    e("\tVMOVDQU q4kvPerm<>(SB), Y12")
    e("\tVMOVDQU q4kvMask<>(SB), Y14")
    e("\tMOVQ rows+8(FP), R14")
    e("\tTESTQ R14, R14")
    e(f"\tJEQ {name}_done")
    e(f"{name}_row:")
    e("\tVPXOR Y2, Y2, Y2")
    e("\tVPXOR Y3, Y3, Y3")
    e("\tVPXOR X15, X15, X15")
    e("\tMOVQ y+16(FP), DI")
    e("\tMOVQ nb+24(FP), R8")
    e("\tTESTQ R8, R8")
    e(f"\tJEQ {name}_finish")
    e(f"{name}_block:")
    if prefetch:
        for off in (0, 64, 128):
            e(f"\tPREFETCHT0 {prefetch + off}(SI)")
    scales_mins(e, "SI", 8, 9)
    e(f"\tVPMADDWD {BSUM2}(DI), X9, X10")
    e(f"\tVPMADDWD {BSUM2}(DI)(R12*1), X9, X11")
    e("\tVPHADDD X11, X10, X10")
    e("\tVPHADDD X10, X10, X10")  # [sumi0, sumi1, sumi0, sumi1]
    e("\tVCVTDQ2PS X10, X10")
    e(f"\tVMOVSS {D}(DI), X11")
    e(f"\tVINSERTPS $0x10, {D}(DI)(R12*1), X11, X11")
    e("\tVMOVLHPS X11, X11, X11")  # [y.d0, y.d1, y.d0, y.d1]
    e("\tVPBROADCASTD 0(SI), X9")
    e("\tVCVTPH2PS X9, X9")  # [d, dmin, d, dmin]
    e("\tVPERMILPS $0x50, X9, X9")  # [d, d, dmin, dmin]
    e("\tVMULPS X11, X9, X13")  # [d·y.d0, d·y.d1, dmin·y.d0, dmin·y.d1]
    e("\tVMULPS X10, X13, X10")  # lanes 2, 3: (dmin·y.d)·sumi
    e("\tVSUBPS X10, X15, X15")  # sumf of the vectors in lanes 2, 3
    for k in range(4):
        e(f"\tVPERMD {16 + 32 * k}(SI), Y12, Y4")
        e("\tVPSHUFB q4kvTr<>(SB), Y4, Y4")
        e("\tVPSRLW $4, Y4, Y5")
        e("\tVPAND Y14, Y4, Y4")
        e("\tVPAND Y14, Y5, Y5")
        e(f"\tVPSHUFB q4kvSc<>+{64 * k}(SB), Y8, Y6")
        e(f"\tVPSHUFB q4kvSc<>+{64 * k + 32}(SB), Y8, Y7")
        for v, (t0, t1) in enumerate((("Y9", "Y10"), ("Y4", "Y5"))):
            e(f"\tVPMADDUBSW {vec_addr(LQS + 64 * k, v)}, Y4, {t0}")
            e(f"\tVPMADDUBSW {vec_addr(LQS + 64 * k + 32, v)}, Y5, {t1}")
            e(f"\tVPMADDWD Y6, {t0}, {t0}")
            e(f"\tVPMADDWD Y7, {t1}, {t1}")
            if k == 0:
                e(f"\tVPADDD {t1}, {t0}, Y{v}")
            else:
                e(f"\tVPADDD {t0}, Y{v}, Y{v}")
                e(f"\tVPADDD {t1}, Y{v}, Y{v}")
    e("\tVBROADCASTSS X13, Y9")
    e("\tVCVTDQ2PS Y0, Y0")
    e("\tVMULPS Y9, Y0, Y0")
    e("\tVADDPS Y0, Y2, Y2")
    e("\tVMOVSHDUP X13, X10")
    e("\tVBROADCASTSS X10, Y10")
    e("\tVCVTDQ2PS Y1, Y1")
    e("\tVMULPS Y10, Y1, Y1")
    e("\tVADDPS Y1, Y3, Y3")
    e("\tADDQ $144, SI")
    e(f"\tADDQ ${SIZE}, DI")
    e("\tDECQ R8")
    e(f"\tJNZ {name}_block")
    e(f"{name}_finish:")
    e("\tVMOVHLPS X15, X0, X0")  # lane 0 sumf0, lane 1 sumf1
    e("\tVMOVSHDUP X0, X1")  # lane 0 sumf1
    lanes_out(e, 0, 2, 4)
    lanes_out(e, 1, 3, 5)
    e("\tVMOVSS X0, (R11)")
    e("\tVMOVSS X1, (R11)(R13*1)")
    e("\tADDQ $4, R11")
    e("\tDECQ R14")
    e(f"\tJNZ {name}_row")
    e(f"{name}_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e("")
    return o


def tfinish(e, nv, sumf):
    """The row's results of nv (5-8) vectors whose float sums are in the
    frame (vector v's 8 lanes at 32v(SP), its sumf at sumf+4v(SP)), stored
    to dst + v·dstride (R9, R10 = 4·dstride), transposed: the vectors'
    sums become 8 columns C_l = (sums_0[l], ..., sums_7[l]) (VUNPCKLPS/HPS,
    VSHUFPS, VPERM2F128), then acc = sumf; acc += C_0; ...; acc += C_7
    lane-wise, which is each vector's sumf + sums[0] + ... + sums[7] in
    that order, as the per-vector VADDSS chain: 8 VADDPS for all vectors
    instead of 8 VADDSS and 8 loads per vector (1.04-1.05x at 6-8 vectors
    on 2048x512, where a row is 2 super-blocks). Vectors ≥ nv read zeros
    and are not stored. Clobbers Y0-Y15."""
    assert 5 <= nv <= 8
    for v in range(8):
        if v < nv:
            e(f"\tVMOVUPS {32 * v}(SP), Y{v}")
        else:
            e(f"\tVXORPS Y{v}, Y{v}, Y{v}")
    # t: pairs (r0,r1) (r2,r3) (r4,r5) (r6,r7) interleaved into Y8-Y15
    for i in range(4):
        e(f"\tVUNPCKLPS Y{2 * i + 1}, Y{2 * i}, Y{8 + 2 * i}")
        e(f"\tVUNPCKHPS Y{2 * i + 1}, Y{2 * i}, Y{9 + 2 * i}")
    # s_j (vectors 0-3) and s_4+j (vectors 4-7) hold lanes j | j + 4
    for g in range(2):
        t0, t1, t2, t3 = (8 + 4 * g + i for i in range(4))
        e(f"\tVSHUFPS $0x44, Y{t2}, Y{t0}, Y{4 * g + 0}")
        e(f"\tVSHUFPS $0xee, Y{t2}, Y{t0}, Y{4 * g + 1}")
        e(f"\tVSHUFPS $0x44, Y{t3}, Y{t1}, Y{4 * g + 2}")
        e(f"\tVSHUFPS $0xee, Y{t3}, Y{t1}, Y{4 * g + 3}")
    # C_j = [s_j.lo, s_4+j.lo] (Y8+j), C_j+4 = the high halves (Y12+j)
    for j in range(4):
        e(f"\tVPERM2F128 $0x20, Y{4 + j}, Y{j}, Y{8 + j}")
        e(f"\tVPERM2F128 $0x31, Y{4 + j}, Y{j}, Y{12 + j}")
    e(f"\tVMOVUPS {sumf}(SP), Y0")
    for c in range(8, 16):
        e(f"\tVADDPS Y{c}, Y0, Y0")
    e("\tVEXTRACTF128 $1, Y0, X1")
    for v in range(nv):
        x = "X0" if v < 4 else "X1"
        if v % 4 == 0:
            e(f"\tVMOVSS {x}, (R9)")
        else:
            e(f"\tVEXTRACTPS ${v % 4}, {x}, (R9)")
        if v + 1 < nv:
            e("\tADDQ R10, R9")


def wide_addr(off, v):
    """Address of byte off of vector v's block for nv = 5..8: vectors 0-3
    from DI, 4-7 from R13 = DI + 4·ystride."""
    base = "DI" if v < 4 else "R13"
    return [f"{off}({base})", f"{off}({base})(R12*1)", f"{off}({base})(R12*2)", f"{off}({base})(R11*1)"][v % 4]


def hsum4(e, regs):
    """Packs the 4-lane int32 sums of XMM registers regs (1-4 of them) into
    the lanes of the first: lane i = sum of regs[i] (the last repeated)."""
    x = [f"X{r}" for r in regs]
    if len(x) == 1:
        e(f"\tVPHADDD {x[0]}, {x[0]}, {x[0]}")
        e(f"\tVPHADDD {x[0]}, {x[0]}, {x[0]}")
    elif len(x) == 2:
        e(f"\tVPHADDD {x[1]}, {x[0]}, {x[0]}")
        e(f"\tVPHADDD {x[0]}, {x[0]}, {x[0]}")
    elif len(x) == 3:
        e(f"\tVPHADDD {x[1]}, {x[0]}, {x[0]}")
        e(f"\tVPHADDD {x[2]}, {x[2]}, {x[2]}")
        e(f"\tVPHADDD {x[2]}, {x[0]}, {x[0]}")
    else:
        e(f"\tVPHADDD {x[1]}, {x[0]}, {x[0]}")
        e(f"\tVPHADDD {x[3]}, {x[2]}, {x[2]}")
        e(f"\tVPHADDD {x[2]}, {x[0]}, {x[0]}")


def aux_mins(e, m, x, t):
    """The mins sums of all vectors from the side array at R14: m holds the
    8 int16 mins m[j] (pairs m[2i], m[2i+1] are its dwords i), t four
    scratch register numbers (t[0] is X0/Y0, which gets the sums); x is "X"
    (lanes 0-3) or "Y" (lanes 0-7). Lane v of register t[0] = Σ_i
    (bsum2[2i]·m[2i] + bsum2[2i+1]·m[2i+1]) of vector v: the side array
    holds, per block, the vectors' bsum2 pairs i as 8 dwords (32 bytes) for
    i = 0..3, then their y.d (32 bytes). Integer sums, so their order does
    not matter."""
    for i in range(4):
        e(f"\tVPSHUFD ${0x55 * i:#04x}, {x}{m[1:]}, {x}{t[i]}")
    for i in range(4):
        e(f"\tVPMADDWD {32 * i}(R14), {x}{t[i]}, {x}{t[i]}")
    e(f"\tVPADDD {x}{t[1]}, {x}{t[0]}, {x}{t[0]}")
    e(f"\tVPADDD {x}{t[3]}, {x}{t[2]}, {x}{t[2]}")
    e(f"\tVPADDD {x}{t[2]}, {x}{t[0]}, {x}{t[0]}")


def kernel_wide(nv, name=None, prefetch=PREFETCH, aux=False, tf=False):
    """q4kVecs5AVX2 .. q4kVecs8AVX2: the scheme of kernel(nv) for 5 to 8
    vectors. Integer accumulators Y0..Y(nv-1), weights Y8/Y9, scales
    Y10/Y11 (from Y12), the VPERMD index in Y13, temporaries Y14/Y15; the
    nibble mask and byte transpose are memory operands. The per-block float
    work of the nv vectors is one YMM op each (lanes 0-3 vectors 0-3, lanes
    4-7 vectors 4-7), the same float32 operations as kernel(nv)."""
    assert 5 <= nv <= 8
    name = name or f"q4kVecs{nv}AVX2"
    SUMF, DY = 256, 288  # frame: sums 32·v, sumf 256+4v, d·y.d 288+4v
    o = []
    e = o.append
    if aux:
        e(f"// func {name}(w *byte, rows int, y *blockQ8K, nb, ystride int, dst *float32, dstride int, aux *byte)")
        e(f"TEXT ·{name}(SB), NOSPLIT, $320-64")
    else:
        e(f"// func {name}(w *byte, rows int, y *blockQ8K, nb, ystride int, dst *float32, dstride int)")
        e(f"TEXT ·{name}(SB), NOSPLIT, $320-56")
    e("\tMOVQ w+0(FP), SI")
    e("\tMOVQ ystride+32(FP), R12")
    e("\tLEAQ (R12)(R12*2), R11")
    e("\tVMOVDQU q4kvPerm<>(SB), Y13")
    e("\tMOVQ rows+8(FP), AX")
    e("\tTESTQ AX, AX")
    e(f"\tJEQ {name}_done")
    e(f"{name}_row:")
    e("\tVPXOR Y0, Y0, Y0")
    for v in range(nv):
        e(f"\tVMOVDQU Y0, {32 * v}(SP)")
    e(f"\tVMOVDQU Y0, {SUMF}(SP)")
    e("\tMOVQ y+16(FP), DI")
    if aux:
        e("\tMOVQ aux+56(FP), R14")
    e("\tMOVQ nb+24(FP), R8")
    e("\tTESTQ R8, R8")
    e(f"\tJEQ {name}_finish")
    e(f"{name}_block:")
    if prefetch:
        e(f"\tPREFETCHT0 {prefetch}(SI)")
        e(f"\tPREFETCHT0 {prefetch + 64}(SI)")
        e(f"\tPREFETCHT0 {prefetch + 128}(SI)")
    e("\tLEAQ (DI)(R12*4), R13")
    # scales → Y12, mins → X14 as int16 (the kmask shuffle of kernel())
    scales_mins(e, "SI", 12, 14)
    if aux:
        e("\tVINSERTI128 $1, X14, Y14, Y14")
        aux_mins(e, "X14", "Y", [0, 4, 5, 6])
        e("\tVCVTDQ2PS Y0, Y0")
        e("\tVMOVUPS 128(R14), Y1")  # y.d of the vectors
    else:
        # mins: lane v of Y0 = Σ bsum2[j]·m[j] of vector v
        for v in range(nv):
            e(f"\tVPMADDWD {wide_addr(BSUM2, v)}, X14, X{v}")
        hsum4(e, [0, 1, 2, 3])
        hsum4(e, list(range(4, nv)))
        e("\tVINSERTI128 $1, X4, Y0, Y0")
        e("\tVCVTDQ2PS Y0, Y0")
        # y.d of the vectors: lanes 0-3 in X1, 4-7 in X2, then Y1
        e(f"\tVMOVSS {wide_addr(D, 0)}, X1")
        for v in range(1, 4):
            e(f"\tVINSERTPS ${v << 4:#x}, {wide_addr(D, v)}, X1, X1")
        e(f"\tVMOVSS {wide_addr(D, 4)}, X2")
        for v in range(5, nv):
            e(f"\tVINSERTPS ${(v - 4) << 4:#x}, {wide_addr(D, v)}, X2, X2")
        e("\tVINSERTF128 $1, X2, Y1, Y1")
    e("\tMOVWLZX 0(SI), CX")
    e("\tVMOVD CX, X2")
    e("\tVCVTPH2PS X2, X2")
    e("\tVBROADCASTSS X2, Y2")
    e("\tMOVWLZX 2(SI), CX")
    e("\tVMOVD CX, X3")
    e("\tVCVTPH2PS X3, X3")
    e("\tVBROADCASTSS X3, Y3")
    e("\tVMULPS Y1, Y2, Y2")  # d·y.d
    e(f"\tVMOVUPS Y2, {DY}(SP)")
    e("\tVMULPS Y1, Y3, Y3")  # dmin·y.d
    e("\tVMULPS Y0, Y3, Y3")  # ·sumi
    e(f"\tVMOVUPS {SUMF}(SP), Y4")
    e("\tVSUBPS Y3, Y4, Y4")
    e(f"\tVMOVUPS Y4, {SUMF}(SP)")
    for k in range(4):
        e(f"\tVPERMD {16 + 32 * k}(SI), Y13, Y8")
        e("\tVPSHUFB q4kvTr<>(SB), Y8, Y8")
        e("\tVPSRLW $4, Y8, Y9")
        e("\tVPAND q4kvMask<>(SB), Y8, Y8")
        e("\tVPAND q4kvMask<>(SB), Y9, Y9")
        e(f"\tVPSHUFB q4kvSc<>+{64 * k}(SB), Y12, Y10")
        e(f"\tVPSHUFB q4kvSc<>+{64 * k + 32}(SB), Y12, Y11")
        for v in range(nv):
            e(f"\tVPMADDUBSW {wide_addr(LQS + 64 * k, v)}, Y8, Y14")
            e(f"\tVPMADDUBSW {wide_addr(LQS + 64 * k + 32, v)}, Y9, Y15")
            e("\tVPMADDWD Y10, Y14, Y14")
            e("\tVPMADDWD Y11, Y15, Y15")
            if k == 0:
                e(f"\tVPADDD Y15, Y14, Y{v}")
            else:
                e(f"\tVPADDD Y14, Y{v}, Y{v}")
                e(f"\tVPADDD Y15, Y{v}, Y{v}")
    for v in range(nv):
        e(f"\tVBROADCASTSS {DY + 4 * v}(SP), Y14")
        e(f"\tVCVTDQ2PS Y{v}, Y{v}")
        e(f"\tVMULPS Y14, Y{v}, Y{v}")
        e(f"\tVADDPS {32 * v}(SP), Y{v}, Y{v}")
        e(f"\tVMOVUPS Y{v}, {32 * v}(SP)")
    e("\tADDQ $144, SI")
    e(f"\tADDQ ${SIZE}, DI")
    if aux:
        e(f"\tADDQ ${AUX}, R14")
    e("\tDECQ R8")
    e(f"\tJNZ {name}_block")
    e(f"{name}_finish:")
    e("\tMOVQ dst+40(FP), R9")
    e("\tMOVQ dstride+48(FP), R10")
    e("\tSHLQ $2, R10")
    if tf:
        tfinish(e, nv, SUMF)
        e("\tVMOVDQU q4kvPerm<>(SB), Y13")  # clobbered by tfinish
    for v in range(nv if not tf else 0):
        e(f"\tVMOVSS {SUMF + 4 * v}(SP), X0")
        for i in range(8):
            e(f"\tVADDSS {32 * v + 4 * i}(SP), X0, X0")
        e("\tVMOVSS X0, (R9)")
        if v + 1 < nv:
            e("\tADDQ R10, R9")
    e("\tADDQ $4, dst+40(FP)")
    e("\tDECQ rows+8(FP)")
    e(f"\tJNZ {name}_row")
    e(f"{name}_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e("")
    return o


def data(name, words):
    o = [f"DATA {name}<>+{8 * i}(SB)/8, ${w:#018x}" for i, w in enumerate(words)]
    o.append(f"GLOBL {name}<>(SB), RODATA|NOPTR, ${8 * len(words)}")
    o.append("")
    return o


out = [
    "// Code generated by gen_q4kv.py; DO NOT EDIT.",
    "",
    "//go:build amd64 && !purego",
    "",
    '#include "textflag.h"',
    "",
    "// Register-blocked Q4_K × Q8_K rows for nv = 1..8 vectors. The constants",
    "// are dot_q4k_amd64.s's (file-local there). Frame: sums of vector v at 32v,",
    "// its sumf at 128+4v, d·y.d of the block at 144+4v.",
    "",
]
# the constants every kernel file defines (file-local in Go assembly)
CONSTS = (data("q4kvPerm", [0x0000000200000000, 0x0000000600000004, 0x0000000300000001, 0x0000000700000005])
          + data("q4kvTr", [0x0d0905010c080400, 0x0f0b07030e0a0602] * 2)
          + data("q4kvMask", [0x0f0f0f0f0f0f0f0f] * 4)
          + data("q4kvSc", [0x8000800080008000 + 0x0001000100010001 * j for j in range(8) for _ in range(4)]))
out += CONSTS
out += kernel(1, reg=True)
out += kernel_x2()
# two vectors: the side array measured 0.99x of gathering (two VPMADDWD
# and two VPHADDD per super-block against four VPMADDWD, plus its fill);
# sums in registers (kernel2_reg), the frame-based kernel(2) kept as
# q4kVecsPrev2AVX2 for the side-by-side benchmarks
out += kernel2_reg()
# 3-4 vectors keep the per-vector VADDSS finish: tfinish's transposed one
# measured 0.96-0.98x on 2048x512 (it is 1.04-1.05x at 6-8 vectors)
for nv in range(3, 5):
    out += kernel(nv, aux=True)
for nv in range(5, 9):
    out += kernel_wide(nv, aux=True, tf=True)
# the previous single-vector kernel (sums and sumf in the frame), kept for
# the decode benchmarks' side-by-side comparison (prevDecodeKernels)
out += kernel(1, name="q4kVecs1FrameAVX2")
# the previous 2 and 5-8 vector kernels (2: sums in the frame; 5-8: each
# row finished with a VADDSS chain per vector instead of tfinish), for the
# prefill benchmarks' side-by-side comparison (prevVecsKernels)
out += kernel(2, name="q4kVecsPrev2AVX2")
for nv in range(5, 9):
    out += kernel_wide(nv, name=f"q4kVecsPrev{nv}AVX2", aux=True)
with open("dot_q4kv_amd64.s", "w") as f:
    f.write("\n".join(out))


def swizzled(lines, old, new):
    """The kernel in lines renamed from old to new, for weights in the
    swizzled layout (swizzle.go): each VPERMD + VPSHUFB q4kvTr pair that
    puts a 32-byte run of quants in lane order becomes one VMOVDQU, since
    Swizzle stored them in that order. The kernel must have been generated
    with PDEP set, so that scales_mins reads the layout's scales; the rest
    is unchanged, so the integer lanes, and every result, are the same as
    the original kernel's on the unswizzled weights."""
    text = "\n".join(lines).replace(old, new)
    text, n = re.subn(
        r"\tVPERMD (\S+), Y1[23], (Y\d+)\n\tVPSHUFB (?:q4kvTr<>\(SB\)|Y13), \2, \2",
        r"\tVMOVDQU \1, \2", text)
    assert n > 0 and "VPERMD" not in text, old
    return text.split("\n")


swz = [
    "// Code generated by gen_q4kv.py; DO NOT EDIT.",
    "",
    "//go:build amd64 && !purego",
    "",
    '#include "textflag.h"',
    "",
    "// The kernels of dot_q4kv_amd64.s in use, for Q4_K weights in the",
    "// swizzled layout (swizzle.go): quants loaded in lane order with one",
    "// VMOVDQU per 32 bytes instead of a VPERMD and a VPSHUFB, and scales and",
    "// mins unpacked with two PDEPs.",
    "",
]
swz += CONSTS
PDEP = True
swz += swizzled(kernel(1, reg=True), "q4kVecs1AVX2", "q4kSwz1AVX2")
swz += swizzled(kernel_x2(), "q4kVecs1x2AVX2", "q4kSwz1x2AVX2")
swz += swizzled(kernel2_reg(), "q4kVecs2AVX2", "q4kSwz2AVX2")
for nv in range(3, 5):
    swz += swizzled(kernel(nv, aux=True), f"q4kVecs{nv}AVX2", f"q4kSwz{nv}AVX2")
for nv in range(5, 9):
    swz += swizzled(kernel_wide(nv, aux=True, tf=True), f"q4kVecs{nv}AVX2", f"q4kSwz{nv}AVX2")
with open("dot_q4kswz_amd64.s", "w") as f:
    f.write("\n".join(swz))
