package tensor

import (
	"encoding/binary"
	"fmt"
)

// The swizzled layout is an in-memory form of Q4_K rows for this machine's
// kernels, made once at load (Swizzle). Each super-block keeps its 144
// bytes and its d and dmin, and changes two things:
//   - each 32-byte run of quants is stored in the order the AVX2 kernels
//     bring it into their lanes (a VPERMD and a VPSHUFB per run on GGUF's
//     layout), so they load it with one instruction instead of three;
//   - the 12 bytes of 6-bit scales and mins become 8 bytes of low nibbles
//     (scale j | min j<<4 at byte 4+j) and, at byte 12, a uint32 holding
//     scale j's top two bits at bits 2j and min j's at 16+2j, which the
//     kernels spread back with two PDEPs (about 13 instructions instead
//     of 29).
// The kernels' integer lanes hold the same sums, so every product is
// bit-identical to the same product on the file's bytes. Weights the
// expert store reads later stay in GGUF's layout unless the store swizzles
// them too.

// swizzledKernels are the kernels for swizzled matrices (Matrix.Swizzled),
// by type; the types in it are the ones Swizzle rearranges on this machine.
var swizzledKernels = swizzleKernels()

// swizzleFast, where set, is Swizzle's loop for Q4_K in assembly (amd64);
// tests turn it off to check the loop and the assembly against each other.
var swizzleFast func(w *byte, blocks int)

// q4kSwizzle[i] is the byte of a GGUF 32-byte run of Q4_K quants that the
// swizzled run holds at i: VPERMD by q4kvPerm's dword order, then VPSHUFB by
// q4kvTr's byte order within each 128-bit half (gen_q4kv.py).
var q4kSwizzle = func() (p [32]byte) {
	dwords := [8]int{0, 2, 4, 6, 1, 3, 5, 7}
	tr := [16]int{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}
	for i := range p {
		b := i&^15 + tr[i&15] // byte of the VPERMD output
		p[i] = byte(4*dwords[b/4] + b%4)
	}
	return p
}()

// Swizzles reports whether Swizzle rearranges rows of type t on this
// machine (Q4_K where the AVX2 kernels run).
func Swizzles(t Type) bool {
	_, ok := swizzledKernels[t]
	return ok
}

// Swizzle rearranges data, whole rows of type t, in place into the swizzled
// layout and reports true; where t has no swizzled layout on this machine
// (Swizzles) it leaves data as it is and reports false. data must be a
// whole number of super-blocks.
func Swizzle(t Type, data []byte) (bool, error) {
	if !Swizzles(t) {
		return false, nil
	}
	if len(data)%144 != 0 {
		return false, fmt.Errorf("tensor: swizzle %d bytes of %s: not a whole number of 144-byte super-blocks", len(data), t)
	}
	if swizzleFast != nil {
		if len(data) > 0 {
			swizzleFast(&data[0], len(data)/144)
		}
		return true, nil
	}
	var run [32]byte
	for off := 0; off < len(data); off += 144 {
		b := data[off : off+144]
		sc, mn := q4KScalesMins(b[4:16])
		var hi uint32
		for j := range 8 {
			b[4+j] = sc[j]&15 | mn[j]<<4
			hi |= uint32(sc[j]>>4)<<(2*j) | uint32(mn[j]>>4)<<(16+2*j)
		}
		binary.LittleEndian.PutUint32(b[12:], hi)
		for k := range 4 {
			q := b[16+32*k : 48+32*k]
			copy(run[:], q)
			for i, j := range q4kSwizzle {
				q[i] = run[j]
			}
		}
	}
	return true, nil
}

// unswizzleQ4K writes the GGUF layout of the swizzled Q4_K bytes src into
// dst (same length).
func unswizzleQ4K(dst, src []byte) {
	copy(dst, src)
	for off := 0; off+144 <= len(src); off += 144 {
		var sc, mn [8]uint8
		hi := binary.LittleEndian.Uint32(src[off+12:])
		for j := range 8 {
			l := src[off+4+j]
			sc[j] = l&15 | uint8(hi>>(2*j)&3)<<4
			mn[j] = l>>4 | uint8(hi>>(16+2*j)&3)<<4
		}
		d := dst[off+4 : off+16]
		for j := range 4 {
			d[j] = sc[j] | sc[j+4]>>4<<6
			d[4+j] = mn[j] | mn[j+4]>>4<<6
			d[8+j] = sc[j+4]&15 | mn[j+4]&15<<4
		}
		for k := range 4 {
			q := src[off+16+32*k : off+48+32*k]
			d := dst[off+16+32*k : off+48+32*k]
			for i, j := range q4kSwizzle {
				d[j] = q[i]
			}
		}
	}
}

// dotQ4KSwizzledRow is the per-row product of a swizzled Q4_K row: the
// generic kernel on the row put back in GGUF's layout. Nothing hot calls
// it (the swizzled kernels' batched form serves every vector count).
func dotQ4KSwizzledRow(w []byte, y []blockQ8K) float32 {
	buf := make([]byte, len(w))
	unswizzleQ4K(buf, w)
	return dotQ4KQ8KGeneric(buf, y)
}
