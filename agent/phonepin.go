package agent

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"strconv"

	"github.com/lesfarm/lesfarm/protocol"
)

// Cluster names of PhoneHygiene.Pin (agent --adb-pin).
const (
	PinLittle = "little" // the cluster with the lowest max frequency
	PinBig    = "big"    // the fastest cluster of more than one core
	PinPrime  = "prime"  // the cluster with the highest max frequency
)

// ValidPhonePin reports whether s names a cluster PhoneHygiene.Pin
// accepts: "", none, little, big, prime, or a cluster index 0..15 (the
// clusters ordered by max frequency, slowest first).
func ValidPhonePin(s string) bool {
	switch s {
	case "", protocol.PinNone, PinLittle, PinBig, PinPrime:
		return true
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n < protocol.MaxPhoneClusters && strconv.Itoa(n) == s
}

// PinCPUs returns the CPUs of the cluster sel names among a phone's
// cpufreq clusters, nil for "" and none. Clusters are ordered by max
// frequency, slowest first: little is the first, prime the last, big the
// fastest with more than one CPU (prime when every cluster has one), and
// an index counts in that order. A cluster that does not exist, or
// clusters without a readable max frequency, are an error that says so.
func PinCPUs(clusters []protocol.CPUCluster, sel string) ([]int, error) {
	if sel == "" || sel == protocol.PinNone {
		return nil, nil
	}
	if !ValidPhonePin(sel) {
		return nil, fmt.Errorf("pin %q: use none, little, big, prime or a cluster index", sel)
	}
	cs := slices.DeleteFunc(slices.Clone(clusters), func(c protocol.CPUCluster) bool { return len(c.CPUs) == 0 || c.MaxKHz <= 0 })
	if len(cs) == 0 {
		return nil, fmt.Errorf("pin %s: the phone shows no cpufreq cluster with its CPUs and max frequency", sel)
	}
	slices.SortStableFunc(cs, func(a, b protocol.CPUCluster) int {
		return cmp.Or(cmp.Compare(a.MaxKHz, b.MaxKHz), cmp.Compare(slices.Min(a.CPUs), slices.Min(b.CPUs)))
	})
	var c protocol.CPUCluster
	switch sel {
	case PinLittle:
		c = cs[0]
	case PinPrime:
		c = cs[len(cs)-1]
	case PinBig:
		c = cs[len(cs)-1]
		for i := len(cs) - 1; i >= 0; i-- {
			if len(cs[i].CPUs) > 1 {
				c = cs[i]
				break
			}
		}
	default:
		i, _ := strconv.Atoi(sel)
		if i >= len(cs) {
			return nil, fmt.Errorf("pin %s: the phone has %d clusters (0..%d, slowest first)", sel, len(cs), len(cs)-1)
		}
		c = cs[i]
	}
	return slices.Sorted(slices.Values(c.CPUs)), nil
}

// cpuMask is the hexadecimal affinity mask of cpus, as taskset takes it.
func cpuMask(cpus []int) string {
	m := new(big.Int)
	for _, c := range cpus {
		m.SetBit(m, c, 1)
	}
	return m.Text(16)
}
