package quant

import (
	"errors"
	"fmt"
	"math"
)

// Option is one candidate of a knapsack item: its size and its error.
type Option struct {
	Bytes int64
	Err   float64
}

// ErrBudgetTooSmall is wrapped when no choice fits the budget.
var ErrBudgetTooSmall = errors.New("budget below the smallest possible model")

// knapsackUnits is the resolution of the DP: the capacity is cut into at
// most this many units and each option's size rounded up to whole units,
// so a solution never exceeds the capacity and loses at most one unit per
// item against the exact optimum.
const knapsackUnits = 1 << 15

// SolveKnapsack solves the multiple-choice knapsack: pick exactly one
// option per item so that the summed Bytes stay within capacity and the
// summed Err is smallest. It is an exact dynamic programme over capacity
// units (O(items × options × units)), which fits because the number of
// (layer, part) items is small. It returns the chosen option index per
// item, or an error wrapping ErrBudgetTooSmall naming the smallest total.
func SolveKnapsack(items [][]Option, capacity int64) ([]int, error) {
	var minTotal int64
	for i, opts := range items {
		if len(opts) == 0 {
			return nil, fmt.Errorf("quant: knapsack item %d has no options", i)
		}
		m := opts[0].Bytes
		for _, o := range opts {
			m = min(m, o.Bytes)
		}
		minTotal += m
	}
	if capacity < minTotal {
		return nil, fmt.Errorf("quant: %w: the parts need at least %d bytes, the budget leaves %d", ErrBudgetTooSmall, minTotal, capacity)
	}
	unit := max(1, (capacity+knapsackUnits-1)/knapsackUnits)
	C := int(capacity / unit)
	inf := math.Inf(1)
	dp := make([]float64, C+1) // dp[c]: least error of the items so far within c units
	next := make([]float64, C+1)
	choice := make([][]uint8, len(items))
	for i, opts := range items {
		if len(opts) > 255 {
			return nil, fmt.Errorf("quant: knapsack item %d has %d options (at most 255)", i, len(opts))
		}
		choice[i] = make([]uint8, C+1)
		cost := make([]int, len(opts))
		for k, o := range opts {
			cost[k] = int((o.Bytes + unit - 1) / unit)
		}
		for c := 0; c <= C; c++ {
			best, bk := inf, 0
			for k, o := range opts {
				if cost[k] <= c {
					if v := dp[c-cost[k]] + o.Err; v < best {
						best, bk = v, k
					}
				}
			}
			next[c], choice[i][c] = best, uint8(bk)
		}
		dp, next = next, dp
	}
	if math.IsInf(dp[C], 1) {
		// Rounding to units made the tightest fit infeasible.
		return nil, fmt.Errorf("quant: %w: the parts need at least %d bytes, the budget leaves %d", ErrBudgetTooSmall, minTotal+int64(len(items))*unit, capacity)
	}
	out := make([]int, len(items))
	c := C
	for i := len(items) - 1; i >= 0; i-- {
		k := int(choice[i][c])
		out[i] = k
		c -= int((items[i][k].Bytes + unit - 1) / unit)
	}
	return out, nil
}
