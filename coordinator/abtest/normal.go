package abtest

import "math"

// normalSF is the standard normal survival function P(Z > z).
func normalSF(z float64) float64 { return float64(0.5 * math.Erfc(z/math.Sqrt2)) }

// normalQuantile is the standard normal quantile Φ⁻¹(p) for 0 < p < 1.
func normalQuantile(p float64) float64 { return float64(math.Sqrt2 * math.Erfinv(2*p-1)) }
