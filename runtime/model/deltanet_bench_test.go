package model

import "testing"

// BenchmarkDeltaUpdate measures one head's recurrence step at the
// 35B-A3B head width (128), with readout.
func BenchmarkDeltaUpdate(b *testing.B) {
	const D = 128
	S := make([]float32, D*D)
	k, v, q, o, acc := make([]float32, D), make([]float32, D), make([]float32, D), make([]float32, D), make([]float32, D)
	for i := range D {
		k[i], v[i], q[i] = float32(i%7)/7, float32(i%5)/5, float32(i%3)/3
	}
	b.ReportAllocs()
	for b.Loop() {
		deltaUpdate(S, k, v, q, o, acc, 0.9, 0.5)
	}
	b.SetBytes(4 * D * D)
}
