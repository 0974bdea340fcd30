//go:build (!amd64 && !arm64) || purego

package tensor

// decayAddDotAsm has no assembly here: DecayAddDot runs decayAddDotGo.
func decayAddDotAsm(st []float32, d float32, a, x, q, o, k2, kn []float32) bool { return false }
